"""The typed config sections (:mod:`rlcore.config.schema`): the one place of defaults (``defaults.yaml`` is
rendered from them), built from the resolved tree with verl's key names, every problem naming its key, and no
reader in the core restating a default."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from rlcore.config import ConfigError, check_values, load_config
from rlcore.config.defaults_file import DEFAULTS_FILE, WRITE_COMMAND, render
from rlcore.config.loader import core_defaults
from rlcore.config.schema import (
    ActorCheckpointConfig,
    DataConfig,
    Section,
    Sections,
    TrainerConfig,
    default_section,
    default_tree,
)
from rlcore.config.sections.base import is_interpolation
from rlcore.config.sections.rollout import MultiTurnConfig, RolloutConfig
from tests.verl_scripts_harness import verl_arguments

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core" / "rlcore"
VERL09_EXAMPLES = Path(__file__).parent / "verl_examples"
EXAMPLE = "examples/ppo_trainer/run_deepseek7b_llm.sh"


def section_fields(kind: type, path: str) -> Iterator[tuple[str, type]]:
    """``(dotted key, annotation)`` of every leaf field of the section class ``kind`` at ``path``, recursively."""
    hints = typing.get_type_hints(kind)
    for field in dataclasses.fields(kind):
        key = f"{path}.{field.name}" if path else field.name
        hint = hints[field.name]
        if isinstance(hint, type) and (issubclass(hint, Section) or dataclasses.is_dataclass(hint)):
            yield from section_fields(hint, key)
        else:
            yield key, hint


def test_the_sections_build_from_the_defaults_with_the_yaml_values() -> None:
    config = load_config([], [], [])
    sections = Sections.from_tree(config)
    assert sections.actor_rollout_ref.actor.ppo_mini_batch_size == config.actor_rollout_ref.actor.ppo_mini_batch_size
    assert sections.critic.ppo_epochs == config.actor_rollout_ref.actor.ppo_epochs, "interpolations are resolved"
    assert sections.actor_rollout_ref.actor.checkpoint.save_contents == ["model", "optimizer", "extra", "hf_model"]
    assert sections.trainer.executor in ("local", "ray"), "run-time resolution (auto) happened in load_config"
    for key, _ in section_fields(Sections, ""):
        value = OmegaConf.select(config, key)
        built = sections
        for part in key.split("."):
            built = getattr(built, part)
        assert built == (OmegaConf.to_container(value) if OmegaConf.is_config(value) else value), key


def test_the_sections_pickle_for_workers_in_other_processes() -> None:
    sections = Sections.from_tree(load_config([], [], []))
    assert pickle.loads(pickle.dumps(sections)) == sections


def test_the_sections_build_from_a_verl_example_script(tmp_path: Path) -> None:
    """verl's own PPO script (run with its entry point shimmed, :mod:`tests.verl_scripts_harness`) gives
    sections holding the script's values."""
    config = load_config([], verl_arguments(VERL09_EXAMPLES, EXAMPLE, tmp_path), [])
    sections = Sections.from_tree(config)
    assert sections.algorithm.adv_estimator == "gae"
    assert sections.data.train_batch_size == 1024
    assert sections.actor_rollout_ref.actor.ppo_mini_batch_size == 256
    assert sections.critic.ppo_micro_batch_size_per_gpu == 32
    assert sections.critic.model.path == "deepseek-ai/deepseek-llm-7b-chat"
    assert sections.actor_rollout_ref.rollout.name == "vllm"


def test_every_key_of_the_defaults_is_a_field_with_its_default() -> None:
    """The dataclasses are the defaults: their tree is ``defaults.yaml``'s, key for key, in the same order."""
    defaults = yaml.safe_load(DEFAULTS_FILE.read_text())
    assert default_tree() == defaults
    assert list(flatten_keys(default_tree())) == list(flatten_keys(defaults)), "the field order is the key order"
    for kind in (Sections, *all_sections()):
        for field in dataclasses.fields(kind):
            assert field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING, (
                f"{kind.__name__}.{field.name} has no default"
            )


def flatten_keys(tree: dict, prefix: str = "") -> Iterator[str]:
    """The dotted keys of ``tree`` in order, sections included."""
    for key, value in tree.items():
        yield prefix + key
        if isinstance(value, dict):
            yield from flatten_keys(value, f"{prefix}{key}.")


def all_sections(kind: type = Section) -> Iterator[type]:
    """Every dataclass subclass of ``kind``, recursively."""
    for sub in kind.__subclasses__():
        if dataclasses.is_dataclass(sub):
            yield sub
        yield from all_sections(sub)


def test_the_loader_builds_its_defaults_from_the_dataclasses_not_the_file() -> None:
    assert core_defaults() == default_tree()
    assert core_defaults() is not core_defaults(), "each call gets its own copy to merge plugin sections into"


def test_the_committed_defaults_file_is_the_rendering_of_the_dataclasses() -> None:
    """Edit a field (its default or its ``#:`` docstring) and this fails until the file is regenerated."""
    assert DEFAULTS_FILE.read_text() == render(), f"{DEFAULTS_FILE.name} is stale: run `{WRITE_COMMAND}`"


def test_the_rendering_carries_the_docstrings_and_the_references() -> None:
    text = render()
    assert "  dataset: rl                       # dataset component (kind `dataset`)\n" in text
    assert "    grad_clip: ${actor_rollout_ref.actor.optim.clip_grad}" in text
    assert is_interpolation(Sections().critic.ppo_epochs), "a reference stays unresolved in the defaults"


def test_a_stale_defaults_file_fails_the_check_and_names_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import rlcore.config.defaults_file as defaults_file

    stale = tmp_path / "defaults.yaml"
    stale.write_text(DEFAULTS_FILE.read_text().replace("train_batch_size: 1024", "train_batch_size: 512"))
    monkeypatch.setattr(defaults_file, "DEFAULTS_FILE", stale)
    assert defaults_file.main(["--check"]) == 1
    assert WRITE_COMMAND in capsys.readouterr().err
    assert defaults_file.main(["--write"]) == 0
    assert defaults_file.main(["--check"]) == 0
    assert stale.read_text() == DEFAULTS_FILE.read_text()


def test_every_field_has_a_docstring_comment() -> None:
    """A field's docstring is the ``#:`` comment above it (a subsection's too: it is its key's comment)."""
    for path in sorted((CORE / "config" / "sections").glob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef) or not any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                continue
            for item in node.body:
                if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                    continue
                comment = lines[item.lineno - 2].strip()
                assert comment.startswith("#:"), f"{path.name}: {node.name}.{item.target.id} has no #: comment"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.truncation=sideways", "data.truncation must be one of left, right, middle, error, got 'sideways'"),
        ("trainer.placement=spread", "trainer.placement must be one of colocated, split, got 'spread'"),
        ("trainer.total_epochs=0", "trainer.total_epochs must be a positive integer, got 0"),
        ("trainer.stop_grace_s=-1", "trainer.stop_grace_s must be a number of seconds >= 0 (0 or null: no limit)"),
        ("critic.loss_agg_mode=mean", "unknown critic.loss_agg_mode 'mean'; expected one of:"),
        (
            "actor_rollout_ref.actor.checkpoint.load_contents=[model,weights]",
            "actor_rollout_ref.actor.checkpoint.load_contents has unknown item(s) ['weights']",
        ),
    ],
)
def test_a_bad_value_names_its_key(override: str, message: str) -> None:
    config = load_config([], [override], [])
    with pytest.raises(ConfigError) as error:
        Sections.from_tree(config)
    assert any(message in problem for problem in error.value.problems), error.value.problems
    with pytest.raises(ConfigError) as dry_run:
        check_values(config)
    assert any(message in problem for problem in dry_run.value.problems), "the dry run reports it too"


def test_every_problem_of_every_section_is_reported_at_once() -> None:
    config = load_config([], ["data.truncation=sideways", "trainer.total_epochs=0", "trainer.stop_grace_s=-1"], [])
    with pytest.raises(ConfigError) as error:
        Sections.from_tree(config)
    assert len(error.value.problems) == 3, error.value.problems


def test_a_missing_key_is_named() -> None:
    config = load_config([], [], [])
    del config.trainer["seed"]
    with pytest.raises(ConfigError, match=r"trainer\.seed is missing from the config"):
        TrainerConfig.from_tree(config)
    del config["data"]
    with pytest.raises(ConfigError, match="data is missing from the config"):
        DataConfig.from_tree(config)


def test_one_section_builds_alone() -> None:
    checkpoint = ActorCheckpointConfig.from_tree(load_config([], [], []))
    assert checkpoint.key("save_contents") == "actor_rollout_ref.actor.checkpoint.save_contents"


def test_a_section_builds_from_its_defaults_with_some_values_replaced() -> None:
    """``default_section``: the defaults with their references resolved as the loader resolves them, the values
    given (a subsection's merged key by key) in place, and the section's checks run."""
    rollout = default_section(RolloutConfig, response_length=7, val_kwargs={"temperature": 0.5})
    loaded = RolloutConfig.from_tree(load_config([], ["actor_rollout_ref.rollout.response_length=7"], []))
    assert rollout == dataclasses.replace(loaded, val_kwargs=dataclasses.replace(loaded.val_kwargs, temperature=0.5))
    assert rollout.prompt_length == DataConfig().max_prompt_length and not is_interpolation(rollout.prompt_length)
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.response_length must be a positive integer"):
        default_section(RolloutConfig, response_length=0)
    with pytest.raises(TypeError, match="MultiTurnConfig has no PATH"):
        default_section(MultiTurnConfig)


def covered_keys() -> set[str]:
    """The leaf names of the keys the typed sections cover."""
    return {key.rpartition(".")[2] for key, _ in section_fields(Sections, "")}


def restated_defaults(path: Path) -> Iterator[str]:
    """``file:line call`` of every read of a covered key with a default: ``select(config, "k", default)`` or
    ``<...config...>.get("k", default)``."""
    covered = covered_keys()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "select" and len(node.args) == 3:
            key = node.args[1]
        elif isinstance(func, ast.Attribute) and func.attr == "get" and len(node.args) == 2:
            if "config" not in ast.unparse(func.value) and "section" not in ast.unparse(func.value):
                continue
            key = node.args[0]
        else:
            continue
        if isinstance(key, ast.Constant) and str(key.value).rpartition(".")[2] in covered:
            yield f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}"


def test_no_core_reader_restates_a_default_of_the_typed_sections() -> None:
    """Workers and the controller read the typed sections; a ``get("k", default)`` of a key they cover would
    write the default a second time."""
    files = [*sorted((CORE / "workers").glob("*.py")), *sorted((CORE / "controller").glob("*.py")), CORE / "run.py"]
    found = [hit for path in files for hit in restated_defaults(path)]
    assert not found, "\n".join(found)


def test_no_rollout_engine_restates_a_default_of_the_typed_sections() -> None:
    """Rollout engines, the core's rollout helpers and the LLM judge read the typed rollout section they are
    built with (``config_class``); a ``get("k", default)`` would be a second default that the run never uses."""
    files = [
        *sorted((CORE / "rollout").glob("*.py")),
        *sorted(ROOT.glob("plugins/rollout_*/src/*/*.py")),
        *sorted(ROOT.glob("plugins/judge/src/*/*.py")),
    ]
    found = [hit for path in files for hit in restated_defaults(path)]
    assert len(files) > 20 and not found, "\n".join(found)


#: subsections the core hands whole to a component (which reads its own keys), not read key by key
HANDED_TO_COMPONENTS = (
    "actor_rollout_ref.actor.policy_loss",
    "algorithm.kl_ctrl",
    "algorithm.pf_ppo",
    "algorithm.rollout_correction",
    "data.custom_cls",
)


def attribute_reads(path: Path) -> Iterator[tuple[str, int]]:
    """``(dotted key, line)`` of every ``config.a.b`` / ``self.config.a.b`` attribute chain in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        parts: list[str] = []
        current: ast.expr = node  # type: ignore[assignment]
        while isinstance(current, ast.Attribute):
            parts.append(current.attr)
            current = current.value
        parts.reverse()
        if isinstance(current, ast.Name) and current.id == "self" and parts[:1] == ["config"]:
            yield ".".join(parts[1:]), node.lineno
        elif isinstance(current, ast.Name) and current.id == "config" and parts:
            yield ".".join(parts), node.lineno


def test_every_key_the_core_reads_of_a_covered_section_has_a_field() -> None:
    """A leaf key of ``defaults.yaml`` that the workers, the controller or ``run.py`` read by attribute, in a
    section the typed sections cover, is a field of that section."""
    defaults = OmegaConf.create(default_tree())
    fields = {key for key, _ in section_fields(Sections, "")}
    covered = {key.rpartition(".")[0] for key in fields}
    files = [*sorted((CORE / "workers").glob("*.py")), *sorted((CORE / "controller").glob("*.py")), CORE / "run.py"]
    missing = []
    for path in files:
        for key, line in attribute_reads(path):
            if key.startswith(HANDED_TO_COMPONENTS) or key.rpartition(".")[0] not in covered:
                continue
            value = OmegaConf.select(defaults, key, default="<absent>")
            if value != "<absent>" and not isinstance(value, DictConfig) and key not in fields:
                missing.append(f"{path.relative_to(CORE)}:{line} reads {key}")
    assert not missing, "\n".join(sorted(set(missing)))
