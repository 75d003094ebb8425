"""Every bundled component conforms to its kind's protocol (:attr:`rlcore.api.kinds.KindSpec.protocol`).

All components of the process-wide registry (``load_plugins()``: the built-in plugins and every bundled
plugin distribution) are imported. A function kind's target must accept the protocol's ``__call__`` as the
core makes it (the same positional parameter names in the same order, the keyword ones by name or through
``**kwargs``); a class kind's target must be a class whose constructor takes the protocol's ``__init__``
arguments and which has every method of the protocol with the protocol's parameter names; the kinds cheap to
build (tool, interaction, tool parser) are also built and checked with ``isinstance``. A component that drifts
from its kind's contract fails here, naming the component and the parameter or member.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from rlcore.api import components
from rlcore.api.kinds import COMPONENT_KINDS
from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.plugins import load_plugins
from rlcore.registry import KIND_SPECS, Component

#: the kinds whose target is a function (the others' targets are classes, the preset's a mapping or function)
FUNCTION_KINDS = {"advantage_estimator", "policy_loss", "reward_scorer", "batch_filter"}
#: the constructor arguments of the kinds built here for the ``isinstance`` check
CHEAP_TO_BUILD: dict[str, tuple[Any, ...]] = {"tool": ({}, None), "interaction": ({},), "tool_parser": ()}


def _parameters(function: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters of ``function`` without ``self``/``cls``."""
    params = list(inspect.signature(function).parameters.values())
    return params[1:] if params and params[0].name in ("self", "cls") else params


def _call_problems(where: str, target: Callable[..., Any], protocol: Callable[..., Any], extra: set[str]) -> list[str]:
    """How a call shaped like ``protocol`` (plus the keywords ``extra``) does not fit ``target``'s signature."""
    wanted = _parameters(protocol)
    have = _parameters(target)
    problems = []
    positional = [p.name for p in wanted if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = [p.name if p.kind == p.POSITIONAL_OR_KEYWORD else None for p in wanted if p.name in positional]
    have_positional = [p.name for p in have if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(name is not None and name != got for name, got in zip(named, have_positional, strict=False)):
        problems.append(f"{where}: positional parameters {have_positional}, the protocol's are {positional}")
    keywords = {p.name for p in wanted if p.kind == p.KEYWORD_ONLY} | extra
    try:
        inspect.Signature(have).bind(*positional, **dict.fromkeys(keywords))
    except TypeError as exc:
        problems.append(f"{where}: cannot be called as the protocol says ({exc})")
    return problems


def _protocol_members(protocol: type[Any]) -> dict[str, Any]:
    """The protocol's own members (methods and properties), ``__init__`` and ``__call__`` included."""
    names = [
        name for name in vars(protocol) if not name.startswith("_") or name in ("__call__", "__len__", "__getitem__")
    ]
    return {
        name: vars(protocol)[name]
        for name in names
        if callable(vars(protocol)[name]) or isinstance(vars(protocol)[name], property)
    }


def _class_problems(component: Component[Any], target: Any, protocol: type[Any]) -> list[str]:
    """How the class ``target`` departs from the instance protocol ``protocol``."""
    where = f"{component.kind} {component.name!r} ({component.target_path})"
    if not isinstance(target, type):
        return [f"{where}: is a {type(target).__name__}, not a class"]
    problems = []
    if "__init__" in vars(protocol):
        problems += _call_problems(f"{where}.__init__", target, vars(protocol)["__init__"], set())
    for name, member in _protocol_members(protocol).items():
        have = inspect.getattr_static(target, name, None)
        if have is None:
            problems.append(f"{where}: has no {name}")
        elif isinstance(member, property):
            continue
        else:
            if inspect.iscoroutinefunction(member) != inspect.iscoroutinefunction(getattr(target, name)):
                problems.append(
                    f"{where}.{name}: the protocol's is {'' if inspect.iscoroutinefunction(member) else 'not '}async"
                )
            problems += _call_problems(f"{where}.{name}", getattr(target, name), member, set())
    return problems


def _estimator_columns(spec: AdvantageEstimatorSpec) -> set[str]:
    """The keywords the controller adds for an estimator with ``spec``."""
    columns = set(spec.batch_keys | spec.optional_batch_keys)
    if spec.needs_critic:
        columns.add("values")
    if spec.needs_greedy_baseline:
        columns.add("reward_baselines")
    return columns


def conformance_problems(component: Component[Any]) -> list[str]:
    """Every way the imported target of ``component`` departs from its kind's protocol."""
    kind = KIND_SPECS[component.kind]
    target = component.load()
    where = f"{component.kind} {component.name!r} ({component.target_path})"
    if component.kind == "preset":
        if isinstance(target, Mapping):
            return []
        return _call_problems(where, target, components.Preset.__call__, set())
    if component.kind == "training_backend":
        return [
            problem
            for name in ("check_config", "create_engine")
            for problem in _call_problems(f"{where}.{name}", getattr(target, name), getattr(kind.protocol, name), set())
        ]
    if component.kind in FUNCTION_KINDS:
        extra = _estimator_columns(component.spec) if component.kind == "advantage_estimator" else set()
        if not callable(target):
            return [f"{where}: is not callable"]
        return _call_problems(where, target, kind.protocol.__call__, extra)
    problems = _class_problems(component, target, kind.protocol)
    if (
        not problems
        and component.kind in CHEAP_TO_BUILD
        and not isinstance(target(*CHEAP_TO_BUILD[component.kind]), kind.protocol)
    ):
        problems.append(f"{where}: an instance is not a {kind.protocol.__name__}")
    return problems


BUNDLED = load_plugins().registry.components()


def test_every_kind_has_bundled_components() -> None:
    """The check below covers every kind (each has at least one bundled component)."""
    assert {c.kind for c in BUNDLED} == {kind.name for kind in COMPONENT_KINDS}


@pytest.mark.parametrize("component", BUNDLED, ids=lambda c: f"{c.kind}:{c.name}")
def test_bundled_component_conforms_to_its_protocol(component: Component[Any]) -> None:
    """The bundled component's target has the call signature or the members of its kind's protocol."""
    assert conformance_problems(component) == []


def _drifted_loss(old_log_prob, log_prob, advantage, response_mask, loss_agg_mode="token-mean", config=None):
    """A policy loss whose third parameter was renamed and whose ``rollout_is_weights`` was dropped."""
    return old_log_prob, {}


class _DriftedTracker:
    """A tracker whose ``log`` lost its ``step`` and which has no ``finish``."""

    def __init__(self, project, experiment, config, run_dir):
        self.project = project

    def log(self, metrics):
        """Record nothing."""


class _SyncTool:
    """A tool whose ``execute`` is not a coroutine and whose constructor takes no schema."""

    name = "sync"
    openai_schema: dict[str, Any] = {}

    def __init__(self, config):
        self.config = config

    async def create(self, instance_id, **kwargs):
        """Nothing to set up."""

    def execute(self, instance_id, arguments):
        """Answer at once."""
        return "ok"

    async def release(self, instance_id):
        """Nothing to drop."""


def test_the_check_finds_drift() -> None:
    """A renamed or dropped parameter, a missing method, a sync method for an async one, a constructor that
    takes other arguments and an estimator that does not accept the column its spec asks for all fail."""
    loss = Component(kind="policy_loss", name="drifted", target=_drifted_loss, plugin="test")
    problems = conformance_problems(loss)
    assert any("advantage" in p and "positional parameters" in p for p in problems), problems
    assert any("rollout_is_weights" in p for p in problems), problems
    tracker = conformance_problems(Component(kind="tracker", name="drifted", target=_DriftedTracker, plugin="test"))
    assert any("has no finish" in p for p in tracker) and any(".log" in p for p in tracker), tracker
    tool = conformance_problems(Component(kind="tool", name="sync", target=_SyncTool, plugin="test"))
    assert any(".execute: the protocol's is async" in p for p in tool), tool
    assert any(".__init__" in p for p in tool), tool

    def estimate(*, token_level_rewards, response_mask, index, config):
        return token_level_rewards, token_level_rewards

    estimator = Component(
        kind="advantage_estimator",
        name="reads-acc",
        target=estimate,
        plugin="test",
        spec=AdvantageEstimatorSpec(batch_keys=frozenset({"acc"})),
    )
    assert any("acc" in p for p in conformance_problems(estimator))
