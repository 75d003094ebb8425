"""verl's Ascend profiler (``global_profiler.tool=npu``, the roles' ``profiler.tool_config.npu``) where there is no
Ascend device: recorded by ``torch.profiler``, whose API ``torch_npu.profiler`` mirrors.

verl builds ``torch_npu.profiler.profile`` from a role's ``tool_config.npu`` (``verl/utils/profiler/mstx_profile.py``,
0.9 and 0.10 alike), and rlcore builds the torch tool's trace of the same stages from it
(:class:`~rlcore_plugin_profiler.torch_options.TorchOptions`):

- ``contents``: ``npu`` is the device's activity (``ProfilerActivity.NPU``; here CUDA's on a CUDA rank, nothing on
  the CPU), ``memory``/``shapes``/``module``/``stack`` are ``profile_memory``/``record_shapes``/``with_modules``/
  ``with_stack``, and CPU activity is always on (``cpu`` changes nothing). Empty is CPU activity only, as in verl
  0.10 (verl 0.9 passed no activity and torch_npu then recorded every one).
- ``discrete``: the torch tool's ``discrete`` (one trace per step, or one per stage).
- ``level``: torch_npu's collection level. ``level0`` (verl's default: operators and kernels) is what
  ``torch.profiler`` records; ``level1``/``level2`` add CANN and AI Core data and ``level_none`` drops the
  operators, which torch has no equal for: they are refused naming the key and value.
- ``analysis``: ``true`` (verl's default) parses the data as the trace is written, which is what
  ``torch.profiler``'s Chrome trace is; ``false`` (torch_npu's raw data, parsed offline) is refused.
- ``profile_token_start``/``profile_token_end`` (rollout): the torch tool's response-token window.

The traces are the torch tool's files (``docs/profiling.md``); verl's ``global_tool_config.npu`` stays refused.
"""

from __future__ import annotations

from typing import Any

from rlcore.api import RLCoreError
from rlcore_plugin_profiler.torch_options import CONTENTS, TorchOptions, read_torch_options

__all__ = ["NPU_CONTENTS", "npu_note", "read_npu_options"]

NPU_CONTENTS = ("npu", "cpu", "memory", "shapes", "module", "stack")
#: verl's collection levels, and the one torch.profiler records
LEVELS = ("level_none", "level0", "level1", "level2")
TORCH_LEVEL = "level0"


def read_npu_options(section: str, npu: dict[str, Any], rollout: bool) -> TorchOptions:
    """The torch tool's :class:`TorchOptions` for ``{section}.profiler.tool_config.npu`` (the resolved dict
    ``npu``; ``rollout``: the rollout's, with a token window). A value with no torch equal, or a bad one, raises
    an error naming the key and value."""
    key = f"{section}.profiler.tool_config.npu"
    contents = npu.get("contents") or []
    if not isinstance(contents, list) or not all(isinstance(c, str) and c in NPU_CONTENTS for c in contents):
        raise RLCoreError(f"{key}.contents must be a list of {', '.join(NPU_CONTENTS)}, got {contents!r}")
    level = npu.get("level", TORCH_LEVEL)
    if level not in LEVELS:
        raise RLCoreError(f"{key}.level must be one of {', '.join(LEVELS)}, got {level!r}")
    if level != TORCH_LEVEL:
        raise RLCoreError(
            f"{key}.level={level}: torch_npu's {level} "
            + ("drops the operators" if level == "level_none" else "adds Ascend's CANN and AI Core data")
            + ", which torch.profiler (what records tool=npu without an Ascend device) has no equal for; "
            f"set it to {TORCH_LEVEL} (operators and kernels)"
        )
    analysis = npu.get("analysis", True)
    if analysis is not True:
        raise RLCoreError(
            f"{key}.analysis={analysis!r}: torch.profiler (what records tool=npu without an Ascend device) writes the "
            "parsed trace at once, it keeps no raw data to parse offline; set it to true"
        )
    torch = {
        "contents": ["cuda" if c == "npu" else c for c in contents] or ["cpu"],
        "discrete": npu.get("discrete", False),
        "profile_token_start": npu.get("profile_token_start"),
        "profile_token_end": npu.get("profile_token_end"),
    }
    return read_torch_options(section, torch, rollout, key=key, contents=(*CONTENTS, "module"))


def npu_note(cpu: bool) -> str:
    """The run plan's line naming the substitution (``cpu``: the run's device is the CPU)."""
    device = "nothing on the CPU" if cpu else "CUDA's on a CUDA rank"
    return (
        "profiler: global_profiler.tool=npu is verl's Ascend profiler (torch_npu.profiler); without an Ascend device "
        f"rlcore's torch profiler records it: contents npu -> the device's activity ({device}), memory, shapes, "
        "module, stack as written, CPU activity always; level0 and analysis=true are what torch.profiler records"
    )
