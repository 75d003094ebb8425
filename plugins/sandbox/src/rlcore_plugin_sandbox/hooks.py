"""The plugin's hooks: the ``code_interpreter`` tool, the code scorer (data sources ``codecontests``, ``apps``,
``codeforces``, ``taco``; locally or on a Sandbox Fusion service), ``rlcore sandbox check``, the plan's sandbox
lines and the hand-over of ``reward_model.sandbox.allow_unconfined`` and ``reward_model.sandbox_fusion`` to the
run's processes.

This module must stay free of torch imports: ``rlcore plugins``, the CLI and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from rlcore import hookimpl
from rlcore.api import RewardScorerSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def config_defaults() -> Any:
    """Declare ``reward_model.sandbox`` (:class:`~rlcore_plugin_sandbox.config.SandboxConfig`) and
    ``reward_model.sandbox_fusion`` (:class:`~rlcore_plugin_sandbox.config.SandboxFusionConfig`), typed."""
    from rlcore_plugin_sandbox.config import SandboxConfig, SandboxFusionConfig

    return [SandboxConfig(), SandboxFusionConfig()]


@hookimpl
def register_reward_scorers(register: Callable[..., None]) -> None:
    """Register the code scorer: the fraction of a problem's tests the response's program passes."""
    register(
        "codecontests",
        "rlcore_plugin_sandbox.scorer:score",
        description="fraction of test cases the program passes in the sandbox",
        aliases=("apps", "codeforces", "taco"),
        spec=RewardScorerSpec(sandbox=True),
    )


@hookimpl
def register_tools(register: Callable[..., None]) -> None:
    """Register the ``code_interpreter`` tool."""
    register(
        "code_interpreter",
        "rlcore_plugin_sandbox.tool:CodeInterpreterTool",
        description="Python in the rlcore sandbox (CPU, wall-time and memory limits, no network)",
    )


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``rlcore sandbox check``."""

    @cli.group()
    def sandbox() -> None:
        """The sandbox that runs model-written code (code rewards, the code tool)."""

    @sandbox.command("check")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @click.option("--strict", is_flag=True, help="Exit with status 1 unless every confinement is enforced.")
    def sandbox_check(as_json: bool, strict: bool) -> None:
        """Show what the kernel enforces for sandboxed programs on this host, each claim tried by a hostile probe."""
        from rlcore_plugin_sandbox.check import check_command

        check_command(as_json, strict)


@hookimpl
def plan_lines(config: Any, dry_run: bool) -> list[str] | None:
    """The plan's sandbox lines when the run executes model-written code (locally or on Sandbox Fusion); a
    host that cannot confine code rewards refuses the run unless ``reward_model.sandbox.allow_unconfined`` is
    true, a Sandbox Fusion service that does not answer refuses a run (not a dry run) that uses it."""
    from rlcore_plugin_sandbox.plan import sandbox_plan

    return sandbox_plan(config, dry_run) or None


@hookimpl
def on_config_resolved(config: Any) -> None:
    """Pass ``reward_model.sandbox.allow_unconfined=true`` and ``reward_model.sandbox_fusion`` on to every
    process the run starts. This hook runs in
    the controller before any worker or scorer process starts (``on_run_start`` comes after the workers are
    built, too late for them to inherit it)."""
    from rlcore_plugin_sandbox.plan import export_fusion_settings, export_unconfined_choice

    export_unconfined_choice(config)
    export_fusion_settings(config)
