"""The run's view of the sandbox: what in the run executes model-written code, the plan's sandbox line, the
dry run's refusal, and passing ``reward_model.sandbox.allow_unconfined`` and ``reward_model.sandbox_fusion`` on to
the scorer processes.

A run uses the sandbox when its data has a ``data_source`` whose reward scorer was registered with
``sandbox=True`` (the built-in code scorer: ``codecontests``, ``apps``, ``codeforces``, ``taco``), or when its
tool YAML has a tool class with ``runs_code = True`` (``code_interpreter``). A custom reward function that
calls :func:`rlcore_plugin_sandbox.run_python` itself is not seen here; it meets the same refusal at its first call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcore.api import RLCoreError
from rlcore_plugin_sandbox.host import host_isolation
from rlcore_plugin_sandbox.policy import ALLOW_ENV, refusal

ALLOW_KEY = "reward_model.sandbox.allow_unconfined"


def data_sources(files: Any, key: str) -> set[str]:
    """The values of column ``key`` in the data files ``files`` (a path or a list); missing files are skipped
    (the dataset names them later), and parquet files too when pyarrow is not installed."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(files):
        files = OmegaConf.to_container(files, resolve=True)
    found: set[str] = set()
    for path in [files] if isinstance(files, (str, os.PathLike)) else list(files or []):
        path = os.fspath(path)
        if not Path(path).is_file():
            continue
        if Path(path).suffix.lower() == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:  # the lean core (no rlcore[train]): the run's missing parts are named already
                continue
            if key in pq.read_schema(path).names:
                found.update(str(v) for v in pq.read_table(path, columns=[key]).column(0).unique().to_pylist())
        else:
            from rlcore.api import read_rows

            found.update(str(r.get(key)) for r in read_rows(path)[0] if isinstance(r, Mapping))
    return found


def sandbox_users(config: Any) -> tuple[list[str], list[tuple[str, bool]]]:
    """What in the run executes model-written code: the data sources scored in the sandbox, and the
    sandboxed tools as (name, whether its config sets ``allow_unconfined: true``)."""
    from rlcore import load_plugins

    registry = load_plugins().registry
    sources: list[str] = []
    if not (config.get("custom_reward_function") or {}).get("path"):
        data = config.data
        key = data.get("reward_fn_key") or "data_source"
        for source in sorted(data_sources(data.get("train_files"), key) | data_sources(data.get("val_files"), key)):
            if registry.has("reward_scorer", source) and registry.spec("reward_scorer", source).sandbox:
                sources.append(source)
    tools: list[tuple[str, bool]] = []
    multi_turn = config.actor_rollout_ref.rollout.get("multi_turn") or {}
    path = multi_turn.get("tool_config_path")
    if multi_turn.get("enable") and path:
        from rlcore.api import MULTI_TURN_KEY
        from rlcore.api import tool_classes as class_entries

        for _, entry, cls in class_entries(path, f"{MULTI_TURN_KEY}.tool_config_path", "tools", "tool", registry):
            if getattr(cls, "runs_code", False):
                tools.append((str(entry["class_name"]), (entry.get("config") or {}).get("allow_unconfined") is True))
    return sources, tools


def unconfined_accepted(config: Any) -> bool:
    """``reward_model.sandbox.allow_unconfined`` (the config loader has checked that it is a boolean)."""
    from rlcore_plugin_sandbox.config import SandboxConfig

    return SandboxConfig.from_tree(config).allow_unconfined


def fusion_plan(config: Any, sources: list[str], dry_run: bool) -> str | None:
    """The plan's Sandbox Fusion line when ``reward_model.sandbox_fusion.url`` is set, else ``None``. A run
    (not a dry run) with code rewards first sends the service a one-line program: no usable answer is an
    :class:`RLCoreError` naming the key, before anything starts."""
    from rlcore_plugin_sandbox.config import SandboxFusionConfig

    section = SandboxFusionConfig.from_tree(config)
    if not section.url:
        return None
    if sources and not dry_run:
        from rlcore_plugin_sandbox.fusion import probe

        problem = probe(section)
        if problem:
            raise RLCoreError(f"{section.key('url')}={section.url!r}: {problem}")
    users = f"code rewards ({', '.join(sources)})" if sources else "code rewards"
    return (
        f"sandbox fusion: {users} run at {section.url} ({section.max_concurrent} requests at once, "
        f"{section.memory_limit_mb} MB per program unless the problem sets memory_limit)"
    )


def sandbox_plan(config: Any, dry_run: bool = False) -> list[str]:
    """The plan's sandbox lines: Sandbox Fusion's (:func:`fusion_plan`) and the local sandbox's when the run
    executes model-written code in it. Code rewards on a host whose level is not ``full`` are an error unless
    ``reward_model.sandbox.allow_unconfined`` is true or they run on Sandbox Fusion (the code tool refuses such
    a host itself, when its YAML loads)."""
    allowed = unconfined_accepted(config)
    sources, tools = sandbox_users(config)
    fusion = fusion_plan(config, sources, dry_run)
    lines = [fusion] if fusion else []
    if fusion:
        sources = []
    if not sources and not tools:
        return lines
    host = host_isolation()
    users = [f"code rewards ({', '.join(sources)})"] if sources else []
    users += [f"tool {name}" for name, _ in tools]
    line = f"sandbox: {host.summary()} for {' and '.join(users)}; `rlcore sandbox check` shows each confinement"
    if host.level == "full":
        return [*lines, line]
    if sources and not allowed:
        raise RLCoreError(f"code rewards ({', '.join(sources)}): {refusal(host)}")
    accepted = ([f"{ALLOW_KEY}=true"] if sources else []) + [f"{name}: allow_unconfined" for name, _ in tools]
    return [*lines, f"{line} (the weaker confinement is accepted by {', '.join(accepted)})"]


def export_fusion_settings(config: Any) -> None:
    """Pass ``reward_model.sandbox_fusion`` on to the processes the run starts (:func:`rlcore_plugin_sandbox.fusion.export_settings`)."""
    from rlcore_plugin_sandbox.config import SandboxFusionConfig
    from rlcore_plugin_sandbox.fusion import export_settings

    export_settings(SandboxFusionConfig.from_tree(config))


def export_unconfined_choice(config: Any) -> None:
    """Pass ``reward_model.sandbox.allow_unconfined=true`` on to the processes the run starts (scorer
    processes, Ray workers) as ``RLCORE_SANDBOX_ALLOW_UNCONFINED=1``."""
    if unconfined_accepted(config):
        os.environ[ALLOW_ENV] = "1"
