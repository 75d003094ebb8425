"""Tools (kind ``tool``): the base class and verl's tool YAML (``tools: [{class_name, config, tool_schema}]``).

A tool is an async component the policy calls by name. Its life per trajectory is ``create`` → any number
of ``execute`` calls → ``release``. The executor that runs the calls (bounded, timed, contained) and the
loader of the tool YAML are rlcore-plugin-agents' (``rlcore_plugin_agents.tools``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcore.api.components import ToolResult
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.registry import Registry

__all__ = ["Tool", "ToolResult", "class_entries", "resolve_class"]


class Tool:
    """Base class of tools; subclass it and override :meth:`execute` (and :meth:`create`/:meth:`release` when
    the tool keeps per-trajectory state).

    Args:
        config: the tool's ``config`` mapping from the tool YAML (``timeout`` is read by the executor).
        tool_schema: its OpenAI function schema (``{"type": "function", "function": {"name", ...}}``); None
            uses the class attribute :attr:`default_schema`.
    """

    #: the schema used when the tool YAML gives none
    default_schema: dict[str, Any] | None = None

    def __init__(self, config: Mapping[str, Any] | None = None, tool_schema: Mapping[str, Any] | None = None):
        self.config = dict(config or {})
        schema = tool_schema or self.default_schema
        if not schema or not isinstance(schema.get("function"), Mapping) or not schema["function"].get("name"):
            raise RLCoreError(f"{type(self).__name__}: a tool needs a schema with function.name")
        self.tool_schema: dict[str, Any] = _plain(schema)

    @property
    def name(self) -> str:
        """The name the model calls the tool by (``function.name`` of its schema)."""
        return str(self.tool_schema["function"]["name"])

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI function schema passed to the chat template as ``tools``."""
        return self.tool_schema

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        """Start a per-trajectory instance; ``kwargs`` are the sample's ``extra_info.tools_kwargs[name].create_kwargs``."""
        return None

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult | str:
        """Run one call with the parsed ``arguments``; return the response text or a :class:`ToolResult`."""
        raise NotImplementedError(f"{type(self).__name__}.execute")

    async def release(self, instance_id: str) -> None:
        """Free what :meth:`create` set up (called once per trajectory, also after failures)."""
        return None


def _plain(value: Any) -> Any:
    """A plain dict/list copy of an OmegaConf or mapping value."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def resolve_class(kind: str, class_name: str, where: str, registry: Registry) -> Any:
    """A component of ``kind`` named ``class_name`` in ``registry`` (verl's dotted names are registered as
    aliases), else the class at the dotted path ``package.module.Class`` (or ``package.module:Class``)."""
    if registry.has(kind, class_name):
        return registry.load(kind, class_name)
    module_name, sep, attr = class_name.replace(":", ".").rpartition(".")
    if not sep:
        from rlcore.distributions import missing_component_advice

        known = ", ".join(sorted(registry.names(kind))) or "none"
        advice = missing_component_advice(kind, class_name)
        if advice:
            raise RLCoreError(f"{where}: unknown {kind} {class_name!r}: {advice}")
        raise RLCoreError(f"{where}: unknown {kind} {class_name!r} (registered: {known}; or give a dotted class path)")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        known = ", ".join(sorted(registry.names(kind))) or "none"
        raise RLCoreError(
            f"{where}: class_name {class_name!r} is neither a registered {kind} ({known}) nor importable ({exc})"
        ) from exc


def _read_yaml(path: str, key: str) -> Any:
    import yaml

    file = Path(path)
    if not file.is_file():
        raise RLCoreError(f"{key}={path}: no such file")
    try:
        return yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RLCoreError(f"{key}={path}: not valid YAML ({exc})") from exc


def class_entries(
    path: str, key: str, list_key: str, kind: str, registry: Registry
) -> Iterator[tuple[str, Mapping[str, Any], type]]:
    """The entries of the top-level ``list_key`` list of verl's YAML file at ``path`` (config key ``key``),
    each as (its location for errors, the entry, its ``class_name`` resolved as a ``kind`` in ``registry``)."""
    data = _read_yaml(path, key)
    entries = data.get(list_key) if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise RLCoreError(f"{key}={path}: expected a top-level '{list_key}:' list")
    for i, entry in enumerate(entries):
        where = f"{path}: {list_key}[{i}]"
        if not isinstance(entry, Mapping) or not entry.get("class_name"):
            raise RLCoreError(f"{where}: each {kind} needs a class_name")
        yield where, entry, resolve_class(kind, str(entry["class_name"]), where, registry)
