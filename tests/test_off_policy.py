"""One-step-off-policy training (``async_training``) on split placement with real Ray worker processes: the
batch a step trains on was generated one update earlier, the engine's log-probs show it, validation uses the
current weights, and a checkpoint with a batch in flight resumes to exactly the uninterrupted run.

The module's seven runs share the test process's local Ray with warm workers (:func:`one_ray`): each run attaches
to it and takes over the worker processes the last run left idle, instead of starting a Ray and new processes."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from rlcore_testkit.runs import comparable, make_tiny_task, tiny_run  # noqa: E402

from rlcore.checkpoint import read_rollout_states  # noqa: E402
from rlcore.config import ConfigError, check_values, load_config  # noqa: E402
from rlcore.controller.off_policy import STATE_FILE  # noqa: E402
from rlcore.tracking.sinks import read_metrics  # noqa: E402

#: one trainer and one rollout process, the engine's log-probs, token-level importance weights
ASYNC = (
    "async_training.enable=true",
    "trainer.executor=ray",
    "trainer.placement=split",
    "trainer.n_gpus_per_node=1",
    "trainer.rollout_n_gpus_per_node=1",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "algorithm.rollout_correction.rollout_is=token",
    "trainer.val_before_train=false",
)
#: four steps, validating and saving every second one
FOUR_STEPS = ("trainer.total_training_steps=4", "trainer.test_freq=2", "trainer.save_freq=2")
#: for the runs whose checkpoints no test reads (the runs that resume, and the comparison runs)
NO_SAVES = ("trainer.save_freq=-1",)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.placement=colocated", "trainer.n_gpus_per_node=2"],
            "async_training.enable=true .* needs trainer.placement=split .*got trainer.placement='colocated'",
        ),
        (["trainer.executor=local"], r"async_training.enable=true needs trainer.executor=ray \(got .*'local'\)"),
        (
            ["trainer.placement=split", "actor_rollout_ref.rollout.calculate_log_probs=false"],
            "set actor_rollout_ref.rollout.calculate_log_probs=true",
        ),
        (["trainer.placement=split", "async_training.max_staleness_steps=0"], "max_staleness_steps must be a positive"),
    ],
)
def test_bad_settings_name_the_keys(overrides: list[str], message: str) -> None:
    config = load_config(
        [], ["async_training.enable=true", "actor_rollout_ref.rollout.calculate_log_probs=true", *overrides], []
    )
    with pytest.raises(ConfigError, match=message):
        check_values(config)


def test_staleness_must_be_positive_even_when_off() -> None:
    config = load_config([], ["async_training.max_staleness_steps=-1"], [])
    with pytest.raises(ConfigError, match=r"async_training.max_staleness_steps must be a positive integer .* -1"):
        check_values(config)


def test_verl_fully_async_keys_map_onto_separate_async_or_name_what_is_missing() -> None:
    """verl 0.9.1 runs its fully-async keys on V1's separate_async: staleness_threshold is its warmup, the rest
    is refused by name."""
    config = load_config([], ["async_training.staleness_threshold=0.5", "trainer.v1.trainer_mode=colocate_async"], [])
    with pytest.raises(
        ConfigError,
        match=r"async_training.staleness_threshold is verl's fully-async .*"
        r"set trainer.v1.trainer_mode=separate_async",
    ):
        check_values(config)
    with pytest.raises(ConfigError, match=r"async_training.partial_rollout is verl's fully-async trainer's key"):
        check_values(load_config([], ["async_training.partial_rollout=true"], []))
    with pytest.raises(ConfigError, match=r"async_training.use_trainer_do_validate: these options of verl's fully"):
        load_config([], ["async_training.use_trainer_do_validate=true"], [])


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def one_ray(warm_ray: None) -> None:
    """The test process's shared local Ray with warm workers (the test kit's ``warm_ray``): the runs attach to it
    and each takes over the trainer and rollout processes the last run left idle, so the comparisons below
    (resumed and uninterrupted runs, asynchronous and synchronous ones) also show that a reused worker computes
    what a new one does."""


@pytest.fixture(scope="module")
def full_run(
    one_ray: None, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]
) -> dict[str, Any]:
    """Four uninterrupted one-step-off-policy steps, checkpointing after steps 2 and 4."""
    tmp = tmp_path_factory.mktemp("full")
    _, run_dir = tiny_run(tmp, tiny_model_dir, task, *ASYNC, *FOUR_STEPS)
    return {"ckpt": tmp / "ckpt", "rows": read_metrics(run_dir / "metrics.jsonl")}


def test_each_batch_was_generated_one_update_earlier(full_run: dict[str, Any]) -> None:
    rows = {row["step"]: row for row in full_run["rows"]}
    assert sorted(rows) == [1, 2, 3, 4]
    assert [rows[s]["async_training/staleness"] for s in range(1, 5)] == [0.0, 1.0, 1.0, 1.0]
    # step 1 trains on the initial weights' batch: the engine's log-probs are the trainer's; later ones lag
    assert rows[1]["training/rollout_probs_diff_max"] < 1e-6
    assert all(rows[s]["training/rollout_probs_diff_max"] > 1e-5 for s in (2, 3, 4))
    assert abs(rows[1]["rollout_corr/rollout_is_mean"] - 1) < 1e-5
    assert all(rows[s]["rollout_corr/rollout_is_mean"] != 1 for s in (2, 3, 4))
    for step in range(1, 5):
        row = rows[step]
        assert row["timing_s/wait_prev_gen"] >= 0 and 0 <= row["async_training/overlap_share"] <= 1
        assert row["timing_s/gen"] > 0
    # from step 2 on the batch was ready before the trainer asked for it (generated during the last update)
    assert rows[3]["timing_s/wait_prev_gen"] < rows[3]["timing_s/gen"]
    # the weights of update 1 reached the engines before the batch of step 3 was generated with them
    assert rows[3]["rollout/weight_checksum_diff"] <= 1e-6
    assert any(key.startswith("val-core/") for key in rows[2]) and any(key.startswith("val-core/") for key in rows[4])


def test_checkpoint_holds_the_batch_in_flight(full_run: dict[str, Any]) -> None:
    saved = pickle.loads((full_run["ckpt"] / "global_step_2" / STATE_FILE).read_bytes())
    # the batch of step 3, generated with the weights of update 1 during step 2, waits in flight
    assert [item.version for item in saved.in_flight] == [1] and saved.version == 2 and saved.served == 2
    groups = len(set(saved.in_flight[0].rows["uid"]))
    assert [(f.groups, f.issued) for f in saved.buffer["in_flight"]] == [(groups, 1)] and groups == 4
    assert saved.buffer["finished"] == [] and saved.issued == 3 * groups
    (rollout_state,) = read_rollout_states(full_run["ckpt"] / "global_step_2") or [None]
    assert rollout_state is not None and rollout_state["weight_version"] >= 1
    last = pickle.loads((full_run["ckpt"] / "global_step_4" / STATE_FILE).read_bytes())
    assert last.in_flight == [] and last.buffer["finished"] == [], "nothing is generated beyond the last step"


def test_resume_with_a_batch_in_flight_equals_the_uninterrupted_run(
    full_run: dict[str, Any], tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """2 steps + resume + 2 steps: steps 3 and 4 (trained on the saved in-flight batch, then on one generated
    from the restored sampling state) match the uninterrupted run metric for metric."""
    checkpoint = full_run["ckpt"] / "global_step_2"
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *ASYNC,
        *FOUR_STEPS,
        *NO_SAVES,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    resumed = comparable(read_metrics(run_dir / "metrics.jsonl"))
    expected = comparable(full_run["rows"])
    assert list(resumed) == [3, 4]
    for step in (3, 4):
        assert resumed[step] == expected[step], f"step {step} differs"


def test_a_larger_staleness_bound_generates_further_ahead(
    one_ray: None, tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *ASYNC,
        "async_training.max_staleness_steps=2",
        "trainer.total_training_steps=3",
        "trainer.test_freq=-1",
    )
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["async_training/staleness"] for row in rows] == [0.0, 1.0, 2.0]


#: the synchronous split run's settings: ASYNC without one-step-off and the rollout correction
SYNC = [arg for arg in ASYNC if not arg.startswith(("async_training.", "algorithm.rollout_correction"))]
TWO_STEPS = ("trainer.total_training_steps=2", "trainer.save_freq=1", "trainer.test_freq=-1")
#: verl's separate_async on this task: 4 prompts = 2 mini-batches of 2
SEPARATE = ("trainer.v1.trainer_mode=separate_async", "trainer.v1.separate_async.parameter_sync_step=2")
#: what only an asynchronous run reports
ASYNC_ONLY = ("training/off_policy/", "async_training/")


@pytest.fixture(scope="module")
def sync_split(
    one_ray: None, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]
) -> Path:
    """Two synchronous split steps, checkpointing after each."""
    tmp = tmp_path_factory.mktemp("sync")
    _, run_dir = tiny_run(tmp, tiny_model_dir, task, *SYNC, *TWO_STEPS)
    return run_dir


def test_a_synchronous_split_run_resumes_exactly(
    sync_split: Path, tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """Without one-step-off too, the rollout-only ranks' sampling state is in the checkpoint
    (``rollout_state.pkl``): 1 step + resume + 1 step equals 2 uninterrupted steps metric for metric."""
    checkpoint = sync_split.parents[2] / "ckpt" / "global_step_1"
    (state,) = read_rollout_states(checkpoint) or [None]
    assert state is not None and state["calls"] >= 1, "the rollout rank's generate calls are saved"
    _, resumed_dir = tiny_run(
        tmp_path / "resumed",
        tiny_model_dir,
        task,
        *SYNC,
        *TWO_STEPS,
        *NO_SAVES,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    expected = comparable(read_metrics(sync_split / "metrics.jsonl"))
    resumed = comparable(read_metrics(resumed_dir / "metrics.jsonl"))
    assert list(resumed) == [2]
    assert resumed[2] == expected[2], "step 2 differs"


def test_on_policy_separate_async_equals_sync(
    sync_split: Path, tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """separate_async with verl's on-policy bound (``max_off_policy_threshold=1``) and nothing issued ahead: the
    lane generates each step's groups with the current weights, so the run equals the synchronous one metric for
    metric, apart from the weight transfer's bookkeeping: the lane loads the weights the trainer exports
    (``actor/weight_export_s``) where the synchronous loop syncs them in buckets (``actor/weight_sync_buckets``),
    and the engines count their versions from another start (``rollout/weight_version``)."""
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *SYNC,
        *TWO_STEPS,
        *NO_SAVES,
        *SEPARATE,
        "trainer.v1.separate_async.num_warmup_batches=0",
        "trainer.v1.sampler.max_off_policy_threshold=1",
    )
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["training/off_policy/trajectory_staleness_worst/max"] for row in rows] == [0.0, 0.0]
    drop = ASYNC_ONLY + ("rollout/weight_checksum_diff", "rollout/weight_version", "actor/weight_sync_buckets")
    assert comparable(rows, drop) == comparable(read_metrics(sync_split / "metrics.jsonl"), drop)


def test_the_bound_holds_with_a_slower_trainer(
    one_ray: None, tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """separate_async with four steps' batches issued at version 0 and a bound of 2 versions, the trainer made
    slower (4 PPO epochs): no step trains a group beyond the bound; at step 3 the eight groups of batches 3 and 4
    (spanning 3 versions) are evicted and refilled one for one, and every step trains 4 groups × 4 responses."""
    dump = tmp_path / "dump"
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *SYNC,
        *SEPARATE,
        "trainer.v1.separate_async.num_warmup_batches=3",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        "actor_rollout_ref.actor.ppo_epochs=4",
        "trainer.total_training_steps=4",
        "trainer.test_freq=-1",
        f"trainer.rollout_data_dir={dump}",
    )
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["training/off_policy/trajectory_staleness_worst/max"] for row in rows] == [0.0, 1.0, 0.0, 1.0]
    assert [row.get("training/off_policy/evicted_samples", 0.0) for row in rows] == [0.0, 0.0, 8.0, 0.0]
    assert {int(f.stem): len(f.read_text().splitlines()) for f in dump.glob("*.jsonl")} == {1: 16, 2: 16, 3: 16, 4: 16}
