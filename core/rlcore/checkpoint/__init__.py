"""Checkpoints that resume exactly: atomic ``global_step_N`` folders, rotation, and the resume choice.

The controller's :meth:`rlcore.controller.trainer.Trainer.save_checkpoint` calls
:meth:`CheckpointManager.save` with a function that makes the workers and the controller write their parts;
at start-up :func:`resume_path` picks the folder to continue from (``trainer.resume_mode``). A run owns its
folder: :mod:`rlcore.checkpoint.lock` keeps a second run out, :func:`claim_checkpoints` and ``run.json``
(:mod:`rlcore.checkpoint.ownership`) keep a run from replacing another lineage's checkpoints.
"""

from __future__ import annotations

from rlcore.checkpoint.manager import (
    CHECKSUMS_FILE,
    CRASH_ENV,
    LATEST_FILE,
    RESUME_MODES,
    ROLLOUT_STATE_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    CheckpointManager,
    checkpoint_step,
    claim_checkpoints,
    read_rollout_states,
    read_trainer_state,
    resume_path,
    saves_checkpoints,
    verify_checkpoint,
    write_checksums,
    write_rollout_states,
    write_trainer_state,
)
from rlcore.checkpoint.ownership import RUN_FILE, RunIdentity

__all__ = [
    "CHECKSUMS_FILE",
    "CRASH_ENV",
    "LATEST_FILE",
    "RESUME_MODES",
    "ROLLOUT_STATE_FILE",
    "RUN_FILE",
    "TRAINER_STATE_FILE",
    "CheckpointError",
    "CheckpointManager",
    "RunIdentity",
    "checkpoint_step",
    "claim_checkpoints",
    "read_rollout_states",
    "read_trainer_state",
    "resume_path",
    "saves_checkpoints",
    "verify_checkpoint",
    "write_checksums",
    "write_rollout_states",
    "write_trainer_state",
]
