"""Every hook: documented in docs/plugins.md, and exercised by a ``test_hook_<name>`` test.

The component hooks are tested here by registering a small plugin in-process and resolving the component
through the same path a run uses. The lifecycle hooks are tested in ``test_e2e.py`` on a real run.
"""

from __future__ import annotations

import contextlib
import re
import types
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rlcore_testkit import hookdocs

import rlcore
from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.config import ConfigError, load_config
from rlcore.config.schema import Sections
from rlcore.errors import RLCoreError

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "plugins.md"


def plugin(**hooks) -> types.SimpleNamespace:
    """A plugin object whose attributes are the given hookimpl functions."""
    return types.SimpleNamespace(**{name: rlcore.hookimpl(fn) for name, fn in hooks.items()})


def test_every_hook_is_documented_with_its_exact_signature() -> None:
    text = DOCS.read_text()
    for name in hookdocs.hook_names():
        assert f"### `{hookdocs.signature(name)}`" in text, f"{name} is not documented in docs/plugins.md"


def test_plugin_docs_are_up_to_date() -> None:
    assert hookdocs.render_reference() in DOCS.read_text(), "run: python -m rlcore_testkit.hookdocs"


def test_api_reference_is_up_to_date() -> None:
    """``docs/api.md`` lists every name of ``rlcore.api`` once, each with a summary, as rendered now."""
    import rlcore.api

    listed = [name for _, names in hookdocs.api_groups() for name in names]
    assert sorted(listed) == sorted(rlcore.api._LAZY)
    rendered = hookdocs.render_api_reference()
    assert "): \n" not in rendered + "\n" and not rendered.count("):\n"), "a public name has no summary"
    assert rendered in (ROOT / "docs" / "api.md").read_text(), "run: python -m rlcore_testkit.hookdocs"


@pytest.mark.parametrize("name", hookdocs.hook_names())
def test_every_hook_has_a_test(name: str) -> None:
    sources = "\n".join(p.read_text() for p in ROOT.glob("tests/test_*.py"))
    assert re.search(rf"^def test_hook_{name}\(", sources, re.M), f"no test_hook_{name} in tests/"


def _registers(registered, hook: str, kind: str, target: object, spec: object = None) -> object:
    def impl(register):
        register(f"test-{kind}", target, description="from a test", spec=spec)

    with registered(plugin(**{hook: impl}), name="hook-test") as manager:
        comp = manager.registry.get(kind, f"test-{kind}")
        assert comp.plugin == "hook-test" and comp.description == "from a test"
        return comp.load(), comp


class _Backend:
    @staticmethod
    def create_engine(request):
        return request


def test_hook_register_training_backends(registered) -> None:
    loaded, _ = _registers(registered, "register_training_backends", "training_backend", _Backend)
    assert loaded.create_engine("request") == "request"


def test_hook_register_rollout_engines(registered) -> None:
    loaded, _ = _registers(
        registered, "register_rollout_engines", "rollout_engine", "rlcore_plugin_hf.engine:HFRolloutEngine"
    )
    assert loaded.__name__ == "HFRolloutEngine"


def test_hook_register_reward_managers(registered) -> None:
    loaded, _ = _registers(
        registered, "register_reward_managers", "reward_manager", "rlcore.reward.managers:NaiveRewardManager"
    )
    assert callable(loaded)


def test_hook_register_reward_scorers(registered) -> None:

    from rlcore.reward.scoring import build_scorer

    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        return float(solution_str == ground_truth)

    def impl(register):
        register("my/source", scorer)

    with registered(plugin(register_reward_scorers=impl), name="scorer-plugin") as manager:
        score = build_scorer(
            Sections.from_tree(load_config(overrides=["data.train_files=x"])).custom_reward_function, manager.registry
        )
        assert score("my/source", "42", "42", None) == 1.0
        assert score("my/source", "41", "42", None) == 0.0


def test_hook_register_datasets(registered) -> None:
    from rlcore.data.custom import load_dataset_class

    class MyDataset:
        pass

    def impl(register):
        register("mine", MyDataset)

    with registered(plugin(register_datasets=impl), name="ds-plugin") as manager:
        assert (
            load_dataset_class(Sections.from_tree(load_config(overrides=["data.dataset=mine"])).data, manager.registry)
            is MyDataset
        )


def test_hook_register_advantage_estimators(registered) -> None:
    def estimate(**kwargs):
        return kwargs["token_level_rewards"], kwargs["token_level_rewards"]

    loaded, comp = _registers(
        registered,
        "register_advantage_estimators",
        "advantage_estimator",
        estimate,
        spec=AdvantageEstimatorSpec(needs_critic=True, min_group_size=2),
    )
    assert loaded is estimate
    assert comp.spec == AdvantageEstimatorSpec(needs_critic=True, min_group_size=2)


def test_hook_register_policy_losses(registered) -> None:
    from rlcore.algos.losses import build_actor_loss
    from rlcore.config.schema import ActorConfig

    calls = []

    def loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights=None):
        calls.append(loss_agg_mode)
        return (log_prob * advantages).sum(), {"actor/custom": 1.0}

    def impl(register):
        register("custom", loss)

    with registered(plugin(register_policy_losses=impl), name="loss-plugin"):
        import torch

        from rlcore.api.batch import Batch

        cfg = load_config(overrides=["actor_rollout_ref.actor.policy_loss.loss_mode=custom"])
        loss_fn = build_actor_loss(ActorConfig.from_tree(cfg))
        ones = torch.ones(2, 3)
        batch = Batch.from_dict({"old_log_probs": ones, "advantages": ones, "response_mask": ones})
        value, metrics = loss_fn(ones.clone().requires_grad_(), torch.zeros(2, 3), batch)
        assert value.item() == 6.0 and metrics["actor/custom"] == 1.0 and calls == ["token-mean"]


def test_hook_register_batch_filters(registered) -> None:
    def keep_all(batch, config):
        return batch, {"filter/kept": float(len(batch))}

    loaded, _ = _registers(registered, "register_batch_filters", "batch_filter", keep_all)
    assert loaded("abc", None) == ("abc", {"filter/kept": 3.0})


def test_hook_register_trackers(registered, tmp_path: Path) -> None:
    from rlcore.tracking.sinks import build_trackers

    logged = []

    class ListTracker:
        def __init__(self, project, experiment, config, run_dir):
            self.project = project

        def log(self, metrics, step):
            logged.append((step, dict(metrics)))

        def finish(self):
            logged.append("finished")

    def impl(register):
        register("list", ListTracker)

    with registered(plugin(register_trackers=impl), name="tracker-plugin") as manager:
        trackers = build_trackers(load_config(overrides=["trainer.logger=[list]"]), tmp_path, manager.registry)
        trackers.log({"a": 1.0}, step=3)
        trackers.finish()
    assert logged == [(3, {"a": 1.0}), "finished"]
    assert (tmp_path / "metrics.jsonl").exists()


def test_hook_register_presets(registered) -> None:
    def impl(register):
        register("short", {"trainer.total_epochs": 2, "actor_rollout_ref.rollout.n": 4})
        register("computed", lambda: {"data": {"max_prompt_length": 64}})

    with registered(plugin(register_presets=impl), name="preset-plugin"):
        cfg = load_config(presets=["short", "computed"], overrides=["actor_rollout_ref.rollout.n=5"])
    assert cfg.trainer.total_epochs == 2
    assert cfg.actor_rollout_ref.rollout.n == 5, "overrides win over presets"
    assert cfg.data.max_prompt_length == 64


def test_hook_config_defaults(registered) -> None:
    def defaults():
        return {"algorithm": {"my_coef": 0.5}, "mysection": {"enabled": False}}

    with registered(plugin(config_defaults=defaults), name="section-plugin") as manager:
        cfg = load_config(overrides=["algorithm.my_coef=0.7"])
        assert cfg.algorithm.my_coef == 0.7 and cfg.mysection.enabled is False
        with pytest.raises(ConfigError, match="wrong type"):
            load_config(overrides=["mysection.enabled=3"])

        def clashing():
            return {"algorithm": {"my_coef": 0.9}}

        other = plugin(config_defaults=clashing)
        with registered(other, name="clash-plugin"):
            with pytest.raises(ConfigError, match="section-plugin.*clash-plugin|clash-plugin.*section-plugin"):
                load_config(manager=manager)


_DRY_RUN_OVERRIDES = [
    "data.train_files=x.parquet",
    "actor_rollout_ref.model.path=m",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
]


def test_hook_plan_lines(registered, capsys) -> None:
    """A plugin's plan lines are printed by the dry run, which a plugin that asks for ``dry_run`` is told; one
    that raises stops it with its message."""
    from rlcore.run import run_training

    def plan_lines(config):
        if config.trainer.experiment_name == "refuse":
            raise RLCoreError("my-plugin cannot run this")
        return [f"my-plugin: {config.data.train_batch_size} prompts"]

    def dry_run_only(config, dry_run):
        return [f"dry-plugin: dry run {dry_run}"] if dry_run else None

    with (
        registered(plugin(plan_lines=plan_lines), name="plan-hook"),
        registered(plugin(plan_lines=dry_run_only), name="dry-plan-hook"),
    ):
        run_training([], _DRY_RUN_OVERRIDES, [], dry_run=True)
        out = capsys.readouterr().out
        assert "my-plugin: 4 prompts\n" in out and "dry-plugin: dry run True\n" in out
        with pytest.raises(RLCoreError, match="my-plugin cannot run this"):
            run_training([], [*_DRY_RUN_OVERRIDES, "trainer.experiment_name=refuse"], [], dry_run=True)


def test_hook_summary_lines(registered, capsys, tmp_path: Path) -> None:
    """A plugin's summary lines are printed after the summary's ``metrics:`` line, once ``summary.json`` holds
    the run's status."""
    import json

    from omegaconf import OmegaConf

    from rlcore.config.schema import TrainerConfig
    from rlcore.presets import PRESETS_FILE
    from rlcore.run import _summarise
    from rlcore.run_context import RunContext

    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "critic/score/mean": 0.5}) + "\n")
    (run_dir / PRESETS_FILE).write_text("[]")
    seen = []

    def summary_lines(run_dir, status):
        seen.append(json.loads((run_dir / "summary.json").read_text())["status"])
        return [f"my-plugin: {run_dir.name} {status}"]

    config = OmegaConf.create({"trainer": {"save_freq": -1}})
    with registered(plugin(summary_lines=summary_lines), name="summary-hook") as manager:
        _summarise(TrainerConfig(save_freq=-1), RunContext(config, run_dir), manager, {}, 1.0, "completed")
    out = capsys.readouterr().out.splitlines()
    assert seen == ["completed"]
    metrics = next(i for i, line in enumerate(out) if line.startswith("metrics:"))
    assert "my-plugin: run-1 completed" in out[metrics + 1 :]


def test_hook_register_commands(registered) -> None:
    def commands(cli):
        @cli.command(name="greet")
        @click.argument("who")
        def greet(who):
            click.echo(f"hi {who}")

    with registered(plugin(register_commands=commands), name="cmd-plugin") as manager:
        group = click.Group()
        manager.add_commands(group)
        result = CliRunner().invoke(group, ["greet", "rl"])
    assert result.output == "hi rl\n"


def test_broken_register_commands_marks_the_plugin(registered) -> None:
    def commands(cli):
        raise RuntimeError("cannot add commands")

    with registered(plugin(register_commands=commands), name="bad-cmd") as manager:
        manager.add_commands(click.Group())
        assert manager.records["bad-cmd"].status == "error"


def test_hook_step_extensions(registered, tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run with a plugin's step extension: its worker group is built and initialised, its stage's column
    and metric join the batch and the step's metrics, and its loss term replaces the actor loss."""
    from rlcore_testkit.runs import make_tiny_task, tiny_run

    from rlcore.api.extensions import StepExtension
    from rlcore.tracking.sinks import read_metrics

    extension = StepExtension(
        "lengths",
        worker="tests.extension_parts:ResponseLengthWorker",
        method="response_lengths",
        loss_term="tests.extension_parts:make_zero_term",
    )

    def step_extensions(config):
        return [extension] if config.trainer.experiment_name == "extended" else None

    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    with registered(plugin(step_extensions=step_extensions), name="extension-hook"):
        _, run_dir = tiny_run(tmp_path, tiny_model_dir, task, "trainer.experiment_name=extended")
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert len(rows) == 2
    for row in rows:
        assert row["lengths/mean"] == pytest.approx(row["response_length/mean"])
        assert row["actor/lengths_seen"] > 0 and row["timing_s/lengths"] > 0
        assert row["actor/grad_norm"] == 0.0, "the term's zero loss is what was backpropagated"
    with pytest.raises(RLCoreError, match="give both worker and method, or neither"):
        StepExtension("half", worker="a:B")
    with pytest.raises(RLCoreError, match="two plugins return a step extension named 'lengths'"):
        from rlcore.api.extensions import collect_step_extensions

        collect_step_extensions([[extension], None, [extension]])


def test_hook_on_config_resolved(registered, capsys) -> None:
    from rlcore.run import run_training

    def on_config_resolved(config):
        if config.trainer.experiment_name == "translate-me":
            config.algorithm.batch_filters = ["from-hook"]

    def register_batch_filters(register):
        register("from-hook", lambda batch, config: (batch, {}))

    with registered(
        plugin(on_config_resolved=on_config_resolved, register_batch_filters=register_batch_filters), name="config-hook"
    ):
        run_training(
            [],
            [
                "data.train_files=x.parquet",
                "actor_rollout_ref.model.path=m",
                "algorithm.adv_estimator=grpo",
                "data.train_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                "trainer.experiment_name=translate-me",
            ],
            [],
            dry_run=True,
        )
    assert "batch_filters:\n  - from-hook" in capsys.readouterr().out


class RecordingProfiler:
    """A real :class:`rlcore.api.profiling.Profiler` (and its step and worker sides) that notes each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def step_profiler(self, groups: Any) -> RecordingProfiler:
        self.calls.append(("step_profiler", groups.actor is not None))
        return self

    def worker_profiler(self, rank: int, device: Any, name: str) -> RecordingProfiler:
        self.calls.append(("worker_profiler", name, rank))
        return self

    def before_step(self, step: int, last: int) -> None:
        self.calls.append(("before_step", step, last))

    def after_step(self, step: int, last: int) -> None:
        self.calls.append(("after_step", step, last))

    def start(self, step: int, kind: str, plan: dict[str, Any]) -> None:
        self.calls.append(("start", step))

    def stop(self) -> list[str]:
        return []

    def finish(self) -> None:
        return None

    def _noted(self, *call: Any) -> contextlib.AbstractContextManager[None]:
        self.calls.append(call)
        return contextlib.nullcontext()

    def stage(self, method: str) -> contextlib.AbstractContextManager[None]:
        return self._noted("stage", method)

    def call_range(self, method: str) -> contextlib.AbstractContextManager[None]:
        return self._noted("call_range", method)

    def mini_batch(self, index: int) -> contextlib.AbstractContextManager[None]:
        return self._noted("mini_batch", index)

    def claim_rollout_trace(self) -> None:
        self.calls.append(("claim_rollout_trace",))


def test_hook_profiler(registered, tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run with a plugin's profiler: the controller calls it around every step, the worker gets its side,
    and every worker call, update mini-batch and generation reaches it."""
    from rlcore_testkit.runs import make_tiny_task, tiny_run

    from rlcore.api.profiling import NoProfiler, current_profiler, set_current_profiler

    recorder = RecordingProfiler()

    def profiler(config):
        return recorder if config.trainer.experiment_name == "profiled" else None

    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    try:
        with registered(plugin(profiler=profiler), name="profiler-hook"):
            tiny_run(tmp_path, tiny_model_dir, task, "trainer.experiment_name=profiled", "trainer.test_freq=-1")
        assert current_profiler() is recorder
    finally:
        set_current_profiler(NoProfiler())
    calls = recorder.calls
    steps = [call for call in calls if call[0] in ("before_step", "after_step")]
    assert steps == [("before_step", 1, 2), ("after_step", 1, 2), ("before_step", 2, 2), ("after_step", 2, 2)]
    assert ("step_profiler", True) in calls and ("worker_profiler", "actor_rollout", 0) in calls
    for method in ("generate_sequences", "update_actor"):
        assert ("stage", method) in calls and ("call_range", method) in calls
    assert ("mini_batch", 0) in calls and ("mini_batch", 1) in calls, "ppo_mini_batch_size=2 of 4 prompts"
    assert ("claim_rollout_trace",) in calls, "the hf engine asks for a rollout trace on every generation"


def test_two_plugins_answering_the_profiler_hook_are_an_error(registered) -> None:
    """A run has one profiler: a second answer is refused by name, never silently dropped."""
    from omegaconf import OmegaConf

    from rlcore.api.profiling import NoProfiler
    from rlcore.plugins import load_plugins, run_profiler

    config = OmegaConf.create({"global_profiler": {"tool": None}})
    with registered(plugin(profiler=lambda config: NoProfiler()), name="first-profiler"):
        with registered(plugin(profiler=lambda config: NoProfiler()), name="second-profiler"):
            with pytest.raises(RLCoreError) as caught:
                run_profiler(config, load_plugins())
    message = str(caught.value)
    assert "2 plugins answered the profiler hook" in message
    assert "first-profiler" in message and "second-profiler" in message


def test_a_profiling_tool_no_plugin_answers_names_the_profiler_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config with ``global_profiler.tool=torch`` and rlcore-plugin-profiler disabled (built by hand: the loader
    refuses the key, ``+`` or not, when no plugin declares it): no plugin answers the profiler hook, which names the
    plugin; without the key (the plugin's, absent) the run profiles nothing."""
    from omegaconf import OmegaConf

    from rlcore.api.profiling import NoProfiler
    from rlcore.plugins import make_plugin_manager, run_profiler

    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-profiler")
    without_profiler = make_plugin_manager()
    assert isinstance(run_profiler(OmegaConf.create({"trainer": {}}), without_profiler), NoProfiler)
    with pytest.raises(RLCoreError) as caught:
        run_profiler(OmegaConf.create({"global_profiler": {"tool": "torch"}}), without_profiler)
    assert str(caught.value) == (
        "global_profiler.tool=torch: profiling is provided by rlcore-plugin-profiler, which is installed but did not "
        "load (disabled or failed: see `rlcore plugins`)"
    )
