"""verl's June-2026 example scripts that rlcore learned to dry-run in issue 45, run through ``rlcore run --dry-run``
with only the entry point swapped (:mod:`tests.verl_scripts_harness`, as ``tests/test_verl010_scripts.py`` runs
verl 0.10's).

The scripts under ``tests/verl_june_examples/`` are unmodified copies from verl at commit 41a5244 (see the NOTICE
there): the five ``model_engine=veomni`` scripts that rlcore's FSDP engine trains as a named substitution, the
Qwen3.5 Megatron script (``megatron.use_remove_padding=False``), the Qwen3-Next FSDP script
(``fsdp_config.use_orig_params=True``), the SAPO script (``ulimit -n``, shimmed) and the MiMo MTP script
(``actor_rollout_ref.model.mtp.*``: MTP training on Megatron) and the router-replay Megatron script (R3 with
pipeline parallelism 6 and full recomputation).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from tests.verl_scripts_harness import (  # noqa: F401 (the fixtures are used by name)
    localised,
    tiny_moe_dir_fixture,
    tiny_task_fixture,
    verl_arguments,
)

EXAMPLES = Path(__file__).parent / "verl_june_examples"
#: the scripts -> whether they train a mixture-of-experts model (the tiny MoE model stands in)
SCRIPTS: dict[str, bool] = {
    "examples/grpo_trainer/run_qwen3_30b_veomni.sh": True,
    "examples/grpo_trainer/run_qwen3_5_35b_a3b_veomni.sh": True,
    "examples/grpo_trainer/run_qwen3_5_35b_megatron.sh": False,
    "examples/grpo_trainer/run_qwen3_next_80b_a3b_fsdp.sh": True,
    "examples/grpo_trainer/run_qwen3_vl_30b_moe_veomni.sh": True,
    "examples/mtp_trainer/run_mimo_7b_mtp_megatron.sh": False,
    "examples/on_policy_distillation_trainer/run_qwen3_0.6b_opd_veomni.sh": False,
    "examples/on_policy_distillation_trainer/run_qwen3_8b_mopd_veomni.sh": False,
    "examples/router_replay/run_qwen3_30b_a3b_megatron.sh": True,
    "examples/sapo_trainer/run_qwen3_8b_fsdp.sh": False,
}

#: script -> a note its passing dry run must print: keys verl's scripts add with '+' that change nothing in verl
#: (SAPO's temperatures under policy_loss, which verl's SAPO loss does not read) or only speed (megatron-core's
#: optimizer CPU offload, which is rlcore's megatron.optimizer_offload)
NOTES: dict[str, str] = {
    "examples/grpo_trainer/run_qwen3_5_35b_megatron.sh": (
        "override_optimizer_config.optimizer_cpu_offload=True (fraction 1) -> actor_rollout_ref.actor.megatron."
        "optimizer_offload=true"
    ),
    "examples/sapo_trainer/run_qwen3_8b_fsdp.sh": "actor_rollout_ref.actor.policy_loss.tau_pos=1.0 has no effect",
}


def test_the_table_covers_every_copied_script() -> None:
    assert {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.sh")} == set(SCRIPTS)
    assert set(NOTES) <= set(SCRIPTS)


@pytest.mark.skipif(shutil.which("bash") is None, reason="the example scripts are bash scripts")
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_verl_june_script_dry_run(script: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    model = request.getfixturevalue("tiny_moe_dir" if SCRIPTS[script] else "tiny_model_dir")
    arguments = localised(verl_arguments(EXAMPLES, script, tmp_path), model, request.getfixturevalue("tiny_task"))
    result = CliRunner().invoke(cli, ["run", "--dry-run", *arguments])
    assert result.exit_code == 0, result.output
    assert "prompts per step:" in result.output
    assert NOTES.get(script, "") in result.output
    if "mtp_trainer" in script:
        assert "actor_rollout_ref.model.mtp.enable=True with actor_rollout_ref.actor.megatron" in result.output
    if "router_replay" in script:  # R3 over 6 pipeline stages: each replays its own layers
        assert "router_replay:\n      mode: R3" in result.output
        assert "pipeline_model_parallel_size: 6" in result.output
    if "veomni" in script:
        assert "model_engine=veomni: trained by rlcore's FSDP engine" in result.output
