"""End-to-end runs of the single-controller loop on the tiny model (local executor, FSDP2 on gloo, HF rollout).

Each run is real: parquet files, the tokenizer's chat template, the HF sampler, FSDP2 updates, weight
syncs with checksum checks, a custom reward function from a file, metrics written to the run directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import make_tiny_task
from rlcore_testkit.runs import tiny_run as run_tiny

import rlcore
from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.plugins import make_plugin_manager, set_plugin_manager
from rlcore.tracking.sinks import read_metrics


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Train/test parquet files and a custom reward function file."""
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def tiny_run(tmp_path: Path, model_dir: Path, task: dict[str, Path], *extra: str) -> tuple[dict[str, Any], Path]:
    """Two steps of the tiny task, with the reward bonus set through reward_kwargs."""
    return run_tiny(tmp_path, model_dir, task, "custom_reward_function.reward_kwargs.bonus=0.0", *extra)


class Recorder:
    """A plugin recording every lifecycle hook call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @rlcore.hookimpl
    def on_run_start(self, run):
        self.calls.append(("on_run_start", {"run": run}))

    @rlcore.hookimpl
    def on_step_end(self, run, step, metrics):
        metrics["plugin/seen_step"] = float(step)
        self.calls.append(("on_step_end", {"step": step, "metrics": dict(metrics)}))

    @rlcore.hookimpl
    def on_validation_end(self, run, step, metrics):
        self.calls.append(("on_validation_end", {"step": step, "metrics": dict(metrics)}))

    @rlcore.hookimpl
    def on_checkpoint_saved(self, run, step, path):
        self.calls.append(("on_checkpoint_saved", {"step": step, "path": path}))

    @rlcore.hookimpl
    def on_run_end(self, run, status):
        self.calls.append(("on_run_end", {"status": status}))

    def named(self, name: str) -> list[dict[str, Any]]:
        """The arguments of every call of hook ``name``."""
        return [args for hook, args in self.calls if hook == name]


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]):
    """One GRPO run (with KL loss and KL-in-reward, so the reference model is used) and a recording plugin."""
    manager = make_plugin_manager()
    recorder = Recorder()
    manager.add_plugin(recorder, "recorder")
    previous = set_plugin_manager(manager)
    try:
        last, run_dir = tiny_run(
            tmp_path_factory.mktemp("grpo"),
            tiny_model_dir,
            task,
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "algorithm.use_kl_in_reward=true",
            "trainer.save_freq=2",
            "trainer.logger=[console]",
            "trainer.log_val_generations=2",
            "trainer.report=true",
        )
    finally:
        set_plugin_manager(previous)
    return {"last": last, "run_dir": run_dir, "recorder": recorder}


def test_grpo_run_writes_verl_named_metrics(recorded_run) -> None:
    rows = read_metrics(recorded_run["run_dir"] / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    step = rows[1]
    for key in (
        "critic/score/mean",
        "critic/rewards/mean",
        "critic/advantages/mean",
        "response_length/mean",
        "actor/pg_loss",
        "actor/ppo_kl",
        "actor/pg_clipfrac",
        "actor/entropy",
        "actor/kl_loss",
        "actor/grad_norm",
        "actor/lr",
        "actor/reward_kl_penalty",
        "timing_s/gen",
        "timing_s/ref",
        "timing_s/old_log_prob",
        "timing_s/update_actor",
        "timing_s/step",
        "perf/throughput",
        "rollout/weight_checksum_diff",
        "rollout/rows_per_chunk",
        "val-core/tiny/digits/reward/mean@1",
    ):
        assert key in step, key
    assert rows[0]["val-core/tiny/digits/reward/mean@1"] is not None
    assert step["rollout/weight_checksum_diff"] == 0
    assert "critic/vf_loss" not in step, "GRPO needs no critic"
    worker = {key: value for key, value in step.items() if key.startswith("timing_worker_s/")}
    assert {"timing_worker_s/generate_sequences", "timing_worker_s/update_actor"} <= set(worker)
    outside = step["timing_s/step"] - sum(worker.values())
    assert step["timing_s/outside_worker"] == pytest.approx(outside)
    assert 0 <= step["perf/outside_worker_share"] < 1


def test_grpo_run_directory(recorded_run) -> None:
    run_dir = recorded_run["run_dir"]
    for name in ("config.yaml", "plugins.json", "derived.json", "summary.json", "reward_curve.png"):
        assert (run_dir / name).is_file(), name
    plugins = json.loads((run_dir / "plugins.json").read_text())
    assert plugins["rlcore-plugin-grpo"]["status"] == "ok"
    derived = json.loads((run_dir / "derived.json").read_text())
    assert derived["responses_per_step"] == 16 and derived["mini_batches_per_epoch"] == 2
    table = [json.loads(line) for line in (run_dir / "tables" / "val_generations.jsonl").read_text().splitlines()]
    assert [row["step"] for row in table] == [0, 0, 1, 1, 2, 2]
    assert {"prompt", "response", "score"} <= set(table[0]) and "+" in table[0]["prompt"]


def test_hook_on_run_start(recorded_run) -> None:
    (call,) = recorded_run["recorder"].named("on_run_start")
    run = call["run"]
    assert run.run_dir == recorded_run["run_dir"]
    assert run.config.algorithm.adv_estimator == "grpo"
    assert "rlcore-plugin-grpo" in run.plugins


def test_hook_on_step_end(recorded_run) -> None:
    calls = recorded_run["recorder"].named("on_step_end")
    assert [c["step"] for c in calls] == [1, 2]
    assert "actor/pg_loss" in calls[0]["metrics"]
    rows = read_metrics(recorded_run["run_dir"] / "metrics.jsonl")
    assert rows[1]["plugin/seen_step"] == 1.0, "metrics added by the hook are logged"


def test_hook_on_validation_end(recorded_run) -> None:
    calls = recorded_run["recorder"].named("on_validation_end")
    assert [c["step"] for c in calls] == [0, 1, 2]
    assert all("val-core/tiny/digits/reward/mean@1" in c["metrics"] for c in calls)


def test_hook_on_checkpoint_saved(recorded_run) -> None:
    (call,) = recorded_run["recorder"].named("on_checkpoint_saved")
    assert call["step"] == 2
    path = Path(call["path"])
    assert path.name == "global_step_2" and (path / "trainer_state.json").is_file()
    assert (path.parent / "latest_checkpointed_iteration.txt").read_text() == "2"


def test_hook_on_run_end(recorded_run) -> None:
    assert recorded_run["recorder"].named("on_run_end") == [{"status": "completed"}]
    assert recorded_run["recorder"].calls[-1][0] == "on_run_end"


def test_ppo_with_gae_and_critic(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=gae",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "critic.optim.lr=1e-3",
    )
    for key in (
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/values/mean",
        "critic/vf_explained_var",
        "timing_s/values",
        "timing_s/update_critic",
        "actor/pg_loss",
    ):
        assert key in last, key
    assert "timing_s/ref" not in last, "no reference model without KL"


def test_critic_warmup_freezes_the_actor(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=gae",
        "trainer.critic_warmup=2",
        "critic.ppo_micro_batch_size_per_gpu=4",
    )
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    rows = {r["step"]: r for r in read_metrics(run_dir / "metrics.jsonl")}
    assert "actor/pg_loss" not in rows[1] and "critic/vf_loss" in rows[1]
    assert "actor/pg_loss" in rows[2]


def test_estimator_needing_a_critic_refuses_a_disabled_critic(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    with pytest.raises(rlcore.errors.RLCoreError, match="needs a critic but critic.enable=false"):
        tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=gae", "critic.enable=false")


def _with_plugin(**hooks):
    """Install a fresh manager with a plugin made of ``hooks``; returns (manager, previous manager)."""
    import types

    manager = make_plugin_manager()
    plugin = types.SimpleNamespace(**{name: rlcore.hookimpl(fn) for name, fn in hooks.items()})
    manager.add_plugin(plugin, "test-plugin")
    return manager, set_plugin_manager(manager)


def _one_group_filter(batch, config):
    first = batch["uid"][0]
    return batch[batch["uid"] == first], {"filter/seen": float(len(batch))}


def _drop_all_filter(batch, config):
    return batch[batch["uid"] == "no such uid"], {}


def test_batch_filter_regenerates_until_enough_groups(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    def register_batch_filters(register):
        register("one-group", _one_group_filter)
        register("drop-all", _drop_all_filter)

    _, previous = _with_plugin(register_batch_filters=register_batch_filters)
    try:
        last, _ = tiny_run(
            tmp_path / "a", tiny_model_dir, task, "algorithm.adv_estimator=grpo", "algorithm.batch_filters=[one-group]"
        )
        assert last["batch_filter/gen_rounds"] == 4.0 and last["batch_filter/kept_prompts"] == 4.0
        assert last["response_length/mean"] > 0
        with pytest.raises(
            rlcore.errors.RLCoreError, match="kept 0 of the 4 prompt groups a step needs after 3 generation rounds"
        ):
            tiny_run(
                tmp_path / "b",
                tiny_model_dir,
                task,
                "algorithm.adv_estimator=grpo",
                "algorithm.batch_filters=[drop-all]",
                "algorithm.max_num_gen_batches=3",
            )
    finally:
        set_plugin_manager(previous)


def test_greedy_baseline_is_provided_to_estimators_that_need_it(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    seen = {}

    def baseline_estimator(*, token_level_rewards, response_mask, index, config, reward_baselines=None, **_):
        seen["baselines"] = reward_baselines
        scores = token_level_rewards.sum(-1)
        advantages = (scores - reward_baselines).unsqueeze(-1) * response_mask
        return advantages, advantages

    def register_advantage_estimators(register):
        register("greedy-baseline", baseline_estimator, spec=AdvantageEstimatorSpec(needs_greedy_baseline=True))

    _, previous = _with_plugin(register_advantage_estimators=register_advantage_estimators)
    try:
        last, _ = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=greedy-baseline")
    finally:
        set_plugin_manager(previous)
    baselines = seen["baselines"]
    assert baselines.shape == (16,), "one baseline per response"
    assert all(len(set(baselines[i : i + 4].tolist())) == 1 for i in range(0, 16, 4)), "shared within a prompt group"
    assert "timing_s/gen_max" in last
