"""verl's own example scripts, run through ``rlcore run --dry-run`` with only the entry point swapped.

The scripts under ``tests/verl_examples/`` are unmodified copies from verl (see the NOTICE there). Each
one is executed by bash with ``python3`` replaced by a function that records the arguments of its
``python3 -m verl.trainer.main_ppo`` line; the model and data paths are pointed at a tiny local model and
parquet files, ``trainer.device=cpu`` is appended, and the result goes to ``rlcore run --dry-run``.

A script whose features rlcore has must pass. Every other one must fail with an error naming the missing
feature (the table below says which). Megatron scripts pass once a plugin registers the ``megatron``
training backend, and until then fail naming ``pip install rlcore-plugin-megatron``; when they pass, the run
plan splits the script's ranks into world ÷ (tensor × pipeline parallel size) data-parallel ranks. A passing
script that sets a speed-only switch rlcore ignores gets a note naming it (:data:`NOTES`); a script with Ulysses
sequence parallelism prints world ÷ ``ulysses_sequence_parallel_size`` data-parallel ranks.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from rlcore.cli import cli
from rlcore.config import default_config
from rlcore.config.aliases import ALIASES, VERL010_ALIASES, canonical_key
from rlcore.config.compose import noted_engine_key
from rlcore.config.loader import flatten, known_keys
from rlcore.config.unsupported import MEGATRON_HINT, MISSING_FEATURES, UNSUPPORTED_VALUES, missing_feature
from rlcore.plugins import load_plugins
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

EXAMPLES = Path(__file__).parent / "verl_examples"
MEGATRON = "pip install rlcore-plugin-megatron"
#: the plan note of megatron-core's full optimizer CPU offload, which verl's Megatron scripts add with '+'
#: (optim.override_optimizer_config): rlcore's megatron.optimizer_offload
OPTIMIZER_OFFLOAD_NOTE = (
    "override_optimizer_config.optimizer_cpu_offload=True (fraction 1) -> actor_rollout_ref.actor.megatron."
    "optimizer_offload=true"
)

#: script -> None (must pass) or a text the error must contain (the missing feature)
EXPECTED: dict[str, str | None] = {
    "examples/grpo_trainer/run_deepseek7b_llm.sh": None,
    "examples/grpo_trainer/run_deepseek7b_llm_math.sh": None,
    "examples/grpo_trainer/run_deepseek7b_llm_seq_balance.sh": None,
    "examples/grpo_trainer/run_qwen2-7b.sh": None,
    "examples/grpo_trainer/run_qwen2-7b_math.sh": None,
    "examples/grpo_trainer/run_qwen2-7b_seq_balance.sh": None,
    "examples/grpo_trainer/run_qwen3-8b.sh": None,
    "examples/grpo_trainer/run_gptoss_20b.sh": None,
    # fsdp_config.mixed_precision.{param,reduce,buffer}_dtype
    "examples/grpo_trainer/run_qwen3-32b_npu.sh": None,
    "examples/ppo_trainer/run_deepseek7b_llm.sh": None,
    "examples/ppo_trainer/run_gemma.sh": None,
    "examples/ppo_trainer/run_qwen2-7b_seq_balance.sh": None,
    "examples/ppo_trainer/run_qwen2-7b_sglang_seq_balance.sh": None,
    "examples/ppo_trainer/run_qwen2.5-32b.sh": None,
    "examples/gpg_trainer/run_qwen2-7b_math.sh": None,
    "examples/rloo_trainer/run_qwen2-7b.sh": None,
    "examples/remax_trainer/run_qwen2.5-3b_seq_balance.sh": None,
    "examples/reinforce_plus_plus_trainer/run_qwen2-7b_math_rf.sh": None,
    "examples/reinforce_plus_plus_trainer/run_qwen2-7b_math_rf_baseline.sh": None,
    # a discriminative reward model (reward_model.enable=True) next to the rule rewards
    "examples/ppo_trainer/run_qwen2-7b_rm.sh": None,
    "examples/grpo_trainer/run_mistral13b_skyworkrm_hhrlhf.sh": None,
    "examples/ppo_trainer/run_deepseek7b_llm_pfppo.sh": None,
    "examples/gmpo_trainer/run_qwen2_5-7b_math.sh": None,
    "examples/otb_trainer/run_qwen2_5-7b.sh": None,
    # Ulysses sequence parallelism (actor, reference and critic): 8 ranks are 4 data-parallel ranks of 2
    "examples/ppo_trainer/run_deepseek7b_llm_sp2.sh": None,
    # --config-name=ppo_megatron_trainer and actor_rollout_ref.{actor,ref}.megatron.*
    "examples/grpo_trainer/run_deepseek7b_llm_math_megatron.sh": MEGATRON,
    "examples/grpo_trainer/run_qwen2_5-7b_math_megatron_diff_tp.sh": MEGATRON,
    "examples/ppo_trainer/run_deepseek_math_gsm8k_megatron.sh": MEGATRON,
    "examples/ppo_trainer/run_qwen2-7b_math_gsm8k_megatron.sh": MEGATRON,
    "examples/gpg_trainer/run_qwen2-7b_math_megatron.sh": MEGATRON,
    # features rlcore does not have yet
    "examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh": None,
    "examples/grpo_trainer/run_qwen2-7b_math_trtllm.sh": "actor_rollout_ref.rollout.name=trtllm: unknown rollout_engine",
    # vision-language (geo3k with images; run with the tiny VLM and an image task, see VLM_SCRIPTS)
    "examples/grpo_trainer/run_qwen2_5_vl-7b.sh": None,
    "examples/grpo_trainer/run_qwen2_5_vl-7b_seq_balance.sh": None,
    "examples/grpo_trainer/run_qwen2_5_vl-7b_freeze_vision.sh": None,
    "examples/grpo_trainer/run_qwen2_5_vl-7b_lora.sh": None,
    "examples/grpo_trainer/run_qwen2_5_vl-7b-sglang.sh": None,
    # needs $DIST_CKPT_PATH, a Megatron checkpoint converted offline (the harness has none of the tiny VLM)
    "examples/grpo_trainer/run_qwen2_5_vl-7b-megatron.sh": "dist_checkpointing_path=",
    "examples/grpo_trainer/run_qwen2_5_vl_7b_fsdp.sh": None,
    # v0.9.0's scripts that need variables their user must set (the harness's USER_VARIABLES): $INFER_BACKEND
    # (Qwen3-VL-30B-A3B), $RAY_DATA_HOME (Nemotron-Nano-V3 on Megatron) and $LORA_ADAPTER_PATH (LoRA resumed from a
    # saved adapter, whose rank it takes: run with a tiny adapter of the tiny model, ADAPTER_SCRIPTS)
    "examples/grpo_trainer/run_qwen3_vl_30b_a3b_fsdp.sh": None,
    "examples/grpo_trainer/run_nemotron_nano_v3_30b_a3b_megatron.sh": MEGATRON,
    "examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh": None,
    # model_engine=megatron is accepted now; verl's mbridge settings (and fused kernels on Megatron) stop it
    "examples/grpo_trainer/run_qwen2_5_vl_7b_megatron.sh": MEGATRON,
    # global_profiler.tool=npu: recorded by torch.profiler (rlcore_plugin_profiler.npu)
    "examples/grpo_trainer/run_qwen2_5_7b_grpo_discrete_prof_npu.sh": None,
    # a Megatron script that also asks for the fused log-prob kernels (use_fused_kernels=True: noted on Megatron)
    "examples/grpo_trainer/run_qwen2-7b_math_megatron.sh": MEGATRON,
    "examples/ppo_trainer/run_deepseek7b_llm_sandbox_fusion.sh": None,  # reward_model.sandbox_fusion.*
    # v0.9.0's scheduled torch profile: warmup=1 on a continuous trace (the schedule's window starts at mini-batch 1)
    "examples/profile/run_qwen2_5_7b_torch_profile.sh": None,
    # verl's own Hydra config rejects this script's actor_rollout_ref.model.torch_dtype (no such key)
    "examples/cispo_trainer/run_cispo_qwen2_5_0_5b_gsm8k.sh": "actor_rollout_ref.model.torch_dtype: not a key of verl",
    # multi-turn (verl's --config-path configs and tool/interaction YAMLs are read from the copies): one passes,
    # the others stop at a feature that is not multi-turn's
    # data.sampler: the class_path names a module of verl's tests; rlcore_testkit.samplers stands in for it
    "examples/sglang_multiturn/run_qwen0.5b_gsm8k_multiturn_curriculum.sh": None,
    # enable_activation_offload (noted: nothing to offload on CPU)
    "examples/sglang_multiturn/run_qwen2.5-0.5b_gsm8k_multiturn_w_interaction.sh": None,
    # global_profiler.tool=torch_memory, over_sample_rate=0.1, multi_stage_wake_up (noted)
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh": None,
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_4xgpu.sh": None,
    # SGLang's server mode (sglang_rollout_mode=server, rollout.server.*; rlcore-plugin-sglang)
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_4xgpu_server.sh": None,
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_server.sh": None,
    # the script sets actor.use_kl_loss=${use_kl_loss} from a variable it never defines (verl rejects '' too)
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh": "use_kl_loss='' has the wrong type",
    # rollout tracing to MLflow (trace.backend=mlflow, token2text=True)
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_tool_agent_mlflow.sh": None,
    # virtual pipeline stages (vpp=2), context parallelism (cp=2) and megatron.seed run
    "examples/sglang_multiturn/run_qwen2.5-3b_megatron_gsm8k_multiturn.sh": None,
    "examples/sglang_multiturn/run_qwen3-4b_gsm8k_multiturn.sh": None,  # over_sample_rate=0.1
    # mixture-of-experts scripts on the Megatron engine with expert parallelism (docs/moe.md); run with a tiny
    # Qwen3-MoE (MOE_SCRIPTS) or, the Qwen3-VL-MoE ones, the tiny VLM
    "examples/grpo_trainer/run_deepseek671b_math_megatron_80gb.sh": MEGATRON,
    "examples/grpo_trainer/run_deepseek671b_math_megatron_96gb.sh": MEGATRON,
    # use_dist_checkpointing=True from $DIST_CKPT_PATH, a megatron-core distributed checkpoint the user converted
    # (the harness gives it the tiny MoE's, DIST_SCRIPTS)
    "examples/grpo_trainer/run_moonlight16b_math_megatron.sh": MEGATRON,
    "examples/grpo_trainer/run_qwen3-235b_megatron_96gb.sh": MEGATRON,
    "examples/grpo_trainer/run_qwen3_vl-235b-megatron.sh": MEGATRON,
    # its GPU count comes from a variable the script leaves to the user (tp 2 x cp 2 on one rank)
    "examples/grpo_trainer/run_qwen3_vl-30b-megatron.sh": "must divide the number of ranks",
    # verl's Megatron optimizer schedule keys (optim.lr_decay_style='constant' after 10 warm-up steps)
    "examples/grpo_trainer/run_qwen3moe-30b_megatron_96gb.sh": MEGATRON,
    # LoRA on the Megatron backend (model.lora.*, the experts' projections included)
    "examples/grpo_trainer/run_qwen3moe-30b_megatron_lora.sh": MEGATRON,
    # trainer.n_gpus_per_node from a variable the script leaves to the user
    "examples/gspo_trainer/run_qwen30b_gspo.sh": "n_gpus_per_node='' has the wrong type",
    "examples/ppo_trainer/run_moonlight16b_a3b_gsm8k_megatron.sh": MEGATRON,
    # v0.9.0's Moonlight GRPO script: $DIST_CKPT_PATH as the older one
    "examples/grpo_trainer/run_moonlight_16b_a3b_megatron.sh": MEGATRON,
    # routing replay R3 with SGLang, which does not return the routing (rollout.skip_tokenizer_init=True is accepted)
    "examples/router_replay/run_qwen30_a3b_megatron_sglang.sh": "rollout.name=sglang: this engine does not return it",
    "examples/router_replay/run_qwen30_a3b_megatron_vllm.sh": MEGATRON,  # router_replay.mode=R2 on Megatron
}

#: script -> a note its passing dry run must print (a verl switch that changes nothing in rlcore)
NOTES: dict[str, str] = {
    **{
        f"examples/grpo_trainer/{name}.sh": OPTIMIZER_OFFLOAD_NOTE
        for name in (
            "run_deepseek671b_math_megatron_96gb",
            "run_qwen3-235b_megatron_96gb",
            "run_qwen3_vl-235b-megatron",
            "run_qwen3moe-30b_megatron_96gb",
        )
    },
    "examples/grpo_trainer/run_qwen2-7b_math_megatron.sh": "use_fused_kernels=True changes nothing on the Megatron",
    "examples/profile/run_qwen2_5_7b_torch_profile.sh": (
        "update mini-batch(es) from mini-batch 1 (torch.profiler.schedule(active=2, repeat=1, skip_first=0, wait=0, "
        "warmup=1)), the stages before the first window dropped"
    ),
    "examples/ppo_trainer/run_qwen2-7b_rm.sh": "note: reward_model.rollout.name=vllm changes nothing in rlcore",
    "examples/grpo_trainer/run_mistral13b_skyworkrm_hhrlhf.sh": "note: reward_model.rollout.name=vllm changes nothing",
    "examples/sglang_multiturn/run_qwen0.5b_gsm8k_multiturn_curriculum.sh": (
        "data.sampler: rlcore_testkit.samplers.RandomCurriculumSampler (curriculum sampler"
    ),
    "examples/sglang_multiturn/run_qwen2.5-0.5b_gsm8k_multiturn_w_interaction.sh": (
        "note: actor_rollout_ref.model.enable_activation_offload=True changes nothing in rlcore on trainer.device=cpu"
    ),
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh": (
        "profiler: torch_memory on CPU: torch.profiler with profile_memory=True"
    ),
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_server.sh": (
        "note: actor_rollout_ref.rollout.multi_stage_wake_up=True changes nothing in rlcore"
    ),
}

#: scripts whose data.sampler.class_path is ``pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu`` (a
#: module of verl's own tests): the test writes that module, re-exporting rlcore's stand-in, and imports it
CURRICULUM_SCRIPTS = {"examples/sglang_multiturn/run_qwen0.5b_gsm8k_multiturn_curriculum.sh"}
CURRICULUM_MODULE = "from rlcore_testkit.samplers import RandomCurriculumSampler  # noqa: F401\n"

#: scripts run with the tiny VLM and an image task instead of the tiny text model and task
VLM_SCRIPTS = {script for script in EXPECTED if "_vl" in script and "_vllm" not in script}
#: scripts that resume LoRA from a saved adapter: run with a tiny adapter of the tiny model
ADAPTER_SCRIPTS = {"examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh"}
#: scripts that start from a megatron-core distributed checkpoint (megatron.dist_checkpointing_path, from
#: $DIST_CKPT_PATH or written in the script): given the tiny MoE's (the Qwen2.5-VL one is left without: a checkpoint
#: of another model would pass a dry run that reads only its marker)
DIST_SCRIPTS = {
    "examples/grpo_trainer/run_moonlight16b_math_megatron.sh",
    "examples/grpo_trainer/run_moonlight_16b_a3b_megatron.sh",
    "examples/ppo_trainer/run_moonlight16b_a3b_gsm8k_megatron.sh",
}
#: mixture-of-experts scripts (expert parallelism, routing replay) run with a tiny Qwen3-MoE
MOE_SCRIPTS = {
    f"examples/{name}.sh"
    for name in (
        "grpo_trainer/run_deepseek671b_math_megatron_80gb",
        "grpo_trainer/run_deepseek671b_math_megatron_96gb",
        "grpo_trainer/run_moonlight16b_math_megatron",
        "grpo_trainer/run_moonlight_16b_a3b_megatron",
        "grpo_trainer/run_qwen3-235b_megatron_96gb",
        "grpo_trainer/run_qwen3moe-30b_megatron_96gb",
        "grpo_trainer/run_qwen3moe-30b_megatron_lora",
        "gspo_trainer/run_qwen30b_gspo",
        "ppo_trainer/run_moonlight16b_a3b_gsm8k_megatron",
        "router_replay/run_qwen30_a3b_megatron_sglang",
        "router_replay/run_qwen30_a3b_megatron_vllm",
    )
}


def test_the_table_covers_every_copied_script() -> None:
    copied = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.sh")}
    assert copied == set(EXPECTED)
    assert set(NOTES) <= set(EXPECTED)


@pytest.mark.skipif(shutil.which("bash") is None, reason="the example scripts are bash scripts")
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_verl_script_dry_run(script: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    vlm = script in VLM_SCRIPTS
    tiny_model_dir = request.getfixturevalue(
        "tiny_vlm_dir" if vlm else "tiny_moe_dir" if script in MOE_SCRIPTS else "tiny_model_dir"
    )
    tiny_task = request.getfixturevalue("tiny_vl_task" if vlm else "tiny_task")
    expected = EXPECTED[script]
    if expected == MEGATRON and load_plugins().registry.has("training_backend", "megatron"):
        expected = None
    if script.startswith("examples/sglang_multiturn/"):  # the script names its configs under $(pwd)/examples
        shutil.copytree(EXAMPLES / "examples" / "sglang_multiturn", tmp_path / "examples" / "sglang_multiturn")
    if script in CURRICULUM_SCRIPTS:
        module = tmp_path / "tests" / "utils" / "dataset" / "test_create_rl_sampler_on_cpu.py"
        module.parent.mkdir(parents=True)
        module.write_text(CURRICULUM_MODULE)
        request.getfixturevalue("monkeypatch").syspath_prepend(str(tmp_path))
    adapter = request.getfixturevalue("tiny_lora_adapter") if script in ADAPTER_SCRIPTS else None
    checkpoint = request.getfixturevalue("tiny_moe_dist_checkpoint") if script in DIST_SCRIPTS else None
    arguments = localised(verl_arguments(EXAMPLES, script, tmp_path), tiny_model_dir, tiny_task, adapter, checkpoint)
    result = CliRunner().invoke(cli, ["run", "--dry-run", *arguments])
    if expected is None:
        assert result.exit_code == 0, result.output
        assert "prompts per step:" in result.output
        assert NOTES.get(script, "") in result.output
        assert ("images: <image> placeholders" in result.output) == vlm
        if EXPECTED[script] == MEGATRON or "megatron" in Path(script).name:
            assert data_parallel_line(arguments) in result.output
    else:
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert expected in result.output, result.output


def test_the_vllm_multiturn_script_runs_once_its_empty_variable_is_set(
    tmp_path: Path, tiny_model_dir: Path, tiny_task: dict[str, Path]
) -> None:
    """The script passes ``use_kl_loss=${use_kl_loss}``, a variable it never sets (verl rejects the empty value
    too); with the value a user would give it (the script's own ``use_kl_loss=True`` a few lines above), the
    dry run passes."""
    script = "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh"
    shutil.copytree(EXAMPLES / "examples" / "sglang_multiturn", tmp_path / "examples" / "sglang_multiturn")
    arguments = localised(verl_arguments(EXAMPLES, script, tmp_path), tiny_model_dir, tiny_task)
    result = CliRunner().invoke(cli, ["run", "--dry-run", *arguments, "actor_rollout_ref.actor.use_kl_loss=true"])
    assert result.exit_code == 0, result.output
    assert "prompts per step:" in result.output


# ------------------------------------------------------------------ docs/from-verl.md is kept honest
DOC = Path(__file__).resolve().parents[1] / "docs" / "from-verl.md"
VERL_DEFAULTS = EXAMPLES / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml"
VERL010_DEFAULTS = (
    Path(__file__).parent / "verl010_examples" / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml"
)
#: verl 0.10 spellings its reward managers read (``config.reward.get("reward_kwargs")``) that its config does not
#: declare: its scripts add them with '+'
VERL010_ADDED = {"reward.reward_kwargs"}
#: verl's generated configs of its TorchTitan and VeOmni engines (README.md there)
ENGINE_CONFIGS = Path(__file__).parent / "verl_engine_configs"


def doc_tables(heading: str) -> list[list[list[str]]]:
    """The tables under ``## heading`` in the migration page: each a list of body rows, each a list of cells."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[list[str]]] = []
    previous = ""
    for line in section.splitlines():
        if line.startswith("|") and not previous.startswith("|"):
            tables.append([])
        if line.startswith("|"):
            tables[-1].append([cell.strip() for cell in line.strip("|").split("|")])
        previous = line
    return [table[2:] for table in tables]


def ticked(cell: str) -> list[str]:
    """The `code` spans of a table cell."""
    return re.findall(r"`([^`]+)`", cell)


def test_renamed_table_is_the_alias_table() -> None:
    """Each row is one spelling: in the verl 0.9 column (:data:`ALIASES`) or the verl 0.10 one
    (:data:`VERL010_ALIASES`), with rlcore's key."""
    (table,) = doc_tables("Renamed keys")
    rows = {(tuple(ticked(old)), tuple(ticked(new)), tuple(ticked(ours))) for old, new, ours in table}
    expected = {((a,), (), (t,)) for a, t in ALIASES.items()} | {((), (a,), (t,)) for a, t in VERL010_ALIASES.items()}
    assert rows == expected


def sort_keys(keys: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """How many of ``keys`` (verl's dotted keys with their values) rlcore has under the same name, under another
    name, accepts with a plan note (a substituted engine's speed choices) or names as a missing feature; and the
    keys that are none of these."""
    known = known_keys(default_config())
    counts = {"same": 0, "renamed": 0, "noted": 0, "missing": 0}
    unsorted = []
    for key, value in keys.items():
        target = canonical_key(key)
        if known.declares(target):
            counts["same" if target == key else "renamed"] += 1
        elif noted_engine_key(target, value):
            counts["noted"] += 1
        elif missing_feature(target) is not None:
            counts["missing"] += 1
        else:
            unsorted.append(key)
    return counts, unsorted


def generated_keys(path: Path) -> dict[str, Any]:
    """The dotted keys of one of verl's generated configs with their values (its ``_target_`` class names left
    out)."""
    return {k: v for k, v in flatten(yaml.safe_load(path.read_text())).items() if not k.endswith("_target_")}


def test_every_verl010_spelling_is_in_its_generated_config_and_the_counts_are_right() -> None:
    """The verl 0.10 column names keys of verl 0.10's own default config; every key of that config exists in
    rlcore (maybe renamed), is one of FSDP-Turbo's kept keys or belongs to a missing feature; and the page's counts
    are right."""
    keys = generated_keys(VERL010_DEFAULTS)
    for alias in set(VERL010_ALIASES) - VERL010_ADDED:
        assert any(k == alias or k.startswith(alias + ".") for k in keys), alias
    counts, unsorted = sort_keys(keys)
    assert unsorted == []
    text = " ".join(DOC.read_text().split())
    assert (
        f"{counts['same']} exist in rlcore under the same name and {counts['renamed']} under another name, "
        f"{counts['noted']} are FSDP-Turbo's turbo_config keys, accepted and read only with strategy=fsdp_turbo, and "
        f"{counts['missing']} belong to those features" in text
    )


@pytest.mark.parametrize("engine", ["torchtitan", "veomni"])
def test_every_key_of_verls_engine_configs_is_sorted_and_counted(engine: str) -> None:
    """Every key of verl's generated config for its TorchTitan or VeOmni engine exists in rlcore (maybe renamed) or
    belongs to a missing feature (the engine's own section and optimizer keys: its feature), and the page's counts
    are right."""
    counts, unsorted = sort_keys(generated_keys(ENGINE_CONFIGS / f"_generated_ppo_{engine}_trainer.yaml"))
    assert unsorted == []
    text = " ".join(DOC.read_text().split())
    noted = f", {counts['noted']} accepted with a plan note" if counts["noted"] else ""
    assert (
        f"`_generated_ppo_{engine}_trainer.yaml`: {counts['same']} under the same name, {counts['renamed']} under "
        f"another name{noted} and {counts['missing']} in those features" in text
    )


def test_missing_table_is_the_feature_table() -> None:
    features, values = doc_tables("Not in rlcore yet")
    assert [(f, ticked(keys)) for f, keys, _ in features] == [(m.feature, list(m.patterns)) for m in MISSING_FEATURES]
    for (_, _, off), missing in zip(features, MISSING_FEATURES):
        assert {k: yaml.safe_load(v) for k, v in (t.split("=", 1) for t in ticked(off))} == dict(missing.off)
    assert [(ticked(key)[0], feature) for key, feature in values] == [
        (f"{key}=true", feature) for key, (_, feature) in UNSUPPORTED_VALUES.items()
    ]


def test_every_verl_default_key_is_accounted_for() -> None:
    """Each key of verl's default config exists in rlcore (maybe renamed) or belongs to a missing feature, the
    page's counts are right, and no missing feature names a key rlcore has."""
    known = known_keys(default_config())
    same = renamed = 0
    unaccounted = []
    for key in flatten(yaml.safe_load(VERL_DEFAULTS.read_text())):
        if key.endswith("_target_"):
            continue
        target = canonical_key(key)
        # verl 0.9 sets the rollout's profiler.tool_config to the actor's whole section, which rlcore declares
        if known.declares(target) or any(leaf.startswith(target + ".") for leaf in known.leaves):
            same, renamed = (same + 1, renamed) if target == key else (same, renamed + 1)
        elif missing_feature(target) is None:
            unaccounted.append(key)
    assert unaccounted == []
    assert f"{same} exist in rlcore under the same name and {renamed} under another name" in DOC.read_text()
    megatron = load_plugins().registry.has("training_backend", "megatron")
    for feature in MISSING_FEATURES:
        if megatron and feature.hint == MEGATRON_HINT:
            continue
        assert [key for key in known.leaves | known.free if feature.matches(key)] == [], feature.feature
    for alias in [*ALIASES, *VERL010_ALIASES]:  # one may lie in a free-form mapping: it takes its keys out of it
        assert alias not in known.leaves | known.free, f"{alias} is an alias but also a key of its own"


def test_sample_counts_in_the_doc() -> None:
    passing = sum(1 for v in EXPECTED.values() if v is None)
    megatron = sum(1 for v in EXPECTED.values() if v == MEGATRON)
    text = DOC.read_text()
    assert f"a sample of {len(EXPECTED)} of verl's own example scripts" in text
    assert f"**{passing} pass**" in text and f"**{megatron} use the Megatron backend**" in text
    assert f"**{len(EXPECTED) - passing - megatron} need a feature rlcore does not have yet**" in text
