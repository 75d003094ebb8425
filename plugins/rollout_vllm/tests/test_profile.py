"""A discrete rollout trace on vLLM: the engine runs vLLM's own torch profiler over a profiled step's generation
(``rlcore.api.claim_rollout_trace``, answered by rlcore-plugin-profiler) and hands the trace to the step's replica folder."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcore_plugin_profiler.profiler import GlobalProfiler
from rlcore_plugin_profiler.rollout import RolloutTraceRequest, requesting
from rlcore_plugin_profiler.torch_options import TorchOptions
from rlcore_testkit.contracts.rollout import PROMPTS, make_prompt_batch

from rlcore.api.profiling import current_profiler, set_current_profiler


def trace_events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle)["traceEvents"]


def test_vllm_traces_a_profiled_generation_with_its_own_profiler(
    make_engine: Callable[..., Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    engine = make_engine(
        **{"profiler.tool_config.torch.discrete": True, "profiler.tool_config.torch.contents": "[shapes]"}
    )
    batch = make_prompt_batch(tiny_tokenizer)
    assert len(engine.generate(batch)) == len(PROMPTS), "no request posted: nothing is traced"
    folder = tmp_path / "agent_loop_rollout_replica_0"
    request = RolloutTraceRequest(folder, step=3, rank=0, options=TorchOptions(("shapes",), True), cuda=False)
    previous = current_profiler()
    try:
        set_current_profiler(GlobalProfiler(None))  # what a profiled worker's process holds
        with requesting(request):
            engine.generate(batch)
    finally:
        set_current_profiler(previous)
    assert request.claimed and request.written
    assert sorted(str(Path(p).parent) for p in request.written) == [str(folder)] * len(request.written)
    assert all(Path(p).name.startswith("step3_rank0") for p in request.written)
    events = [e for path in request.written if ".json" in path for e in trace_events(Path(path))]
    assert any("Input Dims" in e.get("args", {}) for e in events), "contents=shapes records shapes"


def test_an_npu_discrete_rollout_asks_vllm_for_its_torch_profiler(plugin_manager: Any) -> None:
    """verl's Ascend settings (``profiler.tool_config.npu``, recorded by torch's profiler without Ascend) ask for
    vLLM's engine-side trace as the torch ones do: ``npu`` is the device's activity, ``module`` a call stack (as
    verl's vLLM profiler arguments take it), empty contents CPU activity only."""
    from rlcore_plugin_vllm.config import VLLMRolloutConfig

    from rlcore.config import load_config

    def trace(*overrides: str) -> dict[str, Any] | None:
        config = load_config(overrides=[f"actor_rollout_ref.rollout.{o}" for o in overrides], manager=plugin_manager)
        return VLLMRolloutConfig.from_tree(config).torch_trace()

    assert trace() is None
    npu = trace("profiler.tool_config.npu.discrete=true", "profiler.tool_config.npu.contents=[npu,module,shapes]")
    assert npu is not None and npu["contents"] == ["cuda", "stack", "shapes"]
    empty = trace("profiler.tool_config.npu.discrete=true")
    assert empty is not None and empty["contents"] == ["cpu"]
    torch = trace("profiler.tool_config.torch.discrete=true", "profiler.tool_config.torch.contents=[shapes]")
    assert torch is not None and torch["contents"] == ["shapes"]
