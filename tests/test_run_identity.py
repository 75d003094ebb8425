"""A run resumes only a checkpoint of its own: each checkpoint records the fingerprint of its run (kind, model
and weights, tokenizer, algorithm, data, shape); ``resume_mode=auto`` starts fresh from another run's checkpoint
and says which parts differ, ``resume_path`` refuses it unless ``trainer.resume_allow_changes`` lists them;
unrecorded checkpoints are never adopted silently; a bundled task's run is named after the algorithm that runs;
the paths a run writes are absolute, whatever user code does to the working directory. Real runs where a run
is involved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.checkpoint import RUN_FILE, CheckpointError, CheckpointManager, RunIdentity, claim_checkpoints
from rlcore.checkpoint.fingerprint import (
    accept_checkpoint,
    check_allowed,
    differences,
    model_shape,
    run_fingerprint,
    weights_digest,
)
from rlcore.config.output_paths import make_output_paths_absolute
from rlcore.config.schema import TrainerConfig
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics


def fingerprint(model: Path, **changes: Any) -> dict[str, Any]:
    """A GRPO run's fingerprint on ``model`` and ``train.parquet`` beside it, with ``changes`` applied."""
    base = run_fingerprint(
        "rl",
        model_path=str(model),
        tokenizer_path=None,
        algorithm={"adv_estimator": "grpo", "policy_loss": "vanilla"},
        train_files=[str(model.parent / "train.parquet")],
        shape={"num_hidden_layers": 2},
    )
    return {**base, **changes}


def checkpoint_of(root: Path, run_fingerprint: dict[str, Any] | None, step: int = 1) -> Path:
    """A checkpoint folder ``root/global_step_<step>`` written by a run with ``run_fingerprint``."""
    config = TrainerConfig(default_local_dir=str(root))
    identity = RunIdentity.new(root.parent / "run")
    identity.fingerprint = run_fingerprint
    return CheckpointManager(config, identity).save(step, lambda folder: (folder / "state.json").write_text("{}"))


# ------------------------------------------------------------------ the fingerprint


def test_the_weights_digest_follows_the_weight_files_not_the_folder(tmp_path: Path, tiny_model_dir: Path) -> None:
    copy = Path(shutil.copytree(tiny_model_dir, tmp_path / "copy"))
    assert weights_digest(str(copy)) == weights_digest(str(tiny_model_dir)) is not None
    (weights,) = copy.glob("*.safetensors")
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF  # one byte of one weight, as a training step changes them
    weights.write_bytes(bytes(data))
    assert weights_digest(str(copy)) != weights_digest(str(tiny_model_dir))
    assert weights_digest("Qwen/Qwen3-1.7B") is None


def test_a_fingerprint_equals_itself_read_back_from_run_json(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Tuples in a model's shape (and anything else JSON turns into lists) never make a run differ from itself."""
    mine = run_fingerprint(
        "rl",
        model_path=str(tiny_model_dir),
        tokenizer_path=None,
        algorithm={"batch_filters": ("dapo-groups",)},
        train_files=str(tiny_model_dir.parent / "train.parquet"),
        shape={"mlp_only_layers": (0, 1)},
    )
    assert accept_checkpoint(checkpoint_of(tmp_path / "ckpt", mine), mine, resume_mode="resume_path")


def test_the_shape_covers_experts_and_the_parts_of_a_composite_model(tmp_path: Path) -> None:
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    eight = json.loads((make_tiny_moe_model_dir(tmp_path / "eight") / "config.json").read_text())
    four = json.loads((make_tiny_moe_model_dir(tmp_path / "four", num_experts=4) / "config.json").read_text())
    assert model_shape(eight)["num_local_experts"] == 8 and "moe_intermediate_size" in model_shape(eight)
    assert "num_experts_per_tok" in model_shape(eight)
    found = differences({"shape": model_shape(eight)}, {"shape": model_shape(four)})
    assert found == {"shape": "shape (num_local_experts 8 -> 4)"}
    composite = model_shape({"model_type": "qwen2_vl", "text_config": {"hidden_size": 64, "num_hidden_layers": 2}})
    assert composite == {"model_type": "qwen2_vl", "text_config.hidden_size": 64, "text_config.num_hidden_layers": 2}


# ------------------------------------------------------------------ the resume choice


def test_auto_resumes_only_a_matching_checkpoint_and_names_what_differs(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = fingerprint(tiny_model_dir)
    same = checkpoint_of(tmp_path / "same", mine)
    assert accept_checkpoint(same, mine, resume_mode="auto") == same

    rloo = checkpoint_of(tmp_path / "rloo", {**mine, "algorithm": {"adv_estimator": "rloo", "policy_loss": "vanilla"}})
    assert accept_checkpoint(rloo, mine, resume_mode="auto") is None
    out = capsys.readouterr().out
    assert f"not resuming {rloo}, another run's: algorithm (adv_estimator rloo -> grpo); this is a fresh run" in out
    assert "trainer.resume_allow_changes=[algorithm] resumes it" in out

    with pytest.raises(CheckpointError) as caught:
        accept_checkpoint(rloo, mine, resume_mode="resume_path")
    assert str(caught.value) == (
        f"trainer.resume_from_path={rloo} is another run's: algorithm (adv_estimator rloo -> grpo); "
        "trainer.resume_allow_changes=[algorithm] resumes it anyway"
    )
    assert accept_checkpoint(rloo, mine, resume_mode="resume_path", allow=["algorithm"]) == rloo
    assert "which trainer.resume_allow_changes lets differ: algorithm (adv_estimator rloo -> grpo)" in (
        capsys.readouterr().out
    )


def test_another_kind_or_shape_is_never_resumed(tmp_path: Path, tiny_model_dir: Path) -> None:
    mine = fingerprint(tiny_model_dir)
    sft = checkpoint_of(tmp_path / "sft", {**mine, "kind": "sft"})
    with pytest.raises(
        CheckpointError, match=r"cannot be resumed by this run: kind \(sft -> rl\); .* rlcore run starts"
    ):
        accept_checkpoint(sft, mine, resume_mode="resume_path", allow=["model", "algorithm"])
    deeper = checkpoint_of(tmp_path / "deeper", {**mine, "shape": {"num_hidden_layers": 3}})
    with pytest.raises(CheckpointError, match=r"shape \(num_hidden_layers 3 -> 2\); resume it with the model it was"):
        accept_checkpoint(deeper, mine, resume_mode="resume_path")
    with pytest.raises(CheckpointError, match=r"shape cannot be allowed \(kind and shape must always match\)"):
        check_allowed(["shape"])
    with pytest.raises(CheckpointError, match=r"bogus cannot be allowed; choose from model, weights, tokenizer"):
        check_allowed(["bogus"])


def test_unrecorded_checkpoints_are_never_adopted_silently(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = fingerprint(tiny_model_dir)
    old = checkpoint_of(tmp_path / "old", None)
    (old / RUN_FILE).unlink()  # as rlcore wrote them before it recorded runs
    assert accept_checkpoint(old, mine, resume_mode="auto") is None
    assert "unrecorded (the checkpoint records no fingerprint of its run" in capsys.readouterr().out
    with pytest.raises(CheckpointError, match=r"trainer.resume_allow_changes=\[unrecorded\] resumes it anyway"):
        accept_checkpoint(old, mine, resume_mode="resume_path")
    assert accept_checkpoint(old, mine, resume_mode="resume_path", allow=["unrecorded"]) == old


def test_resuming_an_unrecorded_checkpoint_adopts_no_unrecorded_checkpoint_of_another_folder(tmp_path: Path) -> None:
    """A run resumed from folder A's unrecorded checkpoint saves into folder B: B's unrecorded checkpoints are
    another run's, so the run is refused instead of replacing them."""
    elsewhere = checkpoint_of(tmp_path / "a", None)
    (elsewhere / RUN_FILE).unlink()
    for step in (2, 3):
        (checkpoint_of(tmp_path / "b", None, step) / RUN_FILE).unlink()
    config = TrainerConfig(default_local_dir=str(tmp_path / "b"), save_freq=1)
    with pytest.raises(CheckpointError, match=r"holds global_step_2 \(and 1 more\), written by a run before rlcore"):
        claim_checkpoints(config, RunIdentity.new(tmp_path / "run"), elsewhere)

    home = TrainerConfig(default_local_dir=str(tmp_path / "a"), save_freq=1)
    resumed = RunIdentity.new(tmp_path / "resumed")
    claim_checkpoints(home, resumed, elsewhere)  # its own folder: the unrecorded checkpoint it resumed is its own
    assert resumed.owns(elsewhere) and not resumed.owns(tmp_path / "b" / "global_step_2")


# ------------------------------------------------------------------ paths


def test_output_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = OmegaConf.create(
        {"trainer": {"default_local_dir": "ckpt/x", "runs_dir": str(tmp_path / "abs"), "rollout_data_dir": None}}
    )
    make_output_paths_absolute(config, ("trainer.default_local_dir", "trainer.runs_dir", "trainer.rollout_data_dir"))
    assert config.trainer.default_local_dir == str(tmp_path / "ckpt" / "x")
    assert config.trainer.runs_dir == str(tmp_path / "abs") and config.trainer.rollout_data_dir is None


CHDIR_REWARD = """
import os

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    os.makedirs({elsewhere!r}, exist_ok=True)
    os.chdir({elsewhere!r})
    return float(len(solution_str) % 2)
"""


def test_a_reward_function_that_changes_directory_sends_nothing_elsewhere(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative checkpoint and run folders stay where they named at start-up: the checkpoints of every step,
    the metrics of every step."""
    task = make_tiny_task(tmp_path / "task")
    elsewhere = tmp_path / "elsewhere"
    task["reward"].write_text(CHDIR_REWARD.format(elsewhere=str(elsewhere)))
    monkeypatch.chdir(tmp_path)
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "trainer.default_local_dir=ckpt",
        "trainer.runs_dir=runs",
        "trainer.save_freq=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
    )
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("global_step_*")) == ["global_step_1", "global_step_2"]
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]
    assert not list(elsewhere.rglob("*")), "nothing was written under the reward function's directory"


# ------------------------------------------------------------------ real runs


def test_real_runs_resume_only_their_own_checkpoints(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpointed run, then runs in the same checkpoint folder with another model, another estimator, and
    both allowed: the first two start fresh (naming what differs) and move the other lineage aside, the third
    resumes; told to resume a checkpoint of another model's shape, a run stops before loading anything."""
    from rlcore_testkit.tiny import make_tiny_model_dir

    task = make_tiny_task(tmp_path / "task")
    ckpt = tmp_path / "ckpt"
    shared = ("trainer.save_freq=1", "trainer.test_freq=-1", "trainer.val_before_train=false")
    shared += (f"trainer.default_local_dir={ckpt}", "trainer.total_training_steps=1", "algorithm.adv_estimator=grpo")
    tiny_run(tmp_path / "first", tiny_model_dir, task, *shared)
    first = json.loads((ckpt / "global_step_1" / RUN_FILE).read_text())
    assert first["fingerprint"]["kind"] == "rl" and first["fingerprint"]["model"] == str(tiny_model_dir.resolve())
    assert first["fingerprint"]["algorithm"]["adv_estimator"] == "grpo"
    capsys.readouterr()

    other = make_tiny_model_dir(tmp_path / "other", seed=1)  # the same shape, other weights
    longer = (*shared, "trainer.total_training_steps=2")
    _, run_dir = tiny_run(tmp_path / "other-model", other, task, *longer)
    out = capsys.readouterr().out
    assert "resumed from" not in out and f"not resuming {ckpt / 'global_step_1'}, another run's: model (" in out
    assert "weights (the model's weight files are not" in out
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]
    assert len(list((ckpt / "previous").iterdir())) == 1

    _, run_dir = tiny_run(tmp_path / "rloo", other, task, *longer, "algorithm.adv_estimator=rloo")
    out = capsys.readouterr().out
    assert "not resuming" in out and "algorithm (adv_estimator grpo -> rloo)" in out and "resumed from" not in out
    assert len(list((ckpt / "previous").iterdir())) == 2

    three = (*shared, "trainer.total_training_steps=3", "trainer.resume_allow_changes=[algorithm]")
    _, run_dir = tiny_run(tmp_path / "allowed", other, task, *three)
    out = capsys.readouterr().out
    assert f"resumed from {ckpt / 'global_step_2'} (step 2 of 3)" in out
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [3]

    with pytest.raises(RLCoreError, match=r"global_step_3 holds no critic/: its run trained without a critic"):
        tiny_run(tmp_path / "critic", other, task, *three, "algorithm.adv_estimator=gae")

    deeper = make_tiny_model_dir(tmp_path / "deeper", num_layers=3)
    with pytest.raises(RLCoreError, match=r"shape \(num_hidden_layers 2 -> 3\); resume it with the model it was"):
        tiny_run(
            tmp_path / "deeper-run",
            deeper,
            task,
            *three,
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={ckpt / 'global_step_3'}",
            "trainer.resume_allow_changes=[model,weights,algorithm]",
        )
    assert not list((tmp_path / "deeper-run").glob("runs/*/*")), "refused before the run directory is made"


def test_an_eight_expert_checkpoint_is_not_resumed_into_a_four_expert_model(tmp_path: Path) -> None:
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    task = make_tiny_task(tmp_path / "task")
    ckpt = tmp_path / "ckpt"
    shared = ("trainer.save_freq=1", "trainer.test_freq=-1", "trainer.val_before_train=false")
    shared += (f"trainer.default_local_dir={ckpt}", "trainer.total_training_steps=1")
    tiny_run(tmp_path / "eight", make_tiny_moe_model_dir(tmp_path / "eight-model"), task, *shared)
    four = make_tiny_moe_model_dir(tmp_path / "four-model", num_experts=4)
    with pytest.raises(RLCoreError, match=r"cannot be resumed by this run: .*shape \(num_local_experts 8 -> 4\)"):
        tiny_run(
            tmp_path / "four",
            four,
            task,
            *shared,
            "trainer.total_training_steps=2",
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={ckpt / 'global_step_1'}",
            "trainer.resume_allow_changes=[model,weights]",
        )


# ------------------------------------------------------------------ run names


@pytest.mark.parametrize(
    ("args", "presets", "name"),
    [
        ((), [], "arith-grpo"),
        (("algorithm.adv_estimator=rloo",), [], "arith-rloo"),
        (("algorithm.adv_estimator=opo",), [], "arith-opo"),  # a plugin's estimator
        ((), ["dapo"], "arith-dapo"),
        (("algorithm.adv_estimator=rloo",), ["dapo"], "arith-dapo-rloo"),
        (("algorithm.adv_estimator=rloo", "trainer.experiment_name=mine"), [], "mine"),
    ],
)
def test_a_bundled_task_run_is_named_after_the_algorithm_that_runs(
    args: tuple[str, ...], presets: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run directory and the checkpoint folder follow the name: a GRPO checkpoint is never in an RLOO run's
    folder."""
    from rlcore.run import run_training

    run_training([], list(args), presets, dry_run=True)
    text = capsys.readouterr().out
    assert f"  experiment_name: {name}\n" in text
    assert f"  default_local_dir: checkpoints/rlcore-default/{name}\n" in text
