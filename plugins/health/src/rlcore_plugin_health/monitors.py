"""The built-in monitors (issue 44): each reads a few of a step's metrics (verl's names, as in metrics.jsonl)
or a few of its responses, keeps what it needs of the past, and returns a :class:`~rlcore.api.Finding` when a
condition begins — once, until it ends and begins again (:class:`~rlcore_plugin_health.streak.Streak`).
docs/health.md lists their signals, thresholds and the runs that show each one fires."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean, median
from typing import ClassVar, Literal

from rlcore.api import Finding, HealthView, MonitorSettings
from rlcore_plugin_health.config import (
    ClipSaturationSettings,
    EntropyCollapseSettings,
    GradNormSpikeSettings,
    KlSpikeSettings,
    LengthBlowupSettings,
    LogprobMismatchSettings,
    NonfiniteSettings,
    RepetitionSettings,
    RewardDominanceSettings,
    RewardHackingSettings,
    SpikeSettings,
)
from rlcore_plugin_health.signals import (
    first_values,
    matching_keys,
    ngram_repeat_rate,
    nonfinite_keys,
    number,
    positive_keys,
    robust_z,
    shares,
    slope,
    tail,
    window,
)
from rlcore_plugin_health.streak import Streak

Severity = Literal["warning", "critical"]


def _g(value: float) -> str:
    """A number for a one-line message (4 significant digits)."""
    return f"{value:.4g}"


class _Monitor:
    """What the built-in monitors share: their name, severity and how a finding is made."""

    name: ClassVar[str]
    config_class: ClassVar[type[MonitorSettings]]
    severity: ClassVar[Severity] = "warning"

    def _finding(
        self, view: HealthView, signal: str, message: str, began_at: int, values: Mapping[str, float]
    ) -> Finding:
        """A finding of this monitor at ``view.step``."""
        return Finding(
            monitor=self.name,
            severity=self.severity,
            signal=signal,
            message=message,
            began_at=began_at,
            step=view.step,
            values=dict(values),
        )


class _LevelMonitor(_Monitor):
    """A metric above a threshold for ``patience`` steps in a row (the steps that do not log it are skipped)."""

    #: what the message calls the condition
    condition: ClassVar[str]

    def __init__(self, key: str, threshold: float, patience: int, early_factor: float | None = None) -> None:
        """Watch ``key`` for values above ``threshold`` (and above ``early_factor`` x the first step's value,
        when given) held ``patience`` steps in a row."""
        self.key, self.threshold, self.early_factor = key, threshold, early_factor
        self.streak = Streak(patience)

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when the metric has been above the threshold for ``patience`` steps in a row."""
        value = number(view.metrics, self.key)
        if value is None:
            return []
        if self.early_factor is not None:
            ((_, first),) = first_values(view.history, self.key, 1)
            self.threshold = max(self.threshold, self.early_factor * first)
            self.early_factor = None  # the first step's value is known now: the threshold is fixed
        began = self.streak.update(value > self.threshold, view.step)
        if began is None:
            return []
        message = (
            f"{self.condition}: {self.key} {_g(value)} > {_g(self.threshold)} "
            f"for {self.streak.length} steps (since step {began})"
        )
        return [self._finding(view, self.key, message, began, {self.key: value, "threshold": self.threshold})]


class RewardHacking(_Monitor):
    """The training reward rising while the validation reward is flat or falling, over a window of steps."""

    name = "reward_hacking"
    config_class = RewardHackingSettings

    def __init__(self, settings: RewardHackingSettings) -> None:
        """Use ``settings`` (``trainer.monitors.reward_hacking``)."""
        self.settings = settings
        self.streak = Streak(1)
        self.val_metric = ""

    def _val_points(self, rows: Sequence[Mapping[str, object]]) -> list[tuple[int, float]]:
        """The validation reward of each validation row of ``rows`` (the mean of the keys matching ``val_metric``);
        remembers the key to name in a message (the pattern when several match)."""
        points = []
        for row in rows:
            keys = [k for k in matching_keys(row, self.settings.val_metric) if number(row, k) is not None]
            if keys:
                points.append((int(number(row, "step") or 0), fmean(number(row, k) or 0.0 for k in keys)))
                self.val_metric = keys[0] if len(keys) == 1 else self.settings.val_metric
        return points

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when, over the last ``window`` steps (``min_train_points`` of them or more), the training
        reward rose by ``min_train_rise`` or more while the validation reward (``min_val_points`` validations or
        more) rose by ``max_val_rise`` or less; each rise is the least-squares slope times the points' span."""
        s = self.settings
        rows = window(view.history, view.step - s.window + 1)
        train = [(int(number(row, "step") or 0), v) for row in rows if (v := number(row, s.train_metric)) is not None]
        val = self._val_points(rows)
        if len(train) < max(3, s.min_train_points) or len(val) < s.min_val_points:
            self.streak.update(False, view.step)
            return []
        train_rise = slope(train) * (train[-1][0] - train[0][0])
        val_rise = slope(val) * (val[-1][0] - val[0][0])
        began = self.streak.update(
            train_rise >= s.min_train_rise and val_rise <= s.max_val_rise, view.step, train[0][0]
        )
        if began is None:
            return []
        message = (
            f"training reward up while validation is not: {s.train_metric} {train_rise:+.3g} over steps "
            f"{train[0][0]}-{train[-1][0]} ({_g(train[0][1])} -> {_g(train[-1][1])}), {self.val_metric} "
            f"{val_rise:+.3g} ({_g(val[0][1])} -> {_g(val[-1][1])})"
        )
        values = {"train_rise": train_rise, "val_rise": val_rise, "val_last": val[-1][1], "train_last": train[-1][1]}
        return [self._finding(view, s.train_metric, message, began, values)]


class LengthBlowup(_LevelMonitor):
    """Too many responses cut at the length limit (``response_length/clip_ratio``) for several steps."""

    name = "length_blowup"
    config_class = LengthBlowupSettings
    condition = "responses hit the length limit"

    def __init__(self, settings: LengthBlowupSettings) -> None:
        """Use ``settings`` (``trainer.monitors.length_blowup``)."""
        super().__init__(settings.metric, settings.max_clip_ratio, settings.patience)


class ClipSaturation(_LevelMonitor):
    """The PPO loss clipping a large share of tokens (``actor/pg_clipfrac``) for several steps."""

    name = "clip_saturation"
    config_class = ClipSaturationSettings
    condition = "clip fraction saturated"

    def __init__(self, settings: ClipSaturationSettings) -> None:
        """Use ``settings`` (``trainer.monitors.clip_saturation``)."""
        super().__init__(settings.metric, settings.max_clipfrac, settings.patience, settings.early_factor)


class LogprobMismatch(_LevelMonitor):
    """The rollout engine's token probabilities drifting from the trainer's for several steps."""

    name = "logprob_mismatch"
    config_class = LogprobMismatchSettings
    condition = "rollout and trainer log-probs differ"

    def __init__(self, settings: LogprobMismatchSettings) -> None:
        """Use ``settings`` (``trainer.monitors.logprob_mismatch``)."""
        super().__init__(settings.metric, settings.max_diff, settings.patience)


class EntropyCollapse(_Monitor):
    """The policy's entropy below a fraction of its early value, or below an absolute floor."""

    name = "entropy_collapse"
    config_class = EntropyCollapseSettings

    def __init__(self, settings: EntropyCollapseSettings) -> None:
        """Use ``settings`` (``trainer.monitors.entropy_collapse``)."""
        self.settings = settings
        self.streak = Streak(settings.patience)
        self.early: tuple[int, float] | None = None

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when the entropy has been below ``min_fraction`` x its early value (the mean of the first
        ``baseline_steps`` steps) or below ``floor`` for ``patience`` steps in a row."""
        s = self.settings
        value = number(view.metrics, s.metric)
        if value is None:
            return []
        if self.early is None:
            points = first_values(view.history, s.metric, s.baseline_steps)
            if len(points) < s.baseline_steps:
                return []
            self.early = (points[0][0], fmean(v for _, v in points))
        limit = max(s.min_fraction * self.early[1], s.floor)
        began = self.streak.update(value < limit, view.step)
        if began is None:
            return []
        message = (
            f"entropy collapsed: {s.metric} {_g(value)} < {_g(limit)} (was {_g(self.early[1])} at step {self.early[0]})"
        )
        values = {s.metric: value, "early": self.early[1], "limit": limit}
        return [self._finding(view, s.metric, message, began, values)]


class _SpikeMonitor(_Monitor):
    """A metric's robust z-score (against the median and MAD of the steps before it) above a threshold."""

    severity = "critical"

    def __init__(self, settings: SpikeSettings) -> None:
        """Use ``settings`` (a :class:`~rlcore_plugin_health.config.SpikeSettings`)."""
        self.settings = settings
        self.streaks = {key: Streak(1) for key in settings.metrics}

    def check(self, view: HealthView) -> list[Finding]:
        """A finding per watched key whose value's robust z-score over the previous ``window`` steps (at least
        ``min_history`` of them) exceeds ``z_threshold``, or whose value exceeds ``ceiling``."""
        s = self.settings
        found = []
        for key, streak in self.streaks.items():
            value = number(view.metrics, key)
            if value is None:
                continue
            before = [v for _, v in tail(view.history[:-1], key, s.window)]
            z = None
            if len(before) >= s.min_history:
                centre = median(before)
                z = robust_z(value, before, max(s.rel_floor * abs(centre), s.abs_floor))
            over = s.ceiling is not None and value > s.ceiling
            began = streak.update(over or (z is not None and z > s.z_threshold), view.step)
            if began is None:
                continue
            if z is not None and z > s.z_threshold:
                message = (
                    f"{key} spiked: {_g(value)} is {z:.3g} robust standard deviations above the median of the last "
                    f"{len(before)} steps ({_g(centre)}; threshold {_g(s.z_threshold)})"
                )
                values = {key: value, "z": z, "median": centre}
            else:
                message = f"{key} spiked: {_g(value)} > {_g(s.ceiling or 0.0)}, the ceiling of a healthy step"
                values = {key: value, "ceiling": s.ceiling or 0.0}
            found.append(self._finding(view, key, message, began, values))
        return found


class KlSpike(_SpikeMonitor):
    """A spike of the policy's KL (``actor/ppo_kl``, ``actor/kl_loss``)."""

    name = "kl_spike"
    config_class = KlSpikeSettings


class GradNormSpike(_SpikeMonitor):
    """A spike of the gradient norm (``actor/grad_norm``, ``critic/grad_norm``)."""

    name = "grad_norm_spike"
    config_class = GradNormSpikeSettings


class Repetition(_Monitor):
    """Sampled responses repeating the same word n-grams."""

    name = "repetition"
    config_class = RepetitionSettings

    def __init__(self, settings: RepetitionSettings) -> None:
        """Use ``settings`` (``trainer.monitors.repetition``)."""
        self.settings = settings
        self.streak = Streak(settings.patience)

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when the mean n-gram repeat rate of the step's samples (those long enough, at least
        ``min_samples``) has been above ``max_repeat_rate`` for ``patience`` steps in a row."""
        s = self.settings
        rates = [r for sample in view.samples if (r := ngram_repeat_rate(sample.response, s.ngram)) is not None]
        if len(rates) < s.min_samples:
            return []
        rate = fmean(rates)
        began = self.streak.update(rate > s.max_repeat_rate, view.step)
        if began is None:
            return []
        worst = max(view.samples, key=lambda sample: ngram_repeat_rate(sample.response, s.ngram) or 0.0)
        excerpt = " ".join(worst.response.split()[:12])
        message = (
            f"responses repeat themselves: {s.ngram}-gram repeat rate {_g(rate)} > {_g(s.max_repeat_rate)} "
            f"over {len(rates)} samples (e.g. {excerpt!r})"
        )
        return [self._finding(view, f"samples/{s.ngram}gram_repeat_rate", message, began, {"repeat_rate": rate})]


class RewardDominance(_Monitor):
    """One reward component (the numbers the reward function returns beside the score) carrying most of the
    reward of the step's sampled responses."""

    name = "reward_dominance"
    config_class = RewardDominanceSettings

    def __init__(self, settings: RewardDominanceSettings) -> None:
        """Use ``settings`` (``trainer.monitors.reward_dominance``)."""
        self.settings = settings
        self.streak = Streak(settings.patience)
        self.early: list[dict[str, float]] = []

    def _totals(self, view: HealthView) -> dict[str, float]:
        """Each component's sum over the step's samples."""
        s = self.settings
        totals: dict[str, float] = {}
        for sample in view.samples:
            for key, value in sample.extra.items():
                if key in s.ignore or (s.components and key not in s.components):
                    continue
                totals[key] = totals.get(key, 0.0) + float(value)
        return totals

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when, with two components or more, one has carried more than ``max_share`` of their summed
        magnitude, ``min_rise`` more than in the first ``baseline_steps`` sampled steps, for ``patience`` steps
        in a row."""
        s = self.settings
        parts = shares(self._totals(view))
        if len(parts) < 2:
            return []
        if len(self.early) < s.baseline_steps:
            self.early.append(parts)
            return []
        top = max(parts, key=parts.__getitem__)
        early = fmean(shares_then.get(top, 0.0) for shares_then in self.early)
        began = self.streak.update(parts[top] > s.max_share and parts[top] - early >= s.min_rise, view.step)
        if began is None:
            return []
        others = ", ".join(f"{k} {parts[k]:.0%}" for k in sorted(parts) if k != top)
        message = (
            f"reward component {top} carries {parts[top]:.0%} of the reward (> {s.max_share:.0%}; {others}; "
            f"{early:.0%} in the first {s.baseline_steps} sampled steps) over {len(view.samples)} samples"
        )
        return [
            self._finding(view, f"reward_extra_info/{top}", message, began, {f"share/{k}": v for k, v in parts.items()})
        ]


class Nonfinite(_Monitor):
    """NaN or inf in a loss, reward or gradient-norm metric, or a counter of non-finite values above 0."""

    name = "nonfinite"
    config_class = NonfiniteSettings
    severity = "critical"

    def __init__(self, settings: NonfiniteSettings) -> None:
        """Use ``settings`` (``trainer.monitors.nonfinite``)."""
        self.settings = settings
        self.streak = Streak(1)

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when this step has a non-finite watched metric or a counter above 0 (again only after a
        step without either)."""
        bad = nonfinite_keys(view.metrics, self.settings.metrics)
        counted = positive_keys(view.metrics, self.settings.counters)
        began = self.streak.update(bool(bad or counted), view.step)
        if began is None:
            return []
        parts = [f"{k} {number(view.metrics, k)}" for k in bad] + [
            f"{k} {_g(number(view.metrics, k) or 0)}" for k in counted
        ]
        signal = (bad or counted)[0]
        message = f"non-finite values: {', '.join(parts)}"
        values = {k: number(view.metrics, k) or 0.0 for k in counted} | {f"nonfinite/{k}": 1.0 for k in bad}
        return [self._finding(view, signal, message, began, values)]


#: every built-in monitor, in the order the docs list them
MONITORS: tuple[type[_Monitor], ...] = (
    RewardHacking,
    LengthBlowup,
    EntropyCollapse,
    KlSpike,
    GradNormSpike,
    ClipSaturation,
    Repetition,
    RewardDominance,
    LogprobMismatch,
    Nonfinite,
)
