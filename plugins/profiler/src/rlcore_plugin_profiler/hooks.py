"""The plugin's hooks: its config keys, the run's profiler (``global_profiler.tool``) and its line in the run
plan.

This module must stay free of torch imports: ``rlcore plugins`` and the command line import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlcore import hookimpl

if TYPE_CHECKING:
    from rlcore.api import Profiler

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


def _tool(config: Any) -> str | None:
    """``global_profiler.tool`` of the typed section (:class:`~rlcore_plugin_profiler.config.GlobalProfilerConfig`;
    a hand-made config without the section has its defaults: no tool)."""
    from rlcore.api import select
    from rlcore_plugin_profiler.config import GlobalProfilerConfig

    return GlobalProfilerConfig.from_mapping(select(config, GlobalProfilerConfig.PATH, {})).tool


@hookimpl
def config_defaults() -> list[Any]:
    """Declare ``global_profiler`` (:class:`~rlcore_plugin_profiler.config.GlobalProfilerConfig`) and the
    ``profiler`` subsection of each role (:func:`~rlcore_plugin_profiler.config.role_sections`), typed."""
    from rlcore_plugin_profiler.config import GlobalProfilerConfig, role_sections

    return [role_sections(), GlobalProfilerConfig()]


@hookimpl
def profiler(config: Any) -> Profiler | None:
    """The run's :class:`~rlcore_plugin_profiler.profiler.GlobalProfiler` when ``global_profiler.tool`` is set."""
    if _tool(config) is None:
        return None
    from rlcore_plugin_profiler.profiler import GlobalProfiler

    return GlobalProfiler(config)


@hookimpl
def plan_lines(config: Any) -> list[str] | None:
    """The profiler's lines (what it records, which steps and ranks, where; with ``tool=npu`` first the line
    naming its substitution by torch.profiler); bad settings raise an error naming the key."""
    if _tool(config) is None:
        return None
    from rlcore_plugin_profiler.plan import profiler_lines

    return profiler_lines(config) or None
