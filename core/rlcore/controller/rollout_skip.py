"""verl's ``skip.rollout`` (RolloutSkip): the training step's generated batch is dumped on the listed steps and,
on a later run, loaded instead of generated.

The dumps go to ``dump_dir/{experiment_name}_{project_name}/GBS{gbs}_N{n}_in{prompt}_out{response}/{step}/``
as verl lays them out: ``gen_batch.dp`` (the batch the rollout returned, pickled with torch) and ``meta.json``.
A step whose batch filters ask for more generation rounds dumps round ``r > 1`` as ``gen_batch.{r}.dp``.
``action=cache`` replays a step's own dump; ``repeat`` the step's, else the nearest earlier step's, else the
nearest later one's. A step without a dump generates and writes one. Only the training generation is replayed
(not validation, not ReMax's greedy baseline).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from rlcore.api.batch import Batch
from rlcore.config.schema import Sections

log = logging.getLogger(__name__)

META = "meta.json"


def batch_file(round_: int) -> str:
    """The file of generation round ``round_`` (1-based) in a step's directory."""
    return "gen_batch.dp" if round_ == 1 else f"gen_batch.{round_}.dp"


class RolloutSkip:
    """The dump directory of one run's settings, and the replay-or-generate rule of ``skip.rollout``."""

    def __init__(self, sections: Sections) -> None:
        section = sections.skip.rollout
        data, trainer = sections.data, sections.trainer
        gbs = data.gen_batch_size or data.train_batch_size
        n = sections.actor_rollout_ref.rollout.n
        shape = f"GBS{gbs}_N{n}_in{data.max_prompt_length}_out{data.max_response_length}"
        self.root = Path(os.path.expanduser(section.dump_dir)).resolve()
        self.project_dir = self.root / f"{trainer.experiment_name}_{trainer.project_name}" / shape
        self.steps = frozenset(int(step) for step in section.steps)
        self.action = section.action

    @classmethod
    def from_sections(cls, sections: Sections) -> RolloutSkip | None:
        """The cache of ``skip.rollout``, or None when it is off."""
        return cls(sections) if sections.skip.rollout.enable else None

    def _valid(self, step: int) -> bool:
        directory = self.project_dir / str(step)
        return (directory / batch_file(1)).is_file() and (directory / META).is_file()

    def _source_step(self, step: int) -> int | None:
        """The step whose dump replaces ``step``'s generation (``action`` rule), or None."""
        if self._valid(step):
            return step
        if self.action != "repeat" or not self.project_dir.is_dir():
            return None
        available = sorted(
            int(child.name)
            for child in self.project_dir.iterdir()
            if child.name.isdigit() and self._valid(int(child.name))
        )
        earlier = [s for s in available if s < step]
        later = [s for s in available if s > step]
        return earlier[-1] if earlier else later[0] if later else None

    def generate(self, step: int, round_: int, generate: Callable[[], Batch]) -> Batch:
        """``step``'s batch of generation round ``round_``: loaded from a dump when the rule finds one, else
        ``generate()``d and, on a listed step, dumped."""
        if step not in self.steps:
            return generate()
        source = self._source_step(step)
        path = None if source is None else self.project_dir / str(source) / batch_file(round_)
        if path is not None and path.is_file():
            import torch

            log.info(
                "skip.rollout: step %d round %d loads the generation dumped at step %d: %s", step, round_, source, path
            )
            batch: Batch = torch.load(path, weights_only=False)
            return batch
        batch = generate()
        self._dump(step, round_, batch)
        return batch

    def _dump(self, step: int, round_: int, batch: Batch) -> None:
        import torch

        directory = self.project_dir / str(step)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / batch_file(round_)
        partial = path.with_name(path.name + ".partial")
        torch.save(batch, partial)
        partial.replace(path)
        (directory / META).write_text(json.dumps({"global_steps": step, "rounds": round_}))
        log.info("skip.rollout: step %d round %d's generation dumped to %s", step, round_, path)
