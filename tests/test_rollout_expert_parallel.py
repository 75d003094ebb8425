"""``actor_rollout_ref.rollout.expert_parallel_size``: what each rollout engine accepts, checked before anything
starts (``check_values``, the dry run), and the plan's note for vLLM on the CPU. The engines' use of it is tested
in their plugins (vLLM: a real engine with ``enable_expert_parallel`` on the CPU; SGLang: its arguments)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from rlcore.config import ConfigError, check_values, derive_quantities, load_config
from rlcore.config.expert_parallel import EP_KEY

ROLLOUT = "actor_rollout_ref.rollout"


def config_with(*overrides: str) -> object:
    """The run config with ``overrides`` (a model path, so that it validates)."""
    return load_config(overrides=["actor_rollout_ref.model.path=m", *overrides])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([f"{EP_KEY}=2"], r"expert_parallel_size=2: the hf rollout engine .* has no expert parallelism"),
        ([f"{EP_KEY}=0"], r"expert_parallel_size=0: must be a positive integer"),
        (
            [f"{ROLLOUT}.name=vllm", f"{ROLLOUT}.tensor_model_parallel_size=4", f"{EP_KEY}=2", "trainer.device=cuda"],
            r"expert_parallel_size=2: vLLM spreads the experts over all the ranks .* must equal "
            r"actor_rollout_ref\.rollout\.tensor_model_parallel_size=4",
        ),
        (
            [f"{ROLLOUT}.name=sglang", f"{ROLLOUT}.tensor_model_parallel_size=4", f"{EP_KEY}=3"],
            r"expert_parallel_size=3: SGLang divides the tensor-parallel ranks .* must divide "
            r"actor_rollout_ref\.rollout\.tensor_model_parallel_size=4",
        ),
    ],
    ids=["hf", "zero", "vllm-cuda", "sglang"],
)
def test_what_an_engine_cannot_do_is_an_error_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_values(config_with(*overrides))


@pytest.mark.parametrize(
    "overrides",
    [
        [f"{EP_KEY}=1"],
        [f"{ROLLOUT}.name=vllm", f"{ROLLOUT}.tensor_model_parallel_size=4", f"{EP_KEY}=4", "trainer.device=cuda"],
        [f"{ROLLOUT}.name=sglang", f"{ROLLOUT}.tensor_model_parallel_size=4", f"{EP_KEY}=2"],
        [f"{ROLLOUT}.name=sglang", f"{ROLLOUT}.tensor_model_parallel_size=4", f"{EP_KEY}=4"],
    ],
    ids=["one", "vllm-equal", "sglang-divides", "sglang-equal"],
)
def test_what_an_engine_does_is_accepted_without_a_note(overrides: list[str]) -> None:
    config = config_with(*overrides)
    check_values(config)
    assert not [note for note in derive_quantities(config).notes if EP_KEY in note]


def test_vllm_on_the_cpu_runs_over_one_rank_and_the_plan_says_so() -> None:
    """On ``trainer.device=cpu`` a vLLM engine is one process (its tensor parallelism is not used either): the
    size is accepted whatever the tensor-parallel size, and the note says what runs and what CUDA needs."""
    config = config_with(
        f"{ROLLOUT}.name=vllm", f"{ROLLOUT}.tensor_model_parallel_size=4", f"{EP_KEY}=2", "trainer.device=cpu"
    )
    check_values(config)
    notes = [note for note in derive_quantities(config).notes if EP_KEY in note]
    assert notes == [
        f"{EP_KEY}=2: on the CPU each vLLM engine is one process, so vLLM runs with enable_expert_parallel over "
        "that one rank (every expert in it); on CUDA it must equal actor_rollout_ref.rollout.tensor_model_parallel_size (4)"
    ]


def test_the_dry_run_names_the_key_and_starts_nothing(tiny_model_dir: Path, tmp_path: Path) -> None:
    from rlcore_testkit.runs import make_tiny_task

    task = make_tiny_task(tmp_path / "task")
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--dry-run",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={task['train']}",
            f"data.val_files={task['test']}",
            "trainer.device=cpu",
            f"{EP_KEY}=2",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert f"error: {EP_KEY}=2: the hf rollout engine" in result.output
