"""``global_profiler``: torch.profiler traces and memory profiles of exactly the chosen steps, per worker rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from omegaconf import OmegaConf
from rlcore_plugin_profiler.plan import describe_profiler, profile_plan
from rlcore_testkit.runs import make_tiny_task, tiny_overrides, tiny_run

from rlcore.cli import cli
from rlcore.config import default_config
from rlcore.errors import RLCoreError


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_torch_traces_only_the_chosen_steps(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    """PPO with a critic: the actor and critic workers share the local executor's process and its one
    profiler session, written once under both names."""
    save = tmp_path / "profile"
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "global_profiler.tool=torch",
        "global_profiler.steps=[2]",
        f"global_profiler.save_path={save}",
        "trainer.test_freq=-1",
    )
    assert files(save) == ["step2/actor_rollout_rank0+critic_rank0.trace.json"]
    trace = json.loads((save / "step2/actor_rollout_rank0+critic_rank0.trace.json").read_text())
    names = {event.get("name", "") for event in trace["traceEvents"]}
    assert any("addmm" in n or "mm" in n for n in names), "the trace holds no matrix products of the update"


def test_nsys_on_cpu_records_nothing_and_the_run_goes_on(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """``global_profiler.tool=nsys`` on the CPU: the run trains, no NVTX range is opened, nothing is written."""
    from rlcore_plugin_profiler import nvtx

    save = tmp_path / "profile"
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "global_profiler.tool=nsys",
        f"global_profiler.save_path={save}",
        "trainer.test_freq=-1",
    )
    assert last["training/global_step"] == 2 and not save.exists() and not nvtx.active()


@pytest.mark.gpu
def test_nsys_marks_nvtx_ranges_around_worker_calls_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA a chosen step opens the capture and a range per worker call (``CallMeter``, through the
    process's profiler), and closes them. The real NVTX calls run; the test also notes the ranges pushed."""
    import torch
    from rlcore_plugin_profiler import nvtx
    from rlcore_plugin_profiler.profiler import GlobalProfiler

    from rlcore.api.profiling import current_profiler, set_current_profiler
    from rlcore.controller.call_stats import CallMeter

    if not torch.cuda.is_available():
        pytest.skip("NVTX ranges need CUDA")
    pushed: list[str] = []
    push = torch.cuda.nvtx.range_push

    def noted_push(name: str) -> int:
        pushed.append(name)
        return push(name)

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", noted_push)
    previous = current_profiler()
    set_current_profiler(GlobalProfiler(None))  # what a worker of an nsys run holds
    try:
        profiler = current_profiler().worker_profiler(0, torch.device("cuda", 0), "actor_rollout")
        plan = {"tool": "nsys", "ranks": {"actor": (0,)}, "save_path": "unused", "memory_options": {}}
        profiler.start(1, "actor", plan)
        assert nvtx.active()
        with CallMeter("update_actor"):
            torch.ones(4, device="cuda").sum().item()
        assert profiler.stop() == [] and not nvtx.active()
        with CallMeter("update_actor"):  # outside a chosen step: no range
            pass
    finally:
        set_current_profiler(previous)
    assert pushed == ["step1", "update_actor"]


def test_torch_memory_on_cpu_profiles_every_step(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    save = tmp_path / "mem"
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "global_profiler.tool=torch_memory",
        f"global_profiler.save_path={save}",
        "global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries=1000",
        "algorithm.adv_estimator=grpo",
        "trainer.test_freq=-1",
    )
    assert files(save) == [
        f"step{step}/actor_rollout_rank0.{suffix}" for step in (1, 2) for suffix in ("memory.trace.json", "memory.txt")
    ]
    table = (save / "step1/actor_rollout_rank0.memory.txt").read_text()
    assert "CPU Mem" in table
    trace = json.loads((save / "step1/actor_rollout_rank0.memory.trace.json").read_text())
    assert any(event.get("name") == "[memory]" for event in trace["traceEvents"])


def config(*overrides: str) -> object:
    return OmegaConf.merge(default_config(), OmegaConf.from_dotlist(list(overrides)))


def test_continuous_steps_and_rank_choice() -> None:
    plan = profile_plan(
        config(
            "global_profiler.tool=torch",
            "global_profiler.steps=[2,3,5]",
            "global_profiler.profile_continuous_steps=true",
            "critic.profiler.enable=true",
            "critic.profiler.ranks=[1,3]",
        )
    )
    assert plan is not None
    assert [s for s in range(1, 7) if plan.starts(s)] == [2, 5]
    assert [s for s in range(1, 7) if plan.stops(s, 6)] == [3, 5]
    assert plan.ranks == {"critic": (1, 3)}  # only the enabled role's group is profiled
    separate = profile_plan(config("global_profiler.tool=torch", "global_profiler.steps=[2,3]"))
    assert separate is not None and [s for s in range(1, 5) if separate.stops(s, 4)] == [2, 3]
    assert separate.ranks == {"actor": (0,), "critic": (0,), "reward_model": (0,)}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("global_profiler.tool=mstx",),
            "global_profiler.tool='mstx': rlcore profiles with torch, torch_memory, nsys, npu (or null: no profiling)",
        ),
        (("global_profiler.tool=torch", "global_profiler.steps=[0]"), "global_profiler.steps must be a list"),
    ],
)
def test_bad_profiler_settings_are_named(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(RLCoreError) as info:
        profile_plan(config(*overrides))
    assert message in str(info.value)


def test_null_steps_profile_no_step_with_the_traced_tools() -> None:
    """``steps=null`` profiles no step with ``torch`` and ``npu`` (verl starts no profiler then) and every step
    with ``torch_memory`` and ``nsys``; the plan says which."""
    for tool in ("torch", "npu"):
        plan = profile_plan(config(f"global_profiler.tool={tool}"))
        assert plan is not None and plan.steps == () and not any(plan.profiled(step) for step in range(1, 5))
        line = describe_profiler(config(f"global_profiler.tool={tool}"))
        assert line is not None and "no step (global_profiler.steps is null" in line
    for tool in ("torch_memory", "nsys"):
        plan = profile_plan(config(f"global_profiler.tool={tool}"))
        assert plan is not None and plan.steps is None and plan.profiled(3)


def test_the_dry_run_says_what_it_will_record(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    base = ["run", "--dry-run", *tiny_overrides(tmp_path, tiny_model_dir, task)]
    result = CliRunner().invoke(cli, [*base, "global_profiler.tool=torch_memory", "global_profiler.steps=[1]"])
    assert result.exit_code == 0, result.output
    assert "profiler: torch_memory on CPU: torch.profiler with profile_memory=True" in result.output
    assert "steps 1" in result.output
    bad = CliRunner().invoke(cli, [*base, "global_profiler.tool=mstx"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output and "rlcore profiles with torch" in bad.output
    nsys = CliRunner().invoke(cli, [*base, "global_profiler.tool=nsys", "global_profiler.steps=[1]"])
    assert nsys.exit_code == 0, nsys.output
    assert "profiler: nsys on CPU: nothing is recorded" in nsys.output
    on_gpu = describe_profiler(config("global_profiler.tool=nsys", "trainer.device=cuda"))
    assert on_gpu is not None and "--capture-range=cudaProfilerApi" in on_gpu
    gpu = describe_profiler(config("global_profiler.tool=torch_memory", "trainer.device=cuda"))
    assert gpu is not None and "_record_memory_history" in gpu


def test_each_ray_rank_writes_its_own_trace(
    warm_ray: None, tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """Under Ray every rank is a process with its own profiler session: ``all_ranks`` gives one trace per rank."""
    pytest.importorskip("ray")
    save = tmp_path / "profile"
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=2",
        "trainer.total_training_steps=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "global_profiler.tool=torch",
        "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.all_ranks=true",
        f"global_profiler.save_path={save}",
    )
    assert files(save) == ["step1/actor_rollout_rank0.trace.json", "step1/actor_rollout_rank1.trace.json"]
