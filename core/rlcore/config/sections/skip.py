"""``skip``: verl's SkipManager, replaying dumped rollouts instead of generating (docs/from-verl.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.config.sections.base import Section


@dataclass(frozen=True)
class RolloutSkipConfig(Section):
    """``skip.rollout``: the training step's generation is dumped on its listed steps, and loaded instead of
    generated when a dump is there (rlcore.controller.rollout_skip)."""

    #: true: dump and replay the generated batches of ``steps``
    enable: bool = False
    #: the dumps go under DIR/EXPERIMENT_PROJECT/GBS{gbs}_N{n}_in{prompt}_out{response}/STEP (``~`` expanded)
    dump_dir: str = "~/.verl/rollout_dump"
    #: the training steps (1-based) whose generation is dumped or replayed; other steps generate as usual
    steps: list[int] = field(default_factory=list)
    #: cache: replay the step's own dump, else generate and dump it | repeat: the step's dump, else the nearest
    #: earlier one, else the nearest later one
    action: str = "cache"


@dataclass(frozen=True)
class SkipConfig(Section):
    """``skip``: verl's SkipManager (only its ``rollout`` role: rlcore's synchronous trainer)."""

    PATH = "skip"
    #: the training step's generation
    rollout: RolloutSkipConfig = field(default_factory=RolloutSkipConfig)
