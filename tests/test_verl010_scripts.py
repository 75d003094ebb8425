"""verl 0.10's own example scripts, run through ``rlcore run --dry-run`` with only the entry point swapped.

The scripts under ``tests/verl010_examples/`` are unmodified copies from verl 0.10.0.dev (see the NOTICE there):
a sample of 51 of the 82 scripts of its ``examples/`` that call ``verl.trainer.main_ppo`` and are not for Ascend
NPUs only, plus four Ascend ones whose keys rlcore maps (verl's NPU profiler, the rollout's graph batch sizes), spread over its algorithms (GRPO, PPO, GSPO, CISPO, DPPO, GDPO, GMPO, GPG, OTB, RLOO, ReMax,
REINFORCE++, SAPO, on-policy distillation, MTP, rollout correction, prefix grouper) and engines (FSDP, Megatron
through ``model_engine=megatron``, LoRA, profiling). They run the way ``tests/test_verl_scripts.py`` runs 0.9's
(:mod:`tests.verl_scripts_harness`): each script as verl's defaults make it, so through ``uv run ... python3`` and
with ``ray_kwargs.ray_init.runtime_env.py_executable`` set, with the model, data and reward-file paths pointed at local files
and ``trainer.device=cpu`` appended, and the variables some scripts demand of their user set
(:data:`tests.verl_scripts_harness.USER_VARIABLES`).

:data:`EXPECTED` says what each script's dry run names today: nothing (it must pass) or the obstacles its errors
name, the first one printed first. The test fails when a script starts passing (take it out of the table) and when
its errors name anything the table does not list, so the table shrinks as rlcore learns verl 0.10's keys.
``docs/from-verl.md`` states the counts, under "Accepted per verl version".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from tests.test_verl_scripts import EXPECTED as VERL09_EXPECTED
from tests.test_verl_scripts import MEGATRON as VERL09_MEGATRON
from tests.verl_scripts_harness import (  # noqa: F401 (the fixtures are used by name)
    data_parallel_line,
    localised,
    tiny_lora_adapter_fixture,
    tiny_moe_dir_fixture,
    tiny_moe_dist_checkpoint_fixture,
    tiny_task_fixture,
    tiny_vl_task_fixture,
    tiny_vlm_dir_fixture,
    verl_arguments,
)

EXAMPLES = Path(__file__).parent / "verl010_examples"
DOC = Path(__file__).resolve().parents[1] / "docs" / "from-verl.md"

# the obstacles: each a name (as docs/from-verl.md spells it) and a text of the error line that names it
MEGATRON_FSDP = "megatron.use_megatron_fsdp"
MLITE_SHARDED = "engine.impl_cfg.optimizer"
SGLANG_TRACE = "rollout.profiler.tool_config.npu.discrete"
VEOMNI_EP = "veomni.expert_parallel_size"
OBSTACLES: dict[str, str] = {
    MEGATRON_FSDP: "use_megatron_fsdp=true: Megatron-FSDP",
    SGLANG_TRACE: "npu.discrete=true: the sglang rollout engine does not trace its own generation",
    VEOMNI_EP: "verl's VeOmni engine settings that rlcore's FSDP engine (which trains model_engine=veomni here)",
    MLITE_SHARDED: "impl_cfg.optimizer=fsdp2: Megatron-Lite shards the optimizer state over the 4 data-parallel",
}

#: script -> the obstacles its dry run names, the first one printed first; () when it must pass
EXPECTED: dict[str, tuple[str, ...]] = {
    # Ascend scripts whose keys rlcore maps: the graph batch sizes (vLLM's compilation_config) and, with
    # global_profiler.tool=npu, verl's Ascend profiler recorded by torch.profiler
    "examples/ascend_extras/gspo_trainer/run_qwen3_32b_fsdp.sh": (),
    "examples/profile/run_qwen3_8b_npu_profile_discrete.sh": (),
    "examples/profile/run_qwen3_8b_npu_profile_e2e.sh": (),
    # a discrete rollout trace asks the SGLang engine to trace itself, which rlcore's SGLang engine does not
    "examples/ascend_extras/grpo_trainer/run_qwen3_30b_a3b_megatron.sh": (SGLANG_TRACE,),
    "examples/cispo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh": (),
    "examples/gdpo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/gmpo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/gpg_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/gpg_trainer/run_qwen3_8b_megatron.sh": (),
    "examples/grpo_trainer/run_gpt_oss_20b_fsdp.sh": (),
    # verl's Megatron-Lite engine (actor@actor_rollout_ref.actor=mlite_actor), trained by rlcore's Megatron engine:
    # Qwen3.5-35B's mesh has one data-parallel rank; Kimi-K2.6's Megatron-Lite FSDP2 shards over four, which
    # rlcore's Megatron engine does not
    "examples/grpo_trainer/run_qwen3_5_35b_megatron_lite.sh": (),
    "examples/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh": (MLITE_SHARDED,),
    # use_dist_checkpointing=True from $DIST_CKPT_PATH: the harness writes the tiny MoE's megatron-core checkpoint
    "examples/grpo_trainer/run_moonlight_16b_a3b_megatron.sh": (),
    # a distillation teacher served by verl's vLLM with expert parallelism (tp 8 × dp 1 = ep 8, noted)
    "examples/on_policy_distillation_trainer/run_qwen3_5_4b_fsdp.sh": (),
    # the scripts that need variables their user must set (the harness's USER_VARIABLES): $HDFS_ROOT and $DATA_ROOT
    # (the DeepSeek-V4 pair; the VeOmni one pads packed micro-batches, actor.pad_to_length=True, but trains with
    # expert parallelism), $RAY_DATA_HOME (Nemotron-Nano-V3), $INFER_BACKEND (Qwen3-VL-30B-A3B) and
    # $LORA_ADAPTER_PATH (resuming LoRA from a saved adapter, whose rank it takes: the tiny model's adapter)
    "examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh": (),
    "examples/grpo_trainer/run_deepseek_v4_veomni.sh": (VEOMNI_EP,),
    "examples/grpo_trainer/run_nemotron_nano_v3_30b_a3b_megatron.sh": (),
    "examples/grpo_trainer/run_qwen3_vl_30b_a3b_fsdp.sh": (),
    "examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh": (),
    # verl's Megatron schedule: optim.min_lr alone (linear decay, verl's Megatron default)
    "examples/grpo_trainer/run_hy_v3_megatron.sh": (),
    "examples/grpo_trainer/run_mistral_nemo_12b_skyworkrm_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen2-7b_math_megatron_fsdp.sh": (MEGATRON_FSDP,),
    "examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen2_5_vl_7b_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen2_5_vl_7b_megatron.sh": (),
    "examples/grpo_trainer/run_qwen3_30b_a3b_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh": (),
    "examples/grpo_trainer/run_qwen3_4b_fsdp.sh": (),
    # verl's resize before the processor (data.image_patch_size=16); run with the tiny VLM and its image task
    "examples/grpo_trainer/run_qwen3_5_2b_openr1_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen3_5_2b_video_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/grpo_trainer/run_qwen3_8b_megatron.sh": (),
    "examples/gspo_trainer/run_qwen3_30b_a3b_megatron.sh": (),
    "examples/gspo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/mtp_trainer/run_mimo_7b_mtp_megatron.sh": (),
    # Megatron sequence parallelism with tensor parallel size 2 (megatron.sequence_parallel=True)
    "examples/mtp_trainer/run_mimo_7b_mtp_rl_vllm_sgl_megatron.sh": (),
    "examples/on_policy_distillation_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/on_policy_distillation_trainer/run_qwen3_8b_megatron.sh": (),
    "examples/on_policy_distillation_trainer/run_qwen3_8b_mopd_fsdp.sh": (),
    "examples/otb_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/ppo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/ppo_trainer/run_qwen3_8b_megatron.sh": (),
    "examples/prefix_grouper/run_qwen3_8b_fsdp.sh": (),
    # the one script without ray_kwargs
    "examples/profile/run_qwen2_5_7b_torch_profile.sh": (),
    "examples/reinforce_plus_plus_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/remax_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/rloo_trainer/run_qwen3_8b_fsdp.sh": (),
    "examples/rollout_correction/run_qwen2_5_7b_fsdp.sh": (),
    "examples/rollout_correction/run_qwen2_5_7b_fsdp_multi_rs.sh": (),
    "examples/sapo_trainer/run_qwen3_30b_a3b_fsdp.sh": (),
    "examples/tuning/lora/run_qwen3_30b_a3b_megatron.sh": (),
    "examples/tuning/lora/run_qwen3_8b_fsdp.sh": (),
    "examples/tuning/scaling/run_qwen2_5_32b_megatron.sh": (),
    "examples/tuning/scaling/run_qwen2_5_72b_fsdp.sh": (),
}

#: script -> a note its passing dry run must print (a key verl's script adds with '+' that changes nothing in verl,
#: or verl's image resize)
NOTES: dict[str, str] = {
    "examples/ascend_extras/gspo_trainer/run_qwen3_32b_fsdp.sh": (
        "cudagraph_capture_sizes=[8, 16, 32, 64, 128, 192, 256] changes nothing on the CPU"
    ),
    "examples/profile/run_qwen3_8b_npu_profile_discrete.sh": "global_profiler.tool=npu is verl's Ascend profiler",
    "examples/profile/run_qwen3_8b_npu_profile_e2e.sh": "global_profiler.tool=npu is verl's Ascend profiler",
    "examples/grpo_trainer/run_qwen3_5_2b_openr1_fsdp.sh": "resize: each image first as verl does (data.image_patch_size=16",
    "examples/grpo_trainer/run_qwen3_5_2b_video_fsdp.sh": "resize: each image first as verl does (data.image_patch_size=16",
    "examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh": (
        "actor_rollout_ref.rollout.moe_tensor_parallel_size=2 has no effect: it is read only by verl's TensorRT-LLM"
    ),
    "examples/sapo_trainer/run_qwen3_30b_a3b_fsdp.sh": (
        "actor_rollout_ref.actor.policy_loss.tau_pos=1.0 has no effect: verl's SAPO loss and rlcore read"
    ),
    "examples/grpo_trainer/run_qwen3_5_35b_megatron_lite.sh": (
        "actor_rollout_ref.actor: verl's Megatron-Lite engine (engine.strategy=mlite): trained by rlcore's Megatron "
        "engine"
    ),
    "examples/grpo_trainer/run_moonlight_16b_a3b_megatron.sh": (
        "actor_rollout_ref.actor.megatron.dist_checkpointing_path: the initial weights, a megatron-core distributed "
        "checkpoint"
    ),
    "examples/on_policy_distillation_trainer/run_qwen3_5_4b_fsdp.sh": (
        "distillation.teacher_models.teacher_model.inference: name=vllm, expert_parallel_size=8, "
        "gpu_memory_utilization=0.4 change nothing here"
    ),
}

#: scripts run with the tiny VLM and an image task instead of the tiny text model and task
VLM_SCRIPTS = {script for script in EXPECTED if "_vl_" in script or "qwen3_5_2b" in script}
#: scripts that replay routing (router_replay.mode=R3, which needs a mixture-of-experts model): run with a tiny Qwen3-MoE
MOE_SCRIPTS = {
    "examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh",
    "examples/grpo_trainer/run_deepseek_v4_veomni.sh",
    "examples/grpo_trainer/run_qwen3_5_35b_megatron_lite.sh",
    "examples/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh",
    "examples/grpo_trainer/run_moonlight_16b_a3b_megatron.sh",
    "examples/ascend_extras/grpo_trainer/run_qwen3_30b_a3b_megatron.sh",
}
#: scripts that start from a megatron-core distributed checkpoint ($DIST_CKPT_PATH, or the Ascend script's
#: $MCORE_MODEL_PATH default): given the tiny MoE's
DIST_SCRIPTS = {
    "examples/grpo_trainer/run_moonlight_16b_a3b_megatron.sh",
    "examples/ascend_extras/grpo_trainer/run_qwen3_30b_a3b_megatron.sh",
}
#: scripts that resume LoRA from a saved adapter: run with a tiny adapter of the tiny model
ADAPTER_SCRIPTS = {"examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh"}


def test_the_table_covers_every_copied_script() -> None:
    copied = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.sh")}
    assert copied == set(EXPECTED)
    assert {name for names in EXPECTED.values() for name in names} == set(OBSTACLES)
    assert set(NOTES) <= {script for script, names in EXPECTED.items() if not names}


def obstacles_named(line: str, expected: tuple[str, ...]) -> list[str]:
    """The obstacles of ``expected`` that the error ``line`` names."""
    return [name for name in expected if OBSTACLES[name] in line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="the example scripts are bash scripts")
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_verl010_script_dry_run(script: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    vlm = script in VLM_SCRIPTS
    model = request.getfixturevalue(
        "tiny_vlm_dir" if vlm else "tiny_moe_dir" if script in MOE_SCRIPTS else "tiny_model_dir"
    )
    task = request.getfixturevalue("tiny_vl_task" if vlm else "tiny_task")
    expected = EXPECTED[script]
    adapter = request.getfixturevalue("tiny_lora_adapter") if script in ADAPTER_SCRIPTS else None
    checkpoint = request.getfixturevalue("tiny_moe_dist_checkpoint") if script in DIST_SCRIPTS else None
    arguments = localised(verl_arguments(EXAMPLES, script, tmp_path), model, task, adapter, checkpoint)
    result = CliRunner().invoke(cli, ["run", "--dry-run", *arguments])
    if not expected:
        assert result.exit_code == 0, result.output
        assert "prompts per step:" in result.output
        assert NOTES.get(script, "") in result.output
        assert ("images: <image> placeholders" in result.output) == vlm
        if "megatron" in Path(script).name:
            assert data_parallel_line(arguments) in result.output
        return
    assert result.exit_code != 0, f"{script} passes now: make its EXPECTED entry ()\n{result.output}"
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors, result.output
    for line in errors:
        assert obstacles_named(line, expected), f"an error the table does not list for {script}: {line}"
    for name in expected:
        assert any(OBSTACLES[name] in line for line in errors), f"{script} no longer names {name}\n{result.output}"
    assert expected[0] in obstacles_named(errors[0], expected), f"the first error is not {expected[0]}: {errors[0]}"


def test_counts_per_verl_version_in_the_doc() -> None:
    """The migration page states how many scripts of each verl sample pass and names every obstacle left."""
    section = DOC.read_text().split("## Accepted per verl version\n", 1)[1].split("\n## ", 1)[0]
    passing09 = sum(1 for value in VERL09_EXPECTED.values() if value in (None, VERL09_MEGATRON))
    assert f"verl 0.9 sample: {passing09} of {len(VERL09_EXPECTED)}" in section
    passing = sum(1 for value in EXPECTED.values() if not value)
    assert f"verl 0.10 sample: {passing} of {len(EXPECTED)}" in section
    for name in OBSTACLES:
        assert f"`{name}`" in section, name
