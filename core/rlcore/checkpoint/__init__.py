"""Checkpoints that resume exactly: atomic ``global_step_N`` folders, rotation, and the resume choice.

The controller's :meth:`rlcore.controller.trainer.Trainer.save_checkpoint` calls
:meth:`CheckpointManager.save` with a function that makes the workers and the controller write their parts;
at start-up :func:`resume_path` picks the folder to continue from (``trainer.resume_mode``).
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
    read_rollout_states,
    read_trainer_state,
    resume_path,
    verify_checkpoint,
    write_checksums,
    write_rollout_states,
    write_trainer_state,
)

__all__ = [
    "CHECKSUMS_FILE",
    "CRASH_ENV",
    "LATEST_FILE",
    "RESUME_MODES",
    "ROLLOUT_STATE_FILE",
    "TRAINER_STATE_FILE",
    "CheckpointError",
    "CheckpointManager",
    "checkpoint_step",
    "read_rollout_states",
    "read_trainer_state",
    "resume_path",
    "verify_checkpoint",
    "write_checksums",
    "write_rollout_states",
    "write_trainer_state",
]
