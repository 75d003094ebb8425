"""The component registry: ``(kind, name) -> Component``.

Components are contributed by plugins through the ``register_<kind>s`` hooks. Targets given as
``"module:attr"`` strings are imported on first use and cached, so building the registry never imports
torch or any other heavy dependency.
"""

from __future__ import annotations

import difflib
import importlib
import re
from dataclasses import dataclass, field
from typing import Any

from rlcore import distributions
from rlcore.api.kinds import COMPONENT_KINDS, KINDS
from rlcore.errors import RLCoreError

#: component kind -> the hook that registers it (from :data:`rlcore.api.kinds.COMPONENT_KINDS`)
KIND_HOOKS: dict[str, str] = {spec.name: spec.hook for spec in COMPONENT_KINDS}

_LAZY_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-/+]*$")


class UnknownComponentError(RLCoreError, KeyError):
    """A config or call named a component that no loaded plugin registers."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class ComponentConflictError(RLCoreError):
    """Two plugins registered the same (kind, name) without ``replace=True``."""


class ComponentImportError(RLCoreError, ImportError):
    """A lazy ``module:attr`` target could not be imported."""


class RegistrationError(RLCoreError, ValueError):
    """A plugin called ``register`` with invalid arguments."""


@dataclass
class Component:
    """One registered component; ``load()`` returns the (imported) target."""

    kind: str
    name: str
    target: Any
    plugin: str
    dist: str | None = None
    version: str | None = None
    description: str = ""
    aliases: tuple[str, ...] = ()
    replaced: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    _loaded: Any = field(default=None, repr=False)

    @property
    def target_path(self) -> str:
        """The target as a ``module:attr`` string (for listings)."""
        if isinstance(self.target, str):
            return self.target
        module = getattr(self.target, "__module__", None) or type(self.target).__module__
        qualname = getattr(self.target, "__qualname__", None)
        return f"{module}:{qualname}" if qualname else f"<{type(self.target).__name__}>"

    def load(self) -> Any:
        """Import and cache the target; an ImportError names the distribution to install."""
        if self._loaded is not None:
            return self._loaded
        if not isinstance(self.target, str):
            self._loaded = self.target
            return self._loaded
        module_name, _, attr = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise ComponentImportError(self._import_failure(module_name, exc)) from exc
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError as exc:
                raise ComponentImportError(
                    f"{self.kind} {self.name!r} (provided by {self.dist or self.plugin}): "
                    f"module {module_name!r} has no attribute {attr!r}"
                ) from exc
        self._loaded = obj
        return obj

    def _import_failure(self, module_name: str, exc: ImportError) -> str:
        provider = self.dist or self.plugin
        head = f"{self.kind} {self.name!r} (provided by {provider}) cannot be imported from {module_name!r}"
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if missing and not module_name.startswith(missing + ".") and missing != module_name.split(".")[0]:
            extra = self.meta.get("extra")
            dist = distributions.by_name(provider)
            if extra:
                install = f"pip install '{provider}[{extra}]'"
            elif dist is not None and dist.extras:
                install = dist.install_line
            else:
                install = f"pip install {missing}"
            hint = self.meta.get("install_hint", install)
            return f"{head}: it needs the module {missing!r}, which is not installed ({hint})"
        if missing:
            return f"{head}: {exc}. Is {provider} installed in this environment?"
        return f"{head}: {type(exc).__name__}: {exc} — {provider} looks broken or incompatible with this rlcore"


class Registry:
    """All components of all loaded plugins, keyed by ``(kind, name)`` with aliases."""

    def __init__(self) -> None:
        self._components: dict[tuple[str, str], Component] = {}
        self._aliases: dict[tuple[str, str], str] = {}
        self.conflicts: dict[tuple[str, str], list[Component]] = {}

    def make_register(
        self,
        kind: str,
        plugin: str,
        dist: str | None,
        version: str | None,
        sink: list[tuple[Component, bool]] | None = None,
    ):
        """Return the ``register`` callback handed to one plugin's ``register_<kind>s`` hook.

        Components are validated at once; with ``sink`` they are collected there instead of added, so a
        hook that raises half-way contributes nothing.
        """

        def register(
            name: str,
            target: Any,
            *,
            description: str = "",
            aliases: tuple[str, ...] | list[str] = (),
            replace: bool = False,
            **meta: Any,
        ) -> None:
            comp = Component(
                kind=kind,
                name=name,
                target=target,
                plugin=plugin,
                dist=dist,
                version=version,
                description=description,
                aliases=tuple(aliases),
                meta=dict(meta),
            )
            self.validate(comp)
            if sink is None:
                self.add(comp, replace=replace)
            else:
                sink.append((comp, replace))

        return register

    @staticmethod
    def validate(comp: Component) -> None:
        """Check the kind, the names and the shape of a lazy target."""
        if comp.kind not in KIND_HOOKS:
            raise RegistrationError(f"unknown component kind {comp.kind!r}; kinds are {', '.join(KINDS)}")
        for label in (comp.name, *comp.aliases):
            if not isinstance(label, str) or not _NAME.match(label):
                raise RegistrationError(
                    f"{comp.plugin}: invalid {comp.kind} name {label!r} (letters, digits and . - _ / + only)"
                )
        if isinstance(comp.target, str) and not _LAZY_TARGET.match(comp.target):
            raise RegistrationError(
                f"{comp.plugin}: {comp.kind} {comp.name!r} target {comp.target!r} is not of the form 'module:attr'"
            )

    def add(self, comp: Component, *, replace: bool = False) -> None:
        """Add a component; a duplicate without ``replace`` is recorded as a conflict."""
        self.validate(comp)
        key = (comp.kind, comp.name)
        existing = self._components.get(key) or self._by_alias(comp.kind, comp.name)
        if existing is not None and existing.plugin != comp.plugin:
            if replace:
                comp.replaced = existing.plugin
                self._drop(existing)
            else:
                self.conflicts.setdefault((existing.kind, existing.name), [existing]).append(comp)
                return
        self._components[key] = comp
        for alias in comp.aliases:
            self._aliases[(comp.kind, alias)] = comp.name

    def _by_alias(self, kind: str, name: str) -> Component | None:
        canonical = self._aliases.get((kind, name))
        return self._components.get((kind, canonical)) if canonical else None

    def _drop(self, comp: Component) -> None:
        self._components.pop((comp.kind, comp.name), None)
        for alias in comp.aliases:
            self._aliases.pop((comp.kind, alias), None)

    def names(self, kind: str) -> list[str]:
        """Sorted canonical names of one kind."""
        return sorted(name for (k, name) in self._components if k == kind)

    def components(self, kind: str | None = None) -> list[Component]:
        """All components, optionally of one kind, sorted by (kind, name)."""
        return [c for key, c in sorted(self._components.items()) if kind is None or key[0] == kind]

    def has(self, kind: str, name: str) -> bool:
        """Whether ``name`` (or an alias) of ``kind`` is registered."""
        return (kind, name) in self._components or (kind, name) in self._aliases

    def get(self, kind: str, name: str) -> Component:
        """Return the component record; unknown names and conflicts raise with a helpful message."""
        if kind not in KIND_HOOKS:
            raise UnknownComponentError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")
        canonical = self._aliases.get((kind, name), name)
        if (kind, canonical) in self.conflicts:
            providers = " and ".join(c.dist or c.plugin for c in self.conflicts[(kind, canonical)])
            raise ComponentConflictError(
                f"{kind} {canonical!r} is registered by both {providers}; uninstall or disable one "
                f"(RLCORE_DISABLE_PLUGINS=<distribution>) or register it with replace=True"
            )
        comp = self._components.get((kind, canonical))
        if comp is None:
            raise UnknownComponentError(self._unknown(kind, name))
        return comp

    def _unknown(self, kind: str, name: str) -> str:
        """The message for an unregistered ``name``: which distribution provides it and its ``pip install``
        line (from :mod:`rlcore.distributions`), or a did-you-mean, and the known names of ``kind``."""
        known = sorted({*self.names(kind), *(a for (k, a) in self._aliases if k == kind)})
        advice = distributions.missing_component_advice(kind, name)
        if advice is not None:
            return f"unknown {kind} {name!r}: {advice}. Known {kind}s: {', '.join(known) or 'none'}"
        listing = ", ".join(known) if known else "(none: is the plugin that provides it installed?)"
        candidates = sorted({*known, *distributions.provided_names(kind)})
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.5)
        hint = ""
        if close:
            dist = None if close[0] in known else distributions.provider(kind, close[0])
            hint = f" Did you mean {close[0]!r}{f' ({dist.install_line})' if dist else ''}?"
        return f"unknown {kind} {name!r}.{hint} Known {kind}s: {listing}"

    def load(self, kind: str, name: str) -> Any:
        """Return the imported target of ``(kind, name)``."""
        return self.get(kind, name).load()
