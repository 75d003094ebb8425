"""Whether a run resumes the checkpoint it found, or starts afresh because that checkpoint is finished.

``rlcore run`` and ``rlcore sft`` share the rule, so that repeating a command just works: a checkpoint that
already reached the run's last step is not resumed by ``trainer.resume_mode=auto`` (the run starts afresh
and says so); named by ``resume_path``, it stops the run with a message that says how to train on.
"""

from __future__ import annotations

from pathlib import Path

import click

from rlcore.errors import RLCoreError


def unfinished_checkpoint(path: Path, step: int, total_steps: int, resume_mode: str) -> Path | None:
    """``path`` (a checkpoint of ``step``) when the run of ``total_steps`` has steps left after it; None,
    after saying so, when it is finished and the run found it by itself (``resume_mode`` ``auto``).

    Raises :class:`RLCoreError` for a finished checkpoint the run was told to resume.
    """
    if step < total_steps:
        return path
    if resume_mode == "auto":
        click.echo(
            f"the newest checkpoint, {path}, is at step {step} of the run's {total_steps}: nothing is left to "
            "train from it, so this is a fresh run (trainer.resume_mode=disable says so explicitly; a higher "
            "trainer.total_training_steps trains on from it)"
        )
        return None
    raise RLCoreError(
        f"nothing left to train: the checkpoint {path} is at step {step} and the run has {total_steps} steps; "
        "raise trainer.total_training_steps (or trainer.total_epochs) to train on, or set "
        "trainer.resume_mode=disable to start over"
    )
