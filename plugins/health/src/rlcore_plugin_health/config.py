"""Each built-in monitor's settings: a typed section at ``trainer.monitors.<name>`` (``enable`` and ``action``
come from :class:`~rlcore.api.MonitorSettings`; every threshold is a field with its default). Torch-free: the
hooks module returns them from ``config_defaults``. docs/health.md says how each default was chosen."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.api import MonitorSettings


def _fraction(section: MonitorSettings, name: str) -> list[str]:
    """The problem of field ``name`` when it is not a number in [0, 1]."""
    value = getattr(section, name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return []
    return [f"{section.key(name)} must be a number in [0, 1], got {value!r}"]


def _above_zero(section: MonitorSettings, name: str) -> list[str]:
    """The problem of field ``name`` when it is not a number > 0."""
    value = getattr(section, name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return []
    return [f"{section.key(name)} must be a number > 0, got {value!r}"]


@dataclass(frozen=True)
class RewardHackingSettings(MonitorSettings):
    """``trainer.monitors.reward_hacking``: the training reward rising while the validation reward is flat or
    falling, over a window of steps."""

    PATH = "trainer.monitors.reward_hacking"

    #: the training reward's metric (verl's mean sequence score)
    train_metric: str = "critic/score/mean"
    #: the validation reward's metric, an fnmatch pattern (several matches: their mean)
    val_metric: str = "val-core/*/reward/mean@*"
    #: the window, in steps, over which both trends are measured (least-squares slope x the window's span)
    window: int = 20
    #: the training reward must have risen at least this much over the window
    min_train_rise: float = 0.15
    #: ... while the validation reward rose at most this much (flat or falling)
    max_val_rise: float = 0.02
    #: validations needed inside the window to measure its trend
    min_val_points: int = 3
    #: training steps needed inside the window to measure its trend
    min_train_points: int = 10

    def problems(self) -> list[str]:
        """The window and the validation count must be positive integers, the rise a number > 0."""
        return [
            *super().problems(),
            *self.positive("window"),
            *self.positive("min_val_points"),
            *self.positive("min_train_points"),
            *_above_zero(self, "min_train_rise"),
        ]


@dataclass(frozen=True)
class LengthBlowupSettings(MonitorSettings):
    """``trainer.monitors.length_blowup``: too many responses cut at data.max_response_length."""

    PATH = "trainer.monitors.length_blowup"

    #: the share of responses that reached the length limit
    metric: str = "response_length/clip_ratio"
    #: the share above which a step counts
    max_clip_ratio: float = 0.2
    #: steps in a row above it before it is reported
    patience: int = 3

    def problems(self) -> list[str]:
        """The ratio must be in [0, 1], the patience a positive integer."""
        return [*super().problems(), *_fraction(self, "max_clip_ratio"), *self.positive("patience")]


@dataclass(frozen=True)
class EntropyCollapseSettings(MonitorSettings):
    """``trainer.monitors.entropy_collapse``: the policy's entropy falling below a fraction of its early value
    or below an absolute floor."""

    PATH = "trainer.monitors.entropy_collapse"

    #: the policy's mean token entropy
    metric: str = "actor/entropy"
    #: the early value is the mean of this many first steps (1: the first step, before any update has acted)
    baseline_steps: int = 1
    #: collapsed below this fraction of the early value
    min_fraction: float = 0.1
    #: ... or below this absolute value (nats)
    floor: float = 0.01
    #: steps in a row collapsed before it is reported
    patience: int = 3

    def problems(self) -> list[str]:
        """Counts must be positive integers, the fraction in [0, 1]."""
        return [
            *super().problems(),
            *self.positive("baseline_steps"),
            *_fraction(self, "min_fraction"),
            *self.positive("patience"),
        ]


@dataclass(frozen=True)
class SpikeSettings(MonitorSettings):
    """A spike: a value's robust z-score (median and MAD of the window of steps before it) above a threshold."""

    #: the metrics watched (each on its own; the ones a run does not log are skipped)
    metrics: list[str] = field(default_factory=list)
    #: the steps before this one that make the baseline
    window: int = 20
    #: steps of baseline needed before a step is judged
    min_history: int = 3
    #: a spike is a robust z-score above this
    z_threshold: float = 8.0
    #: the robust scale is at least this fraction of the baseline's |median| (a near-constant series)
    rel_floor: float = 0.25
    #: ... and at least this absolute value
    abs_floor: float = 1e-3
    #: a value above this is a spike whatever came before, the first step included (null: none)
    ceiling: float | None = None

    def problems(self) -> list[str]:
        """Counts must be positive integers, the thresholds numbers > 0."""
        return [
            *super().problems(),
            *self.positive("window"),
            *self.positive("min_history"),
            *_above_zero(self, "z_threshold"),
            *_above_zero(self, "abs_floor"),
            *([] if self.ceiling is None else _above_zero(self, "ceiling")),
        ]


@dataclass(frozen=True)
class KlSpikeSettings(SpikeSettings):
    """``trainer.monitors.kl_spike``: a spike of the policy's KL (to the old policy, or the KL loss)."""

    PATH = "trainer.monitors.kl_spike"

    #: the metrics watched (each on its own; the ones a run does not log are skipped)
    metrics: list[str] = field(default_factory=lambda: ["actor/ppo_kl", "actor/kl_loss"])
    #: a KL above this is a spike even at the first step, with no history to compare with (a policy that moved
    #: this far within one step's mini-batches; healthy runs stay below 0.01)
    ceiling: float | None = 0.3


@dataclass(frozen=True)
class GradNormSpikeSettings(SpikeSettings):
    """``trainer.monitors.grad_norm_spike``: a spike of the gradient norm (before clipping)."""

    PATH = "trainer.monitors.grad_norm_spike"

    #: the metrics watched (each on its own; the ones a run does not log are skipped)
    metrics: list[str] = field(default_factory=lambda: ["actor/grad_norm", "critic/grad_norm"])


@dataclass(frozen=True)
class ClipSaturationSettings(MonitorSettings):
    """``trainer.monitors.clip_saturation``: the share of tokens whose ratio the PPO loss clipped staying high."""

    PATH = "trainer.monitors.clip_saturation"

    #: the clipped share of tokens
    metric: str = "actor/pg_clipfrac"
    #: the share above which a step counts ...
    max_clipfrac: float = 0.3
    #: ... when it is also above this multiple of the first step's share (GSPO's sequence-level ratio clips
    #: ~40 % of the tokens from its first step on, by design)
    early_factor: float = 2.0
    #: steps in a row above it before it is reported
    patience: int = 3

    def problems(self) -> list[str]:
        """The share must be in [0, 1], the factor > 0, the patience a positive integer."""
        return [
            *super().problems(),
            *_fraction(self, "max_clipfrac"),
            *_above_zero(self, "early_factor"),
            *self.positive("patience"),
        ]


@dataclass(frozen=True)
class RepetitionSettings(MonitorSettings):
    """``trainer.monitors.repetition``: sampled responses repeating the same word n-grams."""

    PATH = "trainer.monitors.repetition"

    #: the n of the word n-grams
    ngram: int = 4
    #: a step counts when the mean repeat rate (1 - distinct/total n-grams) of its samples is above this
    max_repeat_rate: float = 0.5
    #: responses long enough to measure (more than ngram words) needed in a step's samples
    min_samples: int = 4
    #: steps in a row above it before it is reported
    patience: int = 2

    def problems(self) -> list[str]:
        """Counts must be positive integers, the rate in [0, 1]."""
        return [
            *super().problems(),
            *self.positive("ngram"),
            *_fraction(self, "max_repeat_rate"),
            *self.positive("min_samples"),
            *self.positive("patience"),
        ]


@dataclass(frozen=True)
class RewardDominanceSettings(MonitorSettings):
    """``trainer.monitors.reward_dominance``: one reward component (the numbers a reward function returns
    beside its score, ``reward_extra_info``) carrying most of the reward in the sampled responses."""

    PATH = "trainer.monitors.reward_dominance"

    #: the components (empty: every number the reward function returns beside the score)
    components: list[str] = field(default_factory=list)
    #: extras that are not parts of the reward (verl's accuracy flag)
    ignore: list[str] = field(default_factory=lambda: ["acc"])
    #: a step counts when one component's share of the summed |component| is above this ...
    max_share: float = 0.9
    #: ... and at least this much above its share in the first baseline_steps sampled steps (a reward that
    #: was one component's from the start, a bonus never earned, is not a takeover)
    min_rise: float = 0.25
    #: the sampled steps whose shares are the baseline
    baseline_steps: int = 3
    #: steps in a row above it before it is reported
    patience: int = 3

    def problems(self) -> list[str]:
        """The shares must be in [0, 1], the counts positive integers."""
        return [
            *super().problems(),
            *_fraction(self, "max_share"),
            *_fraction(self, "min_rise"),
            *self.positive("baseline_steps"),
            *self.positive("patience"),
        ]


@dataclass(frozen=True)
class LogprobMismatchSettings(MonitorSettings):
    """``trainer.monitors.logprob_mismatch``: the rollout engine's token probabilities drifting from the
    trainer's (needs actor_rollout_ref.rollout.calculate_log_probs=true; without it the signal is absent)."""

    PATH = "trainer.monitors.logprob_mismatch"

    #: mean |p_trainer - p_rollout| over response tokens
    metric: str = "training/rollout_probs_diff_mean"
    #: the difference above which a step counts
    max_diff: float = 0.05
    #: steps in a row above it before it is reported
    patience: int = 2

    def problems(self) -> list[str]:
        """The difference must be in [0, 1], the patience a positive integer."""
        return [*super().problems(), *_fraction(self, "max_diff"), *self.positive("patience")]


@dataclass(frozen=True)
class NonfiniteSettings(MonitorSettings):
    """``trainer.monitors.nonfinite``: NaN or inf in a loss, reward or gradient-norm metric, or a counter of
    non-finite values above 0."""

    PATH = "trainer.monitors.nonfinite"

    #: fnmatch patterns of the metrics that must be finite
    metrics: list[str] = field(
        default_factory=lambda: ["*loss*", "*reward*", "*score*", "*grad_norm*", "*entropy*", "*kl*", "*advantages*"]
    )
    #: fnmatch patterns of counters of non-finite values (scores replaced by 0, updates skipped)
    counters: list[str] = field(default_factory=lambda: ["reward/scorer_nan", "*/grad_norm_nonfinite"])
