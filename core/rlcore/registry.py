"""The component registry: ``(kind, name) -> Component``.

Components are contributed by plugins through the ``register_<kind>s`` hooks. Targets given as
``"module:attr"`` strings are imported on first use and cached, so building the registry never imports
torch or any other heavy dependency. A component's capabilities are its kind's spec
(:mod:`rlcore.api.specs`), and :attr:`Registry.load` / :meth:`Registry.get` are typed per kind with the
protocols of :mod:`rlcore.api.components`, so the type checker follows a component from the config to its call.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, overload

from rlcore import distributions
from rlcore.api.kinds import COMPONENT_KINDS, KINDS, KindSpec
from rlcore.api.specs import (
    AdvantageEstimatorSpec,
    CapabilitySpec,
    PresetSpec,
    RewardScorerSpec,
    TrainingBackendSpec,
    spec_fields,
)
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.api.components import (
        AdvantageEstimator,
        AgentLoop,
        BatchFilter,
        Dataset,
        Interaction,
        PolicyLoss,
        Preset,
        RewardManager,
        RewardScorer,
        Tool,
        ToolParser,
        Tracker,
    )
    from rlcore.api.rollout import RolloutEngine
    from rlcore.api.training import TrainingBackend
    from rlcore.api.transport import WeightTransport

#: component kind -> the hook that registers it (from :data:`rlcore.api.kinds.COMPONENT_KINDS`)
KIND_HOOKS: dict[str, str] = {spec.name: spec.hook for spec in COMPONENT_KINDS}
#: component kind -> its row of :data:`rlcore.api.kinds.COMPONENT_KINDS` (protocol and spec class)
KIND_SPECS: dict[str, KindSpec] = {spec.name: spec for spec in COMPONENT_KINDS}

_LAZY_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-/+]*$")

#: the type of a component's capability spec (None for a kind without capabilities)
SpecT = TypeVar("SpecT")
#: the kinds that name an algorithm, whose names users mix up (``--preset grpo``, ``adv_estimator=dapo``)
ALGORITHM_KINDS: tuple[str, ...] = ("preset", "advantage_estimator", "policy_loss")


def spelling(name: str) -> str:
    """``name`` with case and ``-``/``_`` ignored: what two names that differ only in spelling share."""
    return name.lower().replace("-", "_")


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


def _plural(kind: str) -> str:
    return f"{kind}es" if kind.endswith("s") else f"{kind}s"


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
class Component(Generic[SpecT]):
    """One registered component; ``load()`` returns the (imported) target and ``spec`` holds its capabilities
    (its kind's spec class from :mod:`rlcore.api.specs`, the default one when the plugin gave none; None for
    a kind without capabilities)."""

    kind: str
    name: str
    target: Any
    plugin: str
    dist: str | None = None
    version: str | None = None
    description: str = ""
    aliases: tuple[str, ...] = ()
    replaced: str | None = None
    spec: SpecT = None  # type: ignore[assignment]  # None: filled with the kind's default spec below
    _loaded: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Give a component of a kind with capabilities its kind's default spec when none was given."""
        kind = KIND_SPECS.get(self.kind)
        if self.spec is None and kind is not None and kind.spec is not None:
            self.spec = kind.spec()

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
            dist = distributions.by_name(provider)
            install = dist.install_line if dist is not None and dist.extras else f"pip install {missing}"
            return f"{head}: it needs the module {missing!r}, which is not installed ({install})"
        if missing:
            return f"{head}: {exc}. Is {provider} installed in this environment?"
        return f"{head}: {type(exc).__name__}: {exc} — {provider} looks broken or incompatible with this rlcore"


class ComponentLoader(Protocol):
    """``load(kind, name)``: the imported target of ``(kind, name)``, typed with its kind's protocol
    (:attr:`rlcore.api.kinds.KindSpec.protocol`; a class kind's target is the class). The type of
    :attr:`Registry.load` and :func:`rlcore.get_component`, so that both are typed per kind."""

    @overload
    def __call__(self, kind: Literal["training_backend"], name: str) -> TrainingBackend: ...
    @overload
    def __call__(self, kind: Literal["rollout_engine"], name: str) -> type[RolloutEngine]: ...
    @overload
    def __call__(self, kind: Literal["reward_manager"], name: str) -> type[RewardManager]: ...
    @overload
    def __call__(self, kind: Literal["reward_scorer"], name: str) -> RewardScorer: ...
    @overload
    def __call__(self, kind: Literal["dataset"], name: str) -> type[Dataset]: ...
    @overload
    def __call__(self, kind: Literal["advantage_estimator"], name: str) -> AdvantageEstimator: ...
    @overload
    def __call__(self, kind: Literal["policy_loss"], name: str) -> PolicyLoss: ...
    @overload
    def __call__(self, kind: Literal["batch_filter"], name: str) -> BatchFilter: ...
    @overload
    def __call__(self, kind: Literal["tracker"], name: str) -> type[Tracker]: ...
    @overload
    def __call__(self, kind: Literal["preset"], name: str) -> Mapping[str, Any] | Preset: ...
    @overload
    def __call__(self, kind: Literal["tool"], name: str) -> type[Tool]: ...
    @overload
    def __call__(self, kind: Literal["agent_loop"], name: str) -> type[AgentLoop]: ...
    @overload
    def __call__(self, kind: Literal["interaction"], name: str) -> type[Interaction]: ...
    @overload
    def __call__(self, kind: Literal["tool_parser"], name: str) -> type[ToolParser]: ...
    @overload
    def __call__(self, kind: Literal["weight_transport"], name: str) -> type[WeightTransport]: ...
    @overload
    def __call__(self, kind: str, name: str) -> Any: ...

    def __call__(self, kind: str, name: str) -> Any:
        """The imported target of ``(kind, name)``."""
        ...


class Registry:
    """All components of all loaded plugins, keyed by ``(kind, name)`` with aliases."""

    def __init__(self) -> None:
        self._components: dict[tuple[str, str], Component[Any]] = {}
        self._aliases: dict[tuple[str, str], str] = {}
        self.conflicts: dict[tuple[str, str], list[Component[Any]]] = {}
        #: ``load(kind, name)``: the imported target of ``(kind, name)``, typed per kind (:class:`ComponentLoader`)
        self.load: ComponentLoader = self._load

    def make_register(
        self,
        kind: str,
        plugin: str,
        dist: str | None,
        version: str | None,
        sink: list[tuple[Component[Any], bool]] | None = None,
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
            spec: CapabilitySpec | None = None,
            **unknown: Any,
        ) -> None:
            """Register one component; ``spec`` declares its capabilities (the kind's spec class)."""
            if unknown:
                raise RegistrationError(_unknown_keywords(plugin, kind, name, unknown))
            comp: Component[Any] = Component(
                kind=kind,
                name=name,
                target=target,
                plugin=plugin,
                dist=dist,
                version=version,
                description=description,
                aliases=tuple(aliases),
                spec=spec,
            )
            self.validate(comp)
            if sink is None:
                self.add(comp, replace=replace)
            else:
                sink.append((comp, replace))

        return register

    @staticmethod
    def validate(comp: Component[Any]) -> None:
        """Check the kind, the names, the shape of a lazy target and the type of the spec."""
        if comp.kind not in KIND_HOOKS:
            raise RegistrationError(f"unknown component kind {comp.kind!r}; kinds are {', '.join(KINDS)}")
        expected = KIND_SPECS[comp.kind].spec
        if expected is None and comp.spec is not None:
            raise RegistrationError(
                f"{comp.plugin}: {comp.kind} {comp.name!r}: the {comp.kind} kind has no capabilities and takes "
                f"no spec (got {type(comp.spec).__name__})"
            )
        if expected is not None and not isinstance(comp.spec, expected):
            raise RegistrationError(
                f"{comp.plugin}: {comp.kind} {comp.name!r}: spec must be a rlcore.api.specs.{expected.__name__}, "
                f"got {type(comp.spec).__name__}"
            )
        for label in (comp.name, *comp.aliases):
            if not isinstance(label, str) or not _NAME.match(label):
                raise RegistrationError(
                    f"{comp.plugin}: invalid {comp.kind} name {label!r} (letters, digits and . - _ / + only)"
                )
        if isinstance(comp.target, str) and not _LAZY_TARGET.match(comp.target):
            raise RegistrationError(
                f"{comp.plugin}: {comp.kind} {comp.name!r} target {comp.target!r} is not of the form 'module:attr'"
            )

    def add(self, comp: Component[Any], *, replace: bool = False) -> None:
        """Add a component; one whose name or an alias is already a name or an alias of another plugin's
        component of the kind is recorded as a conflict with it, unless ``replace`` (then it takes over: the
        other component is dropped)."""
        self.validate(comp)
        holders = self._holders(comp)
        if holders:
            if not replace:
                existing = holders[0]
                self.conflicts.setdefault((existing.kind, existing.name), [existing]).append(comp)
                return
            comp.replaced = holders[0].plugin
            for existing in holders:
                self._drop(existing)
        self._components[(comp.kind, comp.name)] = comp
        for alias in comp.aliases:
            self._aliases[(comp.kind, alias)] = comp.name

    def _holders(self, comp: Component[Any]) -> list[Component[Any]]:
        """The components of other plugins whose name or alias is ``comp``'s name or one of its aliases."""
        holders: list[Component[Any]] = []
        for label in (comp.name, *comp.aliases):
            existing = self._components.get((comp.kind, label)) or self._by_alias(comp.kind, label)
            if existing is not None and existing.plugin != comp.plugin and all(existing is not h for h in holders):
                holders.append(existing)
        return holders

    def _by_alias(self, kind: str, name: str) -> Component[Any] | None:
        canonical = self._aliases.get((kind, name))
        return self._components.get((kind, canonical)) if canonical else None

    def _drop(self, comp: Component[Any]) -> None:
        self._components.pop((comp.kind, comp.name), None)
        for alias in comp.aliases:
            self._aliases.pop((comp.kind, alias), None)

    def names(self, kind: str) -> list[str]:
        """Sorted canonical names of one kind."""
        return sorted(name for (k, name) in self._components if k == kind)

    def components(self, kind: str | None = None) -> list[Component[Any]]:
        """All components, optionally of one kind, sorted by (kind, name)."""
        return [c for key, c in sorted(self._components.items()) if kind is None or key[0] == kind]

    def has(self, kind: str, name: str) -> bool:
        """Whether ``name`` (or an alias) of ``kind`` is registered."""
        return (kind, name) in self._components or (kind, name) in self._aliases

    @overload
    def get(self, kind: Literal["advantage_estimator"], name: str) -> Component[AdvantageEstimatorSpec]: ...
    @overload
    def get(self, kind: Literal["training_backend"], name: str) -> Component[TrainingBackendSpec]: ...
    @overload
    def get(self, kind: Literal["preset"], name: str) -> Component[PresetSpec]: ...
    @overload
    def get(self, kind: Literal["reward_scorer"], name: str) -> Component[RewardScorerSpec]: ...
    @overload
    def get(self, kind: str, name: str) -> Component[Any]: ...

    def get(self, kind: str, name: str) -> Component[Any]:
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

    def _known_names(self, kind: str) -> list[str]:
        """Sorted names and aliases of ``kind`` that are registered."""
        return sorted({*self.names(kind), *(a for (k, a) in self._aliases if k == kind)})

    def _unknown(self, kind: str, name: str) -> str:
        """The message for an unregistered ``name``, and the known names of ``kind``. The advice, first that
        applies: the name in other case or spelling (``DAPO``: ``dapo``); the distribution that provides it and
        its ``pip install`` line (from :mod:`rlcore.distributions`); the algorithm kind it belongs to instead
        (:meth:`other_kind`: ``--preset grpo`` names the estimator); the closest name of ``kind``."""
        known = self._known_names(kind)
        listing = ", ".join(known) if known else "(none: is the plugin that provides it installed?)"
        candidates = sorted({*known, *distributions.provided_names(kind)})
        same = next((c for c in candidates if c != name and spelling(c) == spelling(name)), None)
        close = [same] if same else difflib.get_close_matches(name, candidates, n=1, cutoff=0.5)
        if not same:
            advice = distributions.missing_component_advice(kind, name)
            if advice is not None:
                return f"unknown {kind} {name!r}: {advice}. Known {_plural(kind)}: {', '.join(known) or 'none'}"
            other = self.other_kind(kind, name)
            if other is not None:
                other_kind, other_name = other
                how = KIND_SPECS[other_kind].selected_by.replace("NAME", other_name)
                chosen = how if " " in how else f"{how}={other_name}"
                return (
                    f"unknown {kind} {name!r}: {other_name!r} is {_article(other_kind)} {other_kind}, not {_article(kind)} "
                    f"{kind}; choose it with {chosen}. Known {_plural(kind)}: {listing}"
                )
        hint = ""
        if close:
            dist = None if close[0] in known else distributions.provider(kind, close[0])
            hint = f" Did you mean {close[0]!r}{f' ({dist.install_line})' if dist else ''}?"
        return f"unknown {kind} {name!r}.{hint} Known {_plural(kind)}: {listing}"

    def other_kind(self, kind: str, name: str) -> tuple[str, str] | None:
        """``(other kind, its name)`` when ``name``, not a ``kind``, names a component of another algorithm kind
        (:data:`ALGORITHM_KINDS`: presets, advantage estimators, policy losses), registered or provided by a
        known distribution, in any case (``--preset grpo``: the ``grpo`` advantage estimator); else None."""
        if kind not in ALGORITHM_KINDS:
            return None
        for other in ALGORITHM_KINDS:
            if other == kind:
                continue
            for candidate in sorted({*self._known_names(other), *distributions.provided_names(other)}):
                if spelling(candidate) == spelling(name):
                    return other, candidate
        return None

    @overload
    def spec(self, kind: Literal["advantage_estimator"], name: str) -> AdvantageEstimatorSpec: ...
    @overload
    def spec(self, kind: Literal["training_backend"], name: str) -> TrainingBackendSpec: ...
    @overload
    def spec(self, kind: Literal["preset"], name: str) -> PresetSpec: ...
    @overload
    def spec(self, kind: Literal["reward_scorer"], name: str) -> RewardScorerSpec: ...
    @overload
    def spec(self, kind: str, name: str) -> Any: ...

    def spec(self, kind: str, name: str) -> Any:
        """The capabilities of ``(kind, name)``: its spec (:mod:`rlcore.api.specs`), without importing the
        target. Only the kinds with capabilities have one."""
        if kind in KIND_SPECS and KIND_SPECS[kind].spec is None:
            with_specs = ", ".join(k.name for k in COMPONENT_KINDS if k.spec is not None)
            raise RLCoreError(f"the {kind} kind has no capabilities; kinds with a spec are {with_specs}")
        return self.get(kind, name).spec

    def _load(self, kind: str, name: str) -> Any:
        """Return the imported target of ``(kind, name)`` (:attr:`load`, typed per kind)."""
        return self.get(kind, name).load()


def _unknown_keywords(plugin: str, kind: str, name: str, unknown: Mapping[str, Any]) -> str:
    """The one-line error for ``register`` keywords it does not take: the 1.x ``**meta`` capabilities get the
    ``spec=...`` to write instead, anything else the keywords ``register`` takes."""
    head = f"{plugin}: {kind} {name!r}"
    spec_class = KIND_SPECS[kind].spec if kind in KIND_SPECS else None
    if spec_class is not None and set(unknown) <= set(spec_fields(spec_class)):
        args = ", ".join(f"{key}={value!r}" for key, value in unknown.items())
        return (
            f"{head}: capabilities are no longer keywords of register(); write spec={spec_class.__name__}({args}) "
            f"(from rlcore.api.specs import {spec_class.__name__})"
        )
    keys = ", ".join(sorted(unknown))
    takes = "description, aliases, replace" + (f", spec (a {spec_class.__name__})" if spec_class else "")
    return f"{head}: register() got unexpected keyword(s) {keys}; it takes {takes}"
