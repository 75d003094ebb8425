"""The roles' ``profiler.tool_config.torch`` sections (verl's ``TorchProfilerToolConfig``): what a
``global_profiler.tool=torch`` trace records and how it is cut.

- ``contents``: ``cpu``, ``cuda``, ``memory``, ``shapes``, ``stack`` (empty: everything the device has, no
  extras). CPU activity is always recorded (the stage rows are CPU events); ``cuda`` adds the CUDA activity
  on a CUDA rank, ``memory`` ``profile_memory``, ``shapes`` ``record_shapes``, ``stack`` ``with_stack`` (and
  ``module``, ``with_modules``, which only the npu tool's settings give: :mod:`rlcore_plugin_profiler.npu`).
- ``discrete``: false, one trace per profiled step per rank holding every stage as a ``record_function``
  row; true, one trace per stage (worker call).
- ``schedule`` (training roles): a ``torch.profiler.schedule`` over the update loop's mini-batches, on when
  ``active > 0``. In a discrete trace the update stage's trace follows it; in a continuous one the step's
  session does, the stages before the update counting as the first mini-batch's slot: with ``skip_first``,
  ``wait`` and ``warmup`` at 0 every earlier stage is kept plus the first ``active`` mini-batches, otherwise
  the window (and the trace) starts at a later mini-batch, as in verl (:func:`continuous_window`).
- ``profile_token_start`` / ``profile_token_end`` (rollout): the response-token window of a rollout trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlcore.api import RLCoreError

__all__ = ["CONTENTS", "SCHEDULE_KEYS", "TorchOptions", "continuous_window", "read_torch_options"]

CONTENTS = ("cpu", "cuda", "memory", "shapes", "stack")
SCHEDULE_KEYS = ("skip_first", "wait", "warmup", "active", "repeat")


@dataclass(frozen=True)
class TorchOptions:
    """One role's torch-profiler settings (see the module docstring)."""

    contents: tuple[str, ...] = ()
    discrete: bool = False
    schedule: tuple[tuple[str, int], ...] = ()
    token_start: int | None = None
    token_end: int | None = None

    @property
    def scheduled(self) -> bool:
        """Whether the update loop's mini-batches are sub-sampled (``schedule.active > 0``)."""
        return dict(self.schedule).get("active", 0) > 0

    @property
    def token_window(self) -> bool:
        """Whether a rollout trace covers a window of response tokens only."""
        return self.token_start is not None or self.token_end is not None

    def schedule_kwargs(self) -> dict[str, int] | None:
        """The ``torch.profiler.schedule`` arguments over the update's mini-batches, or None when unscheduled.

        A continuous trace is one session from the step's first traced stage, advanced once per update
        mini-batch (verl 0.9 and 0.10 alike): the stages before the update fall in its first mini-batch's slot,
        so they are kept when the first window starts at once and dropped when ``skip_first``/``wait``/``warmup``
        push it later. ``repeat`` 0 there is one window (verl 0.10), not windows until the step ends."""
        if not self.scheduled:
            return None
        values = dict(self.schedule)
        if not self.discrete:
            values["repeat"] = values["repeat"] or 1
        return values

    def profile_kwargs(self, cuda: bool) -> dict[str, Any]:
        """The ``torch.profiler.profile`` arguments for a rank on CUDA (``cuda``) or not."""
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda and (not self.contents or "cuda" in self.contents):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        return {
            "activities": activities,
            "profile_memory": "memory" in self.contents,
            "record_shapes": "shapes" in self.contents,
            "with_stack": "stack" in self.contents,
            "with_modules": "module" in self.contents,
        }

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (it crosses process boundaries under Ray)."""
        return {
            "contents": list(self.contents),
            "discrete": self.discrete,
            "schedule": dict(self.schedule),
            "token_start": self.token_start,
            "token_end": self.token_end,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TorchOptions:
        """The options :meth:`to_dict` wrote."""
        return cls(
            contents=tuple(data["contents"]),
            discrete=bool(data["discrete"]),
            schedule=tuple(sorted(data["schedule"].items())),
            token_start=data["token_start"],
            token_end=data["token_end"],
        )


def continuous_window(schedule: dict[str, int]) -> str:
    """What a continuous trace keeps under ``schedule`` (:meth:`TorchOptions.schedule_kwargs`), for the plan."""
    lead = schedule["skip_first"] + schedule["wait"] + schedule["warmup"]
    if not lead and schedule["repeat"] == 1:
        return f"the first {schedule['active']} update mini-batch(es) kept"
    windows = "one window" if schedule["repeat"] == 1 else f"{schedule['repeat']} windows"
    kept = "every stage before the update kept" if not lead else "the stages before the first window dropped"
    return (
        f"{windows} of {schedule['active']} update mini-batch(es) from mini-batch {lead} (torch.profiler.schedule("
        + ", ".join(f"{k}={v}" for k, v in schedule.items())
        + f")), {kept}"
    )


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RLCoreError(f"{key} must be a whole number >= 0, got {value!r}")
    return value


def _token(key: str, value: Any) -> int | None:
    return None if value is None else _count(key, value)


def read_torch_options(
    section: str,
    torch: dict[str, Any],
    rollout: bool,
    *,
    key: str | None = None,
    contents: tuple[str, ...] = CONTENTS,
) -> TorchOptions:
    """The :class:`TorchOptions` of ``{section}.profiler.tool_config.torch`` (the resolved dict ``torch``);
    ``rollout`` says whether it is the rollout's (a token window, no schedule). Bad values raise an error
    naming the key (``key``: the section that gave them, when another tool's settings were mapped onto these;
    ``contents``: the values its ``contents`` may hold)."""
    key = key or f"{section}.profiler.tool_config.torch"
    given = torch.get("contents") or []
    if not isinstance(given, list) or not all(isinstance(c, str) and c in contents for c in given):
        raise RLCoreError(f"{key}.contents must be a list of {', '.join(contents)}, got {given!r}")
    discrete = torch.get("discrete", False)
    if not isinstance(discrete, bool):
        raise RLCoreError(f"{key}.discrete must be true or false, got {discrete!r}")
    schedule: dict[str, int] = {}
    if not rollout:
        raw = torch.get("schedule") or {}
        schedule = {name: _count(f"{key}.schedule.{name}", raw.get(name, 0)) for name in SCHEDULE_KEYS}
        leading = [name for name in SCHEDULE_KEYS if name != "active" and schedule[name]]
        if leading and schedule["active"] == 0:
            raise RLCoreError(
                f"{key}.schedule.{leading[0]}={schedule[leading[0]]} has no effect while schedule.active is 0 "
                "(the whole update loop is recorded): set schedule.active to the mini-batches to keep"
            )
    start = _token(f"{key}.profile_token_start", torch.get("profile_token_start"))
    end = _token(f"{key}.profile_token_end", torch.get("profile_token_end"))
    if start is not None and end is not None and end <= start:
        raise RLCoreError(f"{key}.profile_token_end={end} must be greater than profile_token_start={start}")
    return TorchOptions(tuple(given), discrete, tuple(sorted(schedule.items())), start, end)
