"""verl's Ascend profiler keys (``global_profiler.tool=npu``, the roles' ``profiler.tool_config.npu``) recorded by
torch.profiler without an Ascend device: the mapping, the values with no torch equal, the plan's lines and a real
profiled run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rlcore_plugin_profiler.plan import describe_profiler, profile_plan, profiler_lines
from rlcore_plugin_profiler.torch_options import TorchOptions
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run

from rlcore.config import default_config
from rlcore.errors import RLCoreError

ACTOR = "actor_rollout_ref.actor.profiler.tool_config.npu"
REF = "actor_rollout_ref.ref.profiler.tool_config.npu"
ROLLOUT = "actor_rollout_ref.rollout.profiler.tool_config.npu"
NPU = ("global_profiler.tool=npu", "global_profiler.steps=[1]")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def config(*overrides: str) -> object:
    return OmegaConf.merge(default_config(), OmegaConf.from_dotlist(list(overrides)))


def options(*overrides: str) -> dict[str, TorchOptions]:
    """The actor group's torch options per role under ``tool=npu`` with ``overrides``."""
    plan = profile_plan(config(*NPU, *overrides))
    assert plan is not None
    return plan.options["actor"]


def test_npu_settings_become_the_torch_tools() -> None:
    """``npu`` is the device's activity (``cuda``), the other contents keep their meaning (``module``:
    ``with_modules``), empty contents are CPU activity only (verl 0.10), ``discrete`` and the rollout's token
    window carry over; the reference follows the actor."""
    given = options(f"{ACTOR}.contents=[npu,cpu,memory,shapes,module,stack]", f"{ACTOR}.discrete=true")
    assert given["train"] == given["ref"]
    assert given["train"].contents == ("cuda", "cpu", "memory", "shapes", "module", "stack")
    assert given["train"].discrete and given["rollout"].discrete
    kwargs = given["train"].profile_kwargs(cuda=True)
    assert [a.name for a in kwargs["activities"]] == ["CPU", "CUDA"]
    assert kwargs["with_modules"] and kwargs["with_stack"] and kwargs["record_shapes"] and kwargs["profile_memory"]
    assert [a.name for a in given["train"].profile_kwargs(cuda=False)["activities"]] == ["CPU"]
    default = options()["train"]
    assert default.contents == ("cpu",) and not default.discrete
    assert [a.name for a in default.profile_kwargs(cuda=True)["activities"]] == ["CPU"]
    window = options(f"{ROLLOUT}.profile_token_start=2", f"{ROLLOUT}.profile_token_end=6")["rollout"]
    assert (window.token_start, window.token_end) == (2, 6)
    assert options(f"{ACTOR}.level=level0", f"{ACTOR}.analysis=true")["train"] == default


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((f"{ACTOR}.level=level1",), f"{ACTOR}.level=level1: torch_npu's level1 adds Ascend's CANN and AI Core data"),
        ((f"{ACTOR}.level=level2",), f"{ACTOR}.level=level2: torch_npu's level2 adds"),
        ((f"{ACTOR}.level=level_none",), f"{ACTOR}.level=level_none: torch_npu's level_none drops the operators"),
        ((f"{ACTOR}.level=level9",), f"{ACTOR}.level must be one of level_none, level0, level1, level2"),
        ((f"{ACTOR}.analysis=false",), f"{ACTOR}.analysis=False: torch.profiler"),
        ((f"{ACTOR}.contents=[gpu]",), f"{ACTOR}.contents must be a list of npu, cpu, memory, shapes, module, stack"),
        ((f"{ACTOR}.discrete=maybe",), f"{ACTOR}.discrete must be true or false"),
        ((f"{REF}.discrete=true",), f"{REF} differs from actor_rollout_ref.actor's"),
        (
            (f"{ROLLOUT}.profile_token_start=4", f"{ROLLOUT}.profile_token_end=2"),
            f"{ROLLOUT}.profile_token_end=2 must be greater than profile_token_start=4",
        ),
        (
            ("actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true",),
            "actor_rollout_ref.actor.profiler.tool_config.torch is set, but it applies to global_profiler.tool=torch "
            "and the tool is npu",
        ),
    ],
)
def test_values_with_no_torch_equal_and_bad_values_are_named(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(RLCoreError) as error:
        profile_plan(config(*NPU, *overrides))
    assert message in str(error.value)


def test_npu_settings_with_another_tool_are_named() -> None:
    with pytest.raises(RLCoreError, match=f"{ACTOR} is set, but it applies to global_profiler.tool=npu"):
        profile_plan(config("global_profiler.tool=torch", "global_profiler.steps=[1]", f"{ACTOR}.discrete=true"))


def test_the_plan_names_the_substitution() -> None:
    lines = profiler_lines(config(*NPU, "trainer.device=cpu", f"{ACTOR}.contents=[npu,cpu]", f"{ACTOR}.discrete=true"))
    assert len(lines) == 2
    assert lines[0].startswith("profiler: global_profiler.tool=npu is verl's Ascend profiler (torch_npu.profiler)")
    assert "contents npu -> the device's activity (nothing on the CPU)" in lines[0]
    assert "actor: one trace per stage, contents npu,cpu" in lines[1]
    assert "contents npu records nothing on the CPU" in lines[1]
    on_cuda = profiler_lines(config(*NPU, "trainer.device=cuda"))[0]
    assert "(CUDA's on a CUDA rank)" in on_cuda
    assert profiler_lines(config("global_profiler.tool=torch", "global_profiler.steps=[1]")) == [
        describe_profiler(config("global_profiler.tool=torch", "global_profiler.steps=[1]"))
    ]


def test_verl_npu_script_keys_pass_the_dry_run(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    """The keys of verl's examples/profile/run_qwen3_8b_npu_profile_discrete.sh, as the script sets them."""
    keys = [
        f"{role}.profiler.{key}"
        for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref")
        for key in (
            "enable=True",
            "ranks=[1,2]",
            "all_ranks=False",
            "tool_config.npu.discrete=True",
            "tool_config.npu.contents=['npu','cpu']",
            "tool_config.npu.level=level0",
            "tool_config.npu.analysis=True",
        )
    ]
    result = dry_run(*tiny_overrides(tmp_path, tiny_model_dir, task), *keys, "global_profiler.tool=npu")
    assert result.exit_code == 0, result.output
    assert "global_profiler.tool=npu is verl's Ascend profiler" in result.output
    assert "no step (global_profiler.steps is null" in result.output


def test_a_tiny_npu_profiled_run_writes_torch_traces(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """A real CPU run with ``tool=npu`` in discrete mode: one torch trace per stage of the actor, with the shapes
    that ``contents=shapes`` asks for."""
    save = tmp_path / "profile"
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "trainer.test_freq=-1",
        "trainer.total_training_steps=1",
        *NPU,
        f"global_profiler.save_path={save}",
        "actor_rollout_ref.actor.profiler.enable=true",
        f"{ACTOR}.contents=[npu,cpu,shapes,module]",
        f"{ACTOR}.discrete=true",
    )
    written = sorted(str(p.relative_to(save)) for p in save.rglob("*") if p.is_file())
    assert written == [
        "step1/actor_rollout_rank0.compute_log_prob.trace.json",
        "step1/actor_rollout_rank0.sync_weights.trace.json",
        "step1/actor_rollout_rank0.update_actor.trace.json",
    ]
    events = json.loads((save / "step1/actor_rollout_rank0.update_actor.trace.json").read_text())["traceEvents"]
    assert any(e.get("name") == "update_actor" for e in events)
    assert any("Input Dims" in e.get("args", {}) for e in events), "contents=shapes records shapes"
