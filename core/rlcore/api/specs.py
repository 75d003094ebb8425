"""Capability specs: what a component declares about itself when it is registered.

``register(name, target, spec=AdvantageEstimatorSpec(needs_critic=True))`` — one frozen dataclass per kind
that has capabilities (:attr:`rlcore.api.kinds.KindSpec.spec`); the core reads them from
``registry.get(kind, name).spec`` to decide which roles to create and which settings to refuse before
anything starts. A component registered without a spec gets its kind's default spec (every capability off).
Each spec validates its fields when it is built, and the error names the field.

Nothing here imports anything but the standard library: hooks modules import it at plugin load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, get_args

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = [
    "AdvantageEstimatorSpec",
    "CapabilitySpec",
    "GroundTruthForm",
    "HealthMonitorSpec",
    "PresetSpec",
    "RewardScorerSpec",
    "SpecError",
    "TrainingBackendSpec",
    "spec_fields",
]

_LAZY_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

#: how a reward scorer wants the ground truth: ``"as_stored"`` (the dataset's value, whatever its type) or
#: ``"text"`` (converted to a string by :mod:`rlcore.reward.ground_truth`)
GroundTruthForm = Literal["as_stored", "text"]


class SpecError(RLCoreError, ValueError):
    """A capability spec was built with an invalid field value."""


def _names(spec: object, name: str, value: Iterable[str]) -> frozenset[str]:
    """``value`` as a frozenset of non-empty strings; a lone string (a common slip for a one-key set) or any
    other element type is refused, naming the field."""
    where = f"{type(spec).__name__}.{name}"
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise SpecError(f"{where} must be a set of column names, e.g. frozenset({{'acc'}}), got {value!r}")
    names = frozenset(value)
    bad = sorted(repr(item) for item in names if not isinstance(item, str) or not item)
    if bad:
        raise SpecError(f"{where} must hold non-empty strings, got {', '.join(bad)}")
    return names


def _flag(spec: object, name: str) -> None:
    """Refuse a non-bool value of the bool field ``name`` (``"false"`` would read as true)."""
    value = getattr(spec, name)
    if not isinstance(value, bool):
        raise SpecError(f"{type(spec).__name__}.{name} must be True or False, got {value!r}")


def _lazy_target(spec: object, name: str) -> None:
    """Refuse a value of the optional ``"module:attr"`` field ``name`` that is not of that form."""
    value = getattr(spec, name)
    if value is not None and (not isinstance(value, str) or not _LAZY_TARGET.match(value)):
        raise SpecError(f"{type(spec).__name__}.{name} must be a 'module:attr' string, got {value!r}")


@dataclass(frozen=True)
class AdvantageEstimatorSpec:
    """What an advantage estimator needs, so that the controller creates the roles it requires and no others."""

    #: the estimator reads a value function: the run creates a critic (and refuses ``critic.enable=false``);
    #: the estimator is called with ``values``
    needs_critic: bool = False
    #: the estimator is called with ``reward_baselines``, the rewards of one greedy response per prompt (ReMax)
    needs_greedy_baseline: bool = False
    #: the fewest responses per prompt the estimator can compare; ``actor_rollout_ref.rollout.n`` is checked
    #: against it before anything loads
    min_group_size: int = 1
    #: ``"module:attr"`` of a reward-model worker class the run creates a worker group of; its
    #: ``compute_rm_score(batch)`` sees the rule scores as ``acc`` (PRIME's implicit PRM)
    reward_model_worker: str | None = None
    #: batch columns passed to the estimator as keyword arguments; with ``rm_scores`` among them the reward
    #: model's scores are not added to the rule scores, with ``sum_pi_squared`` the run needs
    #: ``actor_rollout_ref.actor.calculate_sum_pi_squared=true``
    batch_keys: frozenset[str] = field(default_factory=frozenset)
    #: batch columns passed as keyword arguments only when the batch has them (``rollout_is_weights``)
    optional_batch_keys: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        """Check every field; sets are normalised to frozensets."""
        _flag(self, "needs_critic")
        _flag(self, "needs_greedy_baseline")
        if isinstance(self.min_group_size, bool) or not isinstance(self.min_group_size, int):
            raise SpecError(f"AdvantageEstimatorSpec.min_group_size must be an int, got {self.min_group_size!r}")
        if self.min_group_size < 1:
            raise SpecError(f"AdvantageEstimatorSpec.min_group_size must be >= 1, got {self.min_group_size}")
        _lazy_target(self, "reward_model_worker")
        object.__setattr__(self, "batch_keys", _names(self, "batch_keys", self.batch_keys))
        object.__setattr__(self, "optional_batch_keys", _names(self, "optional_batch_keys", self.optional_batch_keys))
        both = sorted(self.batch_keys & self.optional_batch_keys)
        if both:
            raise SpecError(
                f"AdvantageEstimatorSpec: {', '.join(both)} in both batch_keys and optional_batch_keys; keep one"
            )


@dataclass(frozen=True)
class TrainingBackendSpec:
    """What a training backend computes beyond the :class:`rlcore.api.training.TrainingBackend` contract."""

    #: ``(config, section, world_size) -> int``, the data-parallel size of the engine at config ``section``
    #: for backends with model parallelism (defined in the plugin's light hooks module), so that the dry run
    #: and the workers split batches over data-parallel ranks only; None: every rank is a data-parallel rank
    data_parallel_size: Callable[[DictConfig, str, int], int] | None = None
    #: the engine's ``forward`` fills ``ModelOutput.sum_pi_squared`` (``with_sum_pi_squared``); without it
    #: ``actor_rollout_ref.actor.calculate_sum_pi_squared=true`` is refused before the run starts
    sum_pi_squared: bool = False

    def __post_init__(self) -> None:
        """Check every field."""
        if self.data_parallel_size is not None and not callable(self.data_parallel_size):
            raise SpecError(
                "TrainingBackendSpec.data_parallel_size must be a function (config, section, world_size) -> int, "
                f"got {self.data_parallel_size!r}"
            )
        _flag(self, "sum_pi_squared")


@dataclass(frozen=True)
class PresetSpec:
    """What a preset does besides setting config keys (the bundled tasks' presets)."""

    #: ``"module:attr"`` of a callable ``(config) -> None`` called before a real run, e.g. to build a bundled
    #: task's data and warm-started model (``config`` is ``None`` outside an RL run: ``rlcore sft``'s bundled task)
    prepare: str | None = None
    #: the preset is a bundled task's, and this is the stem of its run's name, which
    #: :func:`rlcore.config.run_name.name_after_presets` completes with the presets applied on top (``arith-dapo``)
    task: str | None = None

    def __post_init__(self) -> None:
        """Check every field."""
        _lazy_target(self, "prepare")
        if self.task is not None and (not isinstance(self.task, str) or not self.task):
            raise SpecError(f"PresetSpec.task must be a non-empty string, got {self.task!r}")


@dataclass(frozen=True)
class RewardScorerSpec:
    """How a reward scorer wants its inputs and where it must run."""

    #: ``"text"``: the reward manager passes the ground truth as text (:mod:`rlcore.reward.ground_truth`);
    #: ``"as_stored"``: as the dataset holds it
    ground_truth: GroundTruthForm = "as_stored"
    #: the scorer executes model-written code, so it runs in the sandbox (rlcore-plugin-sandbox)
    sandbox: bool = False

    def __post_init__(self) -> None:
        """Check every field."""
        if self.ground_truth not in get_args(GroundTruthForm):
            choices = " or ".join(repr(choice) for choice in get_args(GroundTruthForm))
            raise SpecError(f"RewardScorerSpec.ground_truth must be {choices}, got {self.ground_truth!r}")
        _flag(self, "sandbox")


@dataclass(frozen=True)
class HealthMonitorSpec:
    """What a run-health monitor reads, so that the run gives it what it needs and nothing more."""

    #: the metric keys (or ``fnmatch`` patterns such as ``"val-core/*"``) the monitor reads: listed by
    #: ``rlcore plugins`` and the docs, and used to say which signal a run never logged
    reads: tuple[str, ...] = ()
    #: responses of each step the monitor wants decoded in ``HealthView.samples`` (0: none, the default; the
    #: run decodes the most any enabled monitor asks for, and nothing when none asks)
    samples: int = 0

    def __post_init__(self) -> None:
        """Check every field; ``reads`` is normalised to a tuple."""
        if isinstance(self.reads, str | bytes) or not isinstance(self.reads, Iterable):
            raise SpecError(f"HealthMonitorSpec.reads must be a tuple of metric keys, got {self.reads!r}")
        reads = tuple(self.reads)
        bad = [repr(item) for item in reads if not isinstance(item, str) or not item]
        if bad:
            raise SpecError(f"HealthMonitorSpec.reads must hold non-empty strings, got {', '.join(bad)}")
        object.__setattr__(self, "reads", reads)
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0:
            raise SpecError(f"HealthMonitorSpec.samples must be an int >= 0, got {self.samples!r}")


#: a capability spec of any kind
CapabilitySpec = AdvantageEstimatorSpec | TrainingBackendSpec | PresetSpec | RewardScorerSpec | HealthMonitorSpec


def spec_fields(cls: type[Any]) -> tuple[str, ...]:
    """The field names of the spec class ``cls`` (the keywords the old ``**meta`` registration took)."""
    return tuple(f.name for f in fields(cls))
