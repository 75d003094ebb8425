"""verl 0.10's torch-profiler options: the roles' ``profiler.tool_config.torch`` (contents, discrete, schedule,
the rollout's token window), ``global_profiler.relocate_results`` and ``global_profiler.finish_hook_cmd``."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rlcore_plugin_profiler.finish import run_finish_hook
from rlcore_plugin_profiler.plan import describe_profiler, profile_plan
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run

from rlcore.config import default_config
from rlcore.errors import RLCoreError

ACTOR = "actor_rollout_ref.actor.profiler.tool_config.torch"
ROLLOUT = "actor_rollout_ref.rollout.profiler.tool_config.torch"
#: writes one line per hook run with the variables verl exports
HOOK = (
    'echo "$VERL_PROFILE_SAVE_PATH|$VERL_PROFILE_TOOL|$VERL_PROFILE_RANK|$VERL_PROFILE_PID|$VERL_PROFILE_ROLE|'
    '$(ls $VERL_PROFILE_SAVE_PATH/step2 | wc -l)" >> {out}'
)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def names(path: Path) -> set[str]:
    return {event.get("name", "") for event in events(path)}


def run(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], *extra: str) -> Path:
    save = tmp_path / "profile"
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "trainer.test_freq=-1",
        "global_profiler.tool=torch",
        "global_profiler.steps=[1,2]",
        f"global_profiler.save_path={save}",
        *extra,
    )
    return save


def test_continuous_trace_relocated_rollout_traces_and_the_finish_hook(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """The script's defaults: the actor traced continuously (one file per step, stages and mini-batches as rows,
    schedule.active=1 keeping the first of the update's two mini-batches), the rollout discrete (the hf engine
    traces itself into its replica folder), relocated next to the training trace; the hook runs once, after
    step 2, with verl's variables."""
    out = tmp_path / "hook.txt"
    save = run(
        tmp_path,
        tiny_model_dir,
        task,
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.rollout.profiler.enable=true",
        f"{ACTOR}.contents=[cpu,shapes]",
        f"{ACTOR}.schedule.active=1",
        f"{ROLLOUT}.discrete=true",
        "global_profiler.relocate_results=true",
        f"global_profiler.finish_hook_cmd='{HOOK.format(out=out)}'",
    )
    assert files(save) == [
        f"step{n}/{name}"
        for n in (1, 2)
        for name in ("actor_rollout_rank0.trace.json", f"rollout-replica0_step{n}_rank0.trace.json")
    ]
    training = save / "step1/actor_rollout_rank0.trace.json"
    rows = names(training)
    assert {"update_actor", "mini_batch0"} <= rows
    assert "mini_batch1" not in rows, "schedule.active=1 keeps the first update mini-batch only"
    assert "generate_sequences" not in rows, "the rollout has a trace of its own"
    assert any("Input Dims" in e.get("args", {}) for e in events(training)), "contents=shapes records shapes"
    rollout = save / "step1/rollout-replica0_step1_rank0.trace.json"
    assert any("mm" in n for n in names(rollout)), "the rollout trace holds the model's matrix products"
    (line,) = out.read_text().splitlines()
    path, tool, rank, pid, role, count = line.split("|")
    assert (path, tool, rank, role, int(count)) == (str(save), "torch", "0", "actor_rollout", 2)
    assert int(pid) > 0


def test_discrete_stages_follow_the_schedule_and_the_rollout_token_window(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """discrete=true: one trace per stage; the update's follows the whole schedule (skip the first mini-batch,
    keep one); the rollout covers response tokens 2..4 only and stays in its replica folder without
    relocate_results; a failing hook is reported and the run goes on."""
    caplog.set_level(logging.WARNING, logger="rlcore_plugin_profiler.finish")
    save = run(
        tmp_path,
        tiny_model_dir,
        task,
        "global_profiler.steps=[2]",
        f"{ACTOR}.discrete=true",
        f"{ACTOR}.contents=[memory]",
        f"{ACTOR}.schedule.skip_first=1",
        f"{ACTOR}.schedule.active=1",
        f"{ROLLOUT}.profile_token_start=2",
        f"{ROLLOUT}.profile_token_end=5",
        "global_profiler.finish_hook_cmd='echo uploading; exit 3'",
    )
    assert files(save) == [
        "agent_loop_rollout_replica_0/step2_rank0_chunk0.trace.json",
        "step2/actor_rollout_rank0.compute_log_prob.trace.json",
        "step2/actor_rollout_rank0.sync_weights.trace.json",
        "step2/actor_rollout_rank0.update_actor.trace.json",
    ]
    update = names(save / "step2/actor_rollout_rank0.update_actor.trace.json")
    assert "mini_batch1" in update and "mini_batch0" not in update
    assert any(e.get("name") == "[memory]" for e in events(save / "step2/actor_rollout_rank0.update_actor.trace.json"))
    rollout = events(save / "agent_loop_rollout_replica_0/step2_rank0_chunk0.trace.json")
    layers = json.loads((tiny_model_dir / "config.json").read_text())["num_hidden_layers"]
    norms = [e for e in rollout if e.get("name") == "aten::rms_norm" and e.get("ph") == "X"]
    assert len(norms) == 3 * (2 * layers + 1), "tokens 2, 3 and 4: three forwards of the model, 2L + 1 norms each"
    (record,) = [r for r in caplog.records if "finish_hook_cmd failed" in r.getMessage()]
    assert "exit status 3" in record.getMessage() and "uploading" in record.getMessage()


def test_a_continuous_trace_follows_the_whole_schedule(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """verl 0.9's scheduled script (warmup=1, active=1, repeat=1) on a continuous trace: the step's session is
    advanced once per update mini-batch, the stages before the update sharing the first mini-batch's slot, so
    the warmup drops them with mini-batch 0 and the one file holds mini-batch 1 only, its optimizer step
    included (as torch.profiler does under verl); the plan says so."""
    schedule = (f"{ACTOR}.schedule.warmup=1", f"{ACTOR}.schedule.active=1", f"{ACTOR}.schedule.repeat=1")
    line = describe_profiler(config("global_profiler.tool=torch", "global_profiler.steps=[1]", *schedule))
    assert line is not None and (
        "one window of 1 update mini-batch(es) from mini-batch 1 (torch.profiler.schedule(active=1, repeat=1, "
        "skip_first=0, wait=0, warmup=1)), the stages before the first window dropped" in line
    )
    save = run(tmp_path, tiny_model_dir, task, "global_profiler.steps=[1]", "trainer.total_training_steps=1", *schedule)
    assert files(save) == ["step1/actor_rollout_rank0.trace.json"]
    rows = names(save / "step1/actor_rollout_rank0.trace.json")
    assert "mini_batch1" in rows and any("AdamW.step" in row for row in rows)
    assert not {"mini_batch0", "generate_sequences", "compute_log_prob"} & rows


def test_the_hook_runs_through_the_shell_and_a_failure_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rlcore_plugin_profiler.finish")
    out = tmp_path / "env.txt"
    assert run_finish_hook(
        f'echo "$VERL_PROFILE_ROLE $VERL_PROFILE_RANK" > {out}', save_path="p", tool="torch", rank=3, role="critic"
    )
    assert out.read_text() == "critic 3\n"
    assert not run_finish_hook("no-such-command-here", save_path="p", tool="torch", rank=0, role="critic")
    assert "exit status 127" in caplog.text


def config(*overrides: str) -> object:
    return OmegaConf.merge(default_config(), OmegaConf.from_dotlist(list(overrides)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((f"{ACTOR}.contents=[gpu]",), f"{ACTOR}.contents must be a list of cpu, cuda, memory, shapes, stack"),
        ((f"{ACTOR}.discrete=maybe",), f"{ACTOR}.discrete must be true or false"),
        ((f"{ACTOR}.schedule.active=-1",), f"{ACTOR}.schedule.active must be a whole number >= 0"),
        ((f"{ACTOR}.schedule.wait=1",), f"{ACTOR}.schedule.wait=1 has no effect while schedule.active is 0"),
        (
            (f"{ROLLOUT}.profile_token_start=4", f"{ROLLOUT}.profile_token_end=4"),
            f"{ROLLOUT}.profile_token_end=4 must be greater than profile_token_start=4",
        ),
        (
            ("actor_rollout_ref.ref.profiler.tool_config.torch.discrete=true",),
            "actor_rollout_ref.ref.profiler.tool_config.torch differs from actor_rollout_ref.actor's",
        ),
        (("global_profiler.relocate_results=2",), "global_profiler.relocate_results must be true or false"),
        (("global_profiler.finish_hook_ranks=[0]",), "choose where global_profiler.finish_hook_cmd runs"),
        (("global_profiler.finish_hook_cmd=''",), "global_profiler.finish_hook_cmd must be a shell command"),
    ],
)
def test_bad_values_are_named(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(RLCoreError, match=None) as error:
        profile_plan(config("global_profiler.tool=torch", "global_profiler.steps=[1]", *overrides))
    assert message in str(error.value)


def test_torch_options_with_another_tool_and_unavailable_tool_configs_are_named(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    base = tiny_overrides(tmp_path, tiny_model_dir, task)
    other = dry_run(*base, "global_profiler.tool=torch_memory", f"{ACTOR}.discrete=true")
    assert other.exit_code == 2
    assert f"{ACTOR} is set, but it applies to global_profiler.tool=torch and the tool is torch_memory" in other.output
    nsys = dry_run(
        *base, "global_profiler.tool=torch", "actor_rollout_ref.actor.profiler.tool_config.nsys.discrete=true"
    )
    assert nsys.exit_code == 2
    assert "actor_rollout_ref.actor.profiler.tool_config.nsys.discrete: Nsight/NPU profiling" in nsys.output


def test_the_hook_runs_after_the_last_profiled_step_only() -> None:
    plan = profile_plan(config("global_profiler.tool=torch", "global_profiler.steps=[2,3,5]"))
    assert plan is not None
    assert [plan.final(step, last=10) for step in (2, 3, 5)] == [False, False, True]
    assert [plan.final(step, last=4) for step in (2, 3)] == [False, True]
    continuous = profile_plan(
        config(
            "global_profiler.tool=torch", "global_profiler.steps=[2,3]", "global_profiler.profile_continuous_steps=true"
        )
    )
    assert continuous is not None and continuous.final(2, last=10)


def test_the_dry_run_says_how_each_role_is_traced_and_refuses_an_engine_that_cannot_trace_itself() -> None:
    line = describe_profiler(
        config(
            "global_profiler.tool=torch",
            "global_profiler.steps=[1]",
            "trainer.device=cpu",
            f"{ACTOR}.contents=[cuda]",
            f"{ACTOR}.schedule.active=2",
            f"{ROLLOUT}.discrete=true",
            f"{ROLLOUT}.profile_token_end=8",
            "global_profiler.finish_hook_cmd='echo done'",
            "global_profiler.finish_hook_ranks=[1]",
        )
    )
    assert line is not None
    assert "actor: stages are rows of the step's trace, the first 2 update mini-batch(es) kept, contents cuda" in line
    assert "rollout: traced by the hf engine itself over response tokens 0..8" in line
    assert "under save_path/agent_loop_rollout_replica_<r>/" in line
    assert "contents cuda records nothing on the CPU" in line
    assert "finish_hook_cmd once after the last profiled step on ranks 1" in line
    with pytest.raises(RLCoreError, match="the sglang rollout engine does not trace its own generation"):
        describe_profiler(
            config(
                "global_profiler.tool=torch",
                "global_profiler.steps=[1]",
                "actor_rollout_ref.rollout.name=sglang",
                f"{ROLLOUT}.discrete=true",
            )
        )


@pytest.mark.gpu
def test_cuda_contents_record_the_kernels_of_each_stage_on_cuda(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """The CPU twin is the discrete test above: on CUDA ``contents=[cuda]`` adds the CUDA activity, so the update's
    and the hf engine's own traces hold kernels."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("the CUDA activity needs CUDA")
    save = run(
        tmp_path,
        tiny_model_dir,
        task,
        "trainer.device=cuda",
        "trainer.total_training_steps=1",
        "global_profiler.steps=[1]",
        f"{ACTOR}.contents=[cuda]",
        f"{ACTOR}.discrete=true",
    )
    for path in (
        save / "step1/actor_rollout_rank0.update_actor.trace.json",
        save / "agent_loop_rollout_replica_0/step1_rank0.trace.json",
    ):
        assert any(event.get("cat") == "kernel" for event in events(path)), path


def test_under_ray_the_hook_runs_on_the_ranks_it_names(
    warm_ray: None, tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """Two Ray ranks, rank 0 profiled: ``finish_hook_ranks=[1]`` runs the command on rank 1 only, in its own
    process, although rank 1 wrote no trace."""
    pytest.importorskip("ray")
    out = tmp_path / "hook.txt"
    save = run(
        tmp_path,
        tiny_model_dir,
        task,
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=2",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "global_profiler.steps=[1]",
        f"global_profiler.finish_hook_cmd='{HOOK.format(out=out).replace('step2', 'step1')}'",
        "global_profiler.finish_hook_ranks=[1]",
    )
    assert files(save) == ["step1/actor_rollout_rank0.trace.json"]
    (line,) = out.read_text().splitlines()
    path, tool, rank, pid, role, count = line.split("|")
    assert (path, tool, rank, role, int(count)) == (str(save), "torch", "1", "actor_rollout", 1)
    assert int(pid) != os.getpid()


def test_a_discrete_rollout_inside_an_open_continuous_trace_is_a_row_of_it(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """``profile_continuous_steps``: steps 1 and 2 make one trace, open when step 2 generates, so step 2's rollout
    cannot have a trace of its own (one torch.profiler session per process): it is a row of the open trace,
    and a warning says so; step 1's rollout, before the trace opened, has its own."""
    caplog.set_level(logging.WARNING, logger="rlcore_plugin_profiler.worker")
    save = run(
        tmp_path,
        tiny_model_dir,
        task,
        "global_profiler.profile_continuous_steps=true",
        f"{ROLLOUT}.discrete=true",
    )
    assert files(save) == [
        "agent_loop_rollout_replica_0/step1_rank0.trace.json",
        "step1/actor_rollout_rank0.trace.json",
    ]
    assert "generate_sequences" in names(save / "step1/actor_rollout_rank0.trace.json")
    assert "generate_sequences asks for a trace of its own (discrete)" in caplog.text
