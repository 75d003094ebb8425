"""Every accepted config key has an effect, and meaningless sizes fail the dry run.

The unread-key test walks the default config (rlcore's and every installed plugin's sections) and looks for
each key's name in the code of rlcore and its plugins: as an attribute (``cfg.trainer.save_freq``), a keyword
argument, or a word of a string that is not a docstring (``select(config, "trainer.save_freq")``). A key is
also read when another default interpolates it (``${actor_rollout_ref.actor.optim.clip_grad}``) or when
:data:`rlcore.config.unsupported.UNSUPPORTED_VALUES` rejects its non-default value.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rlcore_testkit import runs

from rlcore.config.loader import default_config, flatten, known_keys
from rlcore.config.unsupported import UNSUPPORTED_VALUES

ROOT = Path(__file__).resolve().parents[1]
#: the key tables of the config package itself: a key named there is not read by that
TABLES = {ROOT / "core" / "rlcore" / "config" / name for name in ("unsupported.py", "aliases.py", "ranges.py")}


def _code_words() -> set[str]:
    """Attribute names, keyword names and the words of non-docstring strings in rlcore's and the plugins' code."""
    words: set[str] = set()
    files = [*(ROOT / "core" / "rlcore").rglob("*.py"), *(ROOT / "plugins").glob("*/src/**/*.py")]
    for path in files:
        if path in TABLES or "templates" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                words.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                words.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                words.update(re.split(r"\W+", node.value))
    return words


def test_every_default_key_is_read_by_some_code() -> None:
    defaults = default_config()
    keys = known_keys(defaults)
    interpolated = {
        match
        for value in flatten(OmegaConf.to_container(defaults, resolve=False)).values()
        if isinstance(value, str)
        for match in re.findall(r"\$\{([\w.]+)\}", value)
    }
    words = _code_words()
    unread = sorted(
        key
        for key in keys.leaves | keys.free
        if key.rsplit(".", 1)[-1] not in words and key not in interpolated and key not in UNSUPPORTED_VALUES
    )
    assert unread == [], f"config keys that no code reads: {unread}"


def dry_run(*args: str):
    """``rlcore run --dry-run`` with a model and data path, plus ``args``."""
    return runs.dry_run("data.train_files=x.parquet", "actor_rollout_ref.model.path=m", *args)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "actor_rollout_ref.rollout.response_length=0",
            "actor_rollout_ref.rollout.response_length must be a positive integer, got 0",
        ),
        ("data.max_response_length=0", "data.max_response_length must be a positive integer, got 0"),
        ("trainer.total_training_steps=0", "trainer.total_training_steps must be a positive integer or null, got 0"),
        ("trainer.total_epochs=0", "trainer.total_epochs must be a positive integer, got 0"),
        ("trainer.total_epochs=-1", "trainer.total_epochs must be a positive integer, got -1"),
        ("actor_rollout_ref.rollout.val_kwargs.n=0", "val_kwargs.n must be a positive integer, got 0"),
        ("data.val_batch_size=0", "data.val_batch_size must be a positive integer or null, got 0"),
        ("reward_model.scorer_timeout=-1", "reward_model.scorer_timeout must be a number of seconds >= 0"),
        ("trainer.max_nonfinite_steps=0", "trainer.max_nonfinite_steps must be a positive integer, got 0"),
        ("actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.hybrid_engine=False is not supported"),
        ("trainer.use_legacy_worker_impl=enable", "verl's legacy workers are not available"),
        ("actor_rollout_ref.model.use_liger=true", "use_liger=true needs a CUDA device"),
        ("actor_rollout_ref.rollout.temperature=-0.5", "temperature must be a number >= 0, got -0.5"),
    ],
)
def test_meaningless_values_fail_the_dry_run(override: str, message: str) -> None:
    result = dry_run(override)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_all_value_problems_are_reported_together() -> None:
    result = dry_run("trainer.total_epochs=0", "actor_rollout_ref.rollout.response_length=0", "data.nope=1")
    assert result.exit_code == 2
    for part in ("trainer.total_epochs", "response_length", "data.nope"):
        assert part in result.output


def test_speed_settings_of_verl_are_named_as_changing_nothing() -> None:
    result = dry_run("data.dataloader_num_workers=8", "actor_rollout_ref.actor.entropy_checkpointing=true")
    assert result.exit_code == 0, result.output
    assert "note: data.dataloader_num_workers=8 changes nothing in rlcore" in result.output
    assert "note: actor_rollout_ref.actor.entropy_checkpointing=True changes nothing in rlcore" in result.output


def test_verl_clip_grad_sets_the_clip_the_workers_read() -> None:
    result = dry_run("actor_rollout_ref.actor.optim.clip_grad=0.25", "critic.optim.clip_grad=0.5")
    assert result.exit_code == 0, result.output
    config = OmegaConf.create(result.output[result.output.index("data:") :])
    assert config.actor_rollout_ref.actor.grad_clip == 0.25
    assert config.critic.grad_clip == 0.5


def test_verls_default_optimizer_is_accepted_and_another_is_named() -> None:
    """verl's defaults ``optim.optimizer=AdamW`` / ``optimizer_impl=torch.optim`` (as its FSDP-Turbo scripts spell
    them out) are what rlcore steps; another optimizer is the missing feature, named."""
    same = dry_run(
        "actor_rollout_ref.actor.optim.optimizer=AdamW",
        "actor_rollout_ref.actor.optim.optimizer_impl=torch.optim",
        "critic.optim.optimizer=AdamW",
    )
    assert same.exit_code == 0, same.output
    other = dry_run("actor_rollout_ref.actor.optim.optimizer=SGD")
    assert other.exit_code == 2
    assert "actor_rollout_ref.actor.optim.optimizer: a choice of optimizer (rlcore uses torch's AdamW)" in other.output
