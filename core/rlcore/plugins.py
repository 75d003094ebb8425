"""Plugin loading: built-in plugin modules plus every ``rlcore`` entry point, one at a time.

Unlike pluggy's ``load_setuptools_entrypoints``, a plugin that fails to import, registers an unknown hook
or raises inside a registration hook is recorded with status ``error`` and everything else keeps working;
two plugins registering the same component are recorded as ``conflict``.

A plugin declares the range of rlcore plugin APIs it supports in its hooks module, ``RLCORE_API = ">=3,<4"``
(a PEP 440 specifier, checked against :data:`rlcore.api.API_VERSION`). A plugin whose range excludes this
rlcore's API is not registered and is recorded as ``incompatible``; a range that is no PEP 440 specifier is
an ``error``. A plugin that declares nothing is loaded as before (third-party plugins written before the
API was versioned keep working) and ``rlcore plugins`` warns about it. Built-in plugins are part of the core
and declare nothing. Environment variables:

``RLCORE_LOAD_PLUGINS``
    comma-separated allow-list of distribution names; the empty string loads no external plugin. A name
    that is no installed plugin is recorded as an ``error`` (so ``--strict`` and ``RLCORE_STRICT_PLUGINS``
    fail on it).
``RLCORE_DISABLE_PLUGINS``
    comma-separated distribution names (or built-in plugin names) not to load. A component that is missing
    because its plugin is disabled (or not allowed) says so: see :meth:`PluginManager.disabled_provider`.
``RLCORE_STRICT_PLUGINS=1``
    any error, conflict or incompatible plugin raises :class:`PluginLoadError`.
``RLCORE_TRACE_PLUGINS=1``
    print every hook call with its arguments and results to stderr.
``RLCORE_SLOW_PLUGIN_SECONDS``
    a plugin whose import and registration hooks take longer than this (default 2) is named in a warning by
    every ``rlcore`` command (:meth:`PluginManager.slow_plugins`); ``rlcore plugins --verbose`` shows each
    plugin's load time.

:func:`load_plugins` is idempotent and cheap to call again; Ray actors and torchrun ranks call it with the
driver's environment so that every process sees the same components.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from rlcore import hookspecs
from rlcore.api.extensions import StepExtension, collect_step_extensions
from rlcore.api.profiling import NoProfiler, Profiler, set_current_profiler
from rlcore.api.version import API_RANGE_ATTRIBUTE, API_VERSION
from rlcore.errors import RLCoreError
from rlcore.registry import KIND_HOOKS, Component, ComponentLoader, Registry, UnknownComponentError

#: built-in plugin modules, registered through the same hooks as external plugins
BUILTIN_PLUGINS: tuple[str, ...] = (
    "rlcore.builtin.data",
    "rlcore.builtin.rewards",
    "rlcore.builtin.algorithms",
    "rlcore.builtin.trackers",
    "rlcore.builtin.transports",
)

ENV_LOAD = "RLCORE_LOAD_PLUGINS"
ENV_DISABLE = "RLCORE_DISABLE_PLUGINS"
ENV_STRICT = "RLCORE_STRICT_PLUGINS"
ENV_TRACE = "RLCORE_TRACE_PLUGINS"
ENV_SLOW = "RLCORE_SLOW_PLUGIN_SECONDS"
#: load time (import + registration hooks) past which a plugin is named in a warning
DEFAULT_SLOW_PLUGIN_SECONDS = 2.0
#: the variables a worker process must inherit from the driver
PLUGIN_ENV_VARS: tuple[str, ...] = (ENV_LOAD, ENV_DISABLE, ENV_STRICT, ENV_TRACE)


#: the statuses :meth:`PluginManager.problems` reports (fatal under ``--strict`` / ``RLCORE_STRICT_PLUGINS=1``)
PROBLEM_STATUSES: tuple[str, ...] = ("error", "conflict", "incompatible")


class PluginLoadError(RLCoreError):
    """Raised in strict mode when any plugin failed to load, conflicts with another or is incompatible."""


@dataclass
class PluginRecord:
    """What the loader knows about one plugin, shown by ``rlcore plugins``."""

    name: str
    version: str | None
    builtin: bool
    status: str = "ok"
    module: str | None = None
    entry_point: str | None = None
    error: str | None = None
    traceback: str | None = None
    hooks: list[str] = field(default_factory=list)
    #: seconds spent importing the plugin's module and running its registration hooks (None: not loaded)
    load_seconds: float | None = None
    #: the plugin API range its hooks module declares (``RLCORE_API``); None: not declared, or not loaded
    api_range: str | None = None

    def add_load_time(self, seconds: float) -> None:
        """Add ``seconds`` of import or registration-hook time to :attr:`load_seconds`."""
        self.load_seconds = (self.load_seconds or 0.0) + seconds

    def fail(self, status: str, message: str, tb: str | None = None) -> None:
        """Mark the plugin as failed, keeping the first error message."""
        if self.status == "ok":
            self.status = status
            self.error = message
            self.traceback = tb


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation, so ``RLCORE_LOAD_PLUGINS=My_Plugin`` matches ``my-plugin``."""
    return name.lower().replace("_", "-").replace(".", "-")


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {normalize_dist_name(p.strip()) for p in raw.split(",") if p.strip()}


def _rlcore_version() -> str | None:
    try:
        return metadata.version("rlcore")
    except metadata.PackageNotFoundError:
        return None


class PluginManager:
    """A pluggy manager plus the component registry and a status record per plugin."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.registry = Registry()
        if os.environ.get(ENV_TRACE) == "1":
            self.pm.trace.root.setwriter(sys.stderr.write)
            self.pm.enable_tracing()

    @property
    def hook(self) -> Any:
        """The pluggy hook relay: ``manager.hook.on_step_end(run=..., step=..., metrics=...)``."""
        return self.pm.hook

    # ---------------------------------------------------------------- loading
    def load_builtins(self, modules: Iterable[str] = BUILTIN_PLUGINS) -> None:
        """Register the built-in plugin modules unless ``RLCORE_DISABLE_PLUGINS`` names them."""
        disabled = _env_list(ENV_DISABLE) or set()
        version = _rlcore_version()
        for module_name in modules:
            record = PluginRecord(name=module_name, version=version, builtin=True, module=module_name)
            self.records[module_name] = record
            if normalize_dist_name(module_name) in disabled:
                record.status = "disabled"
                continue
            started = time.perf_counter()
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # a broken built-in must not hide the rest
                record.fail("error", f"{type(exc).__name__}: {exc}", traceback.format_exc())
                continue
            finally:
                record.add_load_time(time.perf_counter() - started)
            self._register(module, record)

    def load_entrypoints(self, group: str = hookspecs.PROJECT) -> None:
        """Load each entry point of ``group`` in its own try, honouring the allow/deny variables."""
        allow = _env_list(ENV_LOAD)
        disabled = _env_list(ENV_DISABLE) or set()
        seen: dict[str, str] = {}
        for ep in sorted(metadata.entry_points(group=group), key=lambda e: (e.dist.name if e.dist else "", e.name)):
            dist_name = ep.dist.name if ep.dist else ep.name
            version = ep.dist.version if ep.dist else None
            name = dist_name
            ep_text = f"{ep.name} = {ep.value}"
            if name in seen:
                if seen[name] == ep_text:  # the same distribution found twice on sys.path
                    continue
                name = f"{dist_name}:{ep.name}"
            seen[name] = ep_text
            record = PluginRecord(name=name, version=version, builtin=False, module=ep.value, entry_point=ep_text)
            self.records[name] = record
            key = normalize_dist_name(dist_name)
            if (allow is not None and key not in allow) or key in disabled:
                record.status = "disabled"
                continue
            started = time.perf_counter()
            try:
                module = ep.load()
            except BaseException as exc:  # noqa: BLE001 - SystemExit in a plugin must not kill the CLI
                if isinstance(exc, KeyboardInterrupt):
                    raise
                record.fail("error", f"{type(exc).__name__}: {exc}", traceback.format_exc())
                continue
            finally:
                record.add_load_time(time.perf_counter() - started)
            self._register(module, record)
        installed = {normalize_dist_name(n.split(":")[0]) for n, r in self.records.items() if not r.builtin}
        for wanted in sorted((allow or set()) - installed):
            close = difflib.get_close_matches(wanted, sorted(installed), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            record = PluginRecord(name=wanted, version=None, builtin=False)
            record.fail(
                "error",
                f"{ENV_LOAD} names {wanted!r}, which is not an installed rlcore plugin.{hint} "
                f"Installed: {', '.join(sorted(installed)) or 'none'}",
            )
            self.records[wanted] = record

    def disabled_provider(self, kind: str, name: str) -> str | None:
        """``plugin X provides it but is disabled by RLCORE_...`` when a disabled plugin (by
        ``RLCORE_DISABLE_PLUGINS``, or left out of ``RLCORE_LOAD_PLUGINS``) would register ``(kind, name)``. Its light ``hooks`` module is imported into a private
        pluggy manager to learn its components; nothing of it is registered here."""
        hook_name = KIND_HOOKS.get(kind)
        if hook_name is None:
            return None
        for record in self.records.values():
            if record.status != "disabled" or not record.module:
                continue
            try:
                target = record.module.split(":")[0]
                module = importlib.import_module(target)
                shadow = pluggy.PluginManager(hookspecs.PROJECT)
                shadow.add_hookspecs(hookspecs)
                shadow.register(module, name=record.name)
                registry = Registry()
                pending: list[tuple[Component, bool]] = []
                register = registry.make_register(kind, record.name, None, record.version, sink=pending)
                for impl in getattr(shadow.hook, hook_name).get_hookimpls():
                    impl.function(**{arg: register for arg in impl.argnames})
            except Exception:  # noqa: BLE001 - a disabled plugin that cannot even be inspected provides nothing
                continue
            if any(comp.name == name or name in comp.aliases for comp, _ in pending):
                denied = normalize_dist_name(record.name.split(":")[0]) in (_env_list(ENV_DISABLE) or set())
                return f"plugin {record.name} provides it but is disabled by {ENV_DISABLE if denied else ENV_LOAD}"
        return None

    def add_plugin(self, plugin: Any, name: str) -> PluginRecord:
        """Register ``plugin`` (a module, class or instance with hookimpls) under ``name``, as the loader registers
        an installed plugin (its ``RLCORE_API`` range and hook names checked), and rebuild the registry. For tests
        and tools that plug a plugin in without installing it; :meth:`remove_plugin` takes it out again. Returns
        its record (``status`` says whether it loaded)."""
        record = self.records[name] = PluginRecord(name=name, version=None, builtin=False, module=repr(plugin))
        self._register(plugin, record)
        self.build_registry()
        return record

    def remove_plugin(self, plugin: Any, name: str) -> None:
        """Take out a plugin added with :meth:`add_plugin` and rebuild the registry without it."""
        if self.pm.is_registered(plugin):
            self.pm.unregister(plugin)
        self.records.pop(name, None)
        self.build_registry()

    def _register(self, module: Any, record: PluginRecord) -> None:
        if not record.builtin and not self._api_compatible(module, record):
            return
        try:
            self.pm.register(module, name=record.name)
        except Exception as exc:  # PluginValidationError, duplicate names
            record.fail("error", f"{type(exc).__name__}: {exc}", traceback.format_exc())
            return
        unknown = [hc.name for hc in self.pm.get_hookcallers(module) or [] if not hc.has_spec()]
        if unknown:
            self.pm.unregister(module)
            record.fail(
                "error",
                f"unknown hook(s) {', '.join(sorted(unknown))}; known hooks: "
                + ", ".join(sorted(n for n in dir(hookspecs) if _is_spec(n))),
            )
            return
        record.hooks = sorted(hc.name for hc in self.pm.get_hookcallers(module) or [])

    def _api_compatible(self, module: Any, record: PluginRecord) -> bool:
        """Check the plugin's declared ``RLCORE_API`` range against :data:`rlcore.api.API_VERSION`; a range that
        excludes it marks the record ``incompatible``, a malformed one ``error``. No declaration passes."""
        declared = getattr(module, API_RANGE_ATTRIBUTE, None)
        if declared is None:
            return True
        record.api_range = declared if isinstance(declared, str) else repr(declared)
        problem = api_range_problem(declared)
        if problem is not None:
            record.fail("error", f"plugin {record.name} declares {API_RANGE_ATTRIBUTE} = {declared!r}, {problem}")
            return False
        if not SpecifierSet(declared).contains(API_VERSION, prereleases=True):
            record.fail(
                "incompatible",
                f"plugin {record.name} supports rlcore plugin API {declared}, but this rlcore "
                f"({_rlcore_version() or 'unknown version'}) has plugin API {API_VERSION}: it is not loaded (install a "
                f"release of {record.name} that supports {API_VERSION})",
            )
            return False
        return True

    # --------------------------------------------------------------- registry
    def build_registry(self) -> Registry:
        """Call every registration hook, one plugin at a time, into a fresh registry."""
        registry = Registry()
        for kind, hook_name in KIND_HOOKS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                record = self.records.get(impl.plugin_name)
                if record is None or record.status == "error":
                    continue
                pending: list[tuple[Component, bool]] = []
                dist = None if record.builtin else record.name.split(":")[0]
                register = registry.make_register(kind, record.name, dist, record.version, sink=pending)
                started = time.perf_counter()
                try:
                    impl.function(**{arg: register for arg in impl.argnames})
                except Exception as exc:  # a registration error is the plugin's, not the run's
                    record.fail("error", f"{hook_name} raised {type(exc).__name__}: {exc}", traceback.format_exc())
                    continue
                finally:
                    record.add_load_time(time.perf_counter() - started)
                for comp, replace in pending:
                    registry.add(comp, replace=replace)
        for (kind, name), clash in registry.conflicts.items():  # every party to a clash is in conflict
            for comp in clash:
                others = ", ".join(sorted({c.dist or c.plugin for c in clash if c.plugin != comp.plugin}))
                self.records[comp.plugin].fail("conflict", f"{kind} {name!r} is also registered by {others}")
        self.registry = registry
        return registry

    def add_commands(self, cli: Any) -> None:
        """Let each plugin add sub-commands; a plugin whose ``register_commands`` raises is marked ``error``."""
        for impl in self.pm.hook.register_commands.get_hookimpls():
            try:
                impl.function(**{arg: cli for arg in impl.argnames})
            except Exception as exc:
                self.records[impl.plugin_name].fail(
                    "error", f"register_commands raised {type(exc).__name__}: {exc}", traceback.format_exc()
                )

    # ---------------------------------------------------------------- queries
    def problems(self) -> list[PluginRecord]:
        """Records with status ``error``, ``conflict`` or ``incompatible``."""
        return [r for r in self.records.values() if r.status in PROBLEM_STATUSES]

    def undeclared_api(self) -> list[PluginRecord]:
        """Loaded external plugins whose hooks module declares no ``RLCORE_API`` range."""
        return [r for r in self.records.values() if not r.builtin and r.status == "ok" and r.api_range is None]

    def slow_plugins(self, threshold: float | None = None) -> list[PluginRecord]:
        """Records whose load time exceeds ``threshold`` seconds (default ``RLCORE_SLOW_PLUGIN_SECONDS``, else
        :data:`DEFAULT_SLOW_PLUGIN_SECONDS`), slowest first."""
        limit = slow_plugin_threshold() if threshold is None else threshold
        slow = [r for r in self.records.values() if r.load_seconds is not None and r.load_seconds > limit]
        return sorted(slow, key=lambda r: -(r.load_seconds or 0.0))

    def components_of(self, plugin: str) -> list[Component]:
        """Components registered by one plugin (including ones that lost a conflict)."""
        comps = [c for c in self.registry.components() if c.plugin == plugin]
        comps += [c for clash in self.registry.conflicts.values() for c in clash[1:] if c.plugin == plugin]
        return comps

    def versions(self) -> dict[str, str | None]:
        """``{plugin name: version}`` of every loaded external plugin (for run metadata)."""
        return {r.name: r.version for r in self.records.values() if not r.builtin and r.status == "ok"}

    def check_strict(self) -> None:
        """Raise :class:`PluginLoadError` listing every broken or conflicting plugin."""
        problems = self.problems()
        if problems:
            lines = "\n".join(f"  {r.name} [{r.status}]: {r.error}" for r in problems)
            raise PluginLoadError(f"{len(problems)} plugin(s) failed to load ({ENV_STRICT}=1):\n{lines}")


def api_range_problem(declared: object) -> str | None:
    """What is wrong with a declared ``RLCORE_API`` value (``None``: it is a usable PEP 440 specifier)."""
    example = "a PEP 440 version range such as '>=3,<4'"
    if not isinstance(declared, str):
        return f"which is a {type(declared).__name__}, not {example}"
    if not declared.strip():
        return f"which is empty: give {example}"
    try:
        SpecifierSet(declared)
    except InvalidSpecifier as exc:
        return f"which is not {example} ({exc})"
    return None


def undeclared_api_warning(record: PluginRecord) -> str:
    """The warning line for a plugin whose hooks module declares no ``RLCORE_API`` range."""
    major = API_VERSION.split(".")[0]
    return (
        f"warning: plugin {record.name} declares no {API_RANGE_ATTRIBUTE} range, so rlcore cannot tell whether it "
        f"fits plugin API {API_VERSION}; it is loaded anyway. Its author should add "
        f'{API_RANGE_ATTRIBUTE} = ">={major},<{int(major) + 1}" to {record.module or "its hooks module"}'
    )


def slow_plugin_threshold() -> float:
    """``RLCORE_SLOW_PLUGIN_SECONDS`` as a number of seconds (:data:`DEFAULT_SLOW_PLUGIN_SECONDS` when unset);
    a value that is no number >= 0 raises :class:`PluginLoadError` naming the variable."""
    raw = os.environ.get(ENV_SLOW, "").strip()
    if not raw:
        return DEFAULT_SLOW_PLUGIN_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise PluginLoadError(f"{ENV_SLOW}={raw!r} must be a number of seconds >= 0")
    return value


def slow_plugin_warning(record: PluginRecord) -> str:
    """The warning line for a plugin that is slow to load: its time, its module and what to do."""
    what = record.module or record.name
    disable = record.name.split(":")[0]
    return (
        f"warning: plugin {record.name} took {record.load_seconds or 0.0:.1f} s to load ({what}: import and "
        f"registration hooks), and every rlcore command waits for it; a plugin's hooks module should not import "
        f"heavy libraries (lazy 'module:attr' targets do). `rlcore plugins --verbose` shows every plugin's load "
        f"time; {ENV_DISABLE}={disable} skips it"
    )


def _is_spec(name: str) -> bool:
    return hasattr(getattr(hookspecs, name, None), "rlcore_spec")


def make_plugin_manager(
    *, builtins: bool = True, entrypoints: bool = True, strict: bool | None = None
) -> PluginManager:
    """Build a new, fully loaded manager (tests use this to avoid the process-wide one)."""
    manager = PluginManager()
    if builtins:
        manager.load_builtins()
    if entrypoints:
        manager.load_entrypoints()
    manager.pm.check_pending()
    manager.build_registry()
    if strict if strict is not None else os.environ.get(ENV_STRICT) == "1":
        manager.check_strict()
    return manager


_MANAGER: PluginManager | None = None


def load_plugins() -> PluginManager:
    """Return the process-wide plugin manager, loading plugins on the first call (idempotent)."""
    global _MANAGER
    if _MANAGER is None:
        _MANAGER = make_plugin_manager()
    return _MANAGER


def set_plugin_manager(manager: PluginManager | None) -> PluginManager | None:
    """Install ``manager`` as the process-wide one (``None`` forces a reload); returns the previous one."""
    global _MANAGER
    previous, _MANAGER = _MANAGER, manager
    return previous


def _get_component(kind: str, name: str) -> Any:
    """Resolve ``(kind, name)`` through the process-wide registry and return the imported target; an unknown
    name that a disabled plugin provides names that plugin."""
    manager = load_plugins()
    try:
        return manager.registry.load(kind, name)
    except UnknownComponentError as exc:
        provider = manager.disabled_provider(kind, name)
        if provider is None:
            raise
        raise UnknownComponentError(f"{exc}; {provider}") from exc


def step_extensions(config: Any, manager: PluginManager | None = None) -> list[StepExtension]:
    """The :class:`rlcore.api.extensions.StepExtension` objects the plugins add to a run of ``config`` (the
    ``step_extensions`` hook of ``manager``, by default the process-wide one), in plugin order."""
    return collect_step_extensions((manager or load_plugins()).hook.step_extensions(config=config))


def run_profiler(config: Any, manager: PluginManager | None = None) -> Profiler:
    """The run's :class:`rlcore.api.profiling.Profiler`, made this process's current one: the first answer of
    the plugins' ``profiler`` hook, or :class:`~rlcore.api.profiling.NoProfiler` when ``global_profiler.tool``
    is null. A tool with no plugin to answer is an error naming ``rlcore-plugin-profiler``, and so are two
    answers (naming the plugins that implement the hook)."""
    from omegaconf import OmegaConf

    hook = (manager or load_plugins()).hook.profiler
    answers = [p for p in hook(config=config) if p is not None]
    tool = OmegaConf.select(config, "global_profiler.tool", default=None)
    if len(answers) > 1:
        offering = ", ".join(sorted({impl.plugin_name for impl in hook.get_hookimpls()}))
        raise RLCoreError(
            f"global_profiler.tool={tool}: {len(answers)} plugins answered the profiler hook (of {offering}); "
            "a run has one profiler: disable the others (RLCORE_DISABLE_PLUGINS)"
        )
    if not answers and tool is not None:
        from rlcore.distributions import by_name

        dist = by_name("rlcore-plugin-profiler")
        assert dist is not None, "distributions.DISTRIBUTIONS lists rlcore-plugin-profiler"
        raise RLCoreError(f"global_profiler.tool={tool}: profiling is provided by {dist.name}, which {dist.absence}")
    return set_current_profiler(answers[0] if answers else NoProfiler())


#: ``get_component(kind, name)``: resolve ``(kind, name)`` through the process-wide registry and return the
#: imported target, typed with the kind's protocol (:class:`rlcore.registry.ComponentLoader`); an unknown name
#: that a disabled plugin provides names that plugin
get_component: ComponentLoader = _get_component
