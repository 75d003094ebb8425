"""Atomic checkpoint folders under ``trainer.default_local_dir``, rotation, and the choice of what to resume.

Layout::

    <default_local_dir>/
      latest_checkpointed_iteration.txt     N of the newest complete checkpoint (replaced atomically)
      global_step_N/                        a complete checkpoint (only ever created by a rename)
        actor/ critic/                      the workers' parts (see the training backend)
        trainer_state.json                  the controller's part (step, data loader, KL coefficient)
        run.json                            the run that wrote it and its lineage (see ownership.py)
        checksums.json                      size and SHA-256 of every other file, written last
      global_step_M.tmp-<id>/               a checkpoint being written, or left half-written by a crash
      previous/<time>-<lineage>/            another run's checkpoints, moved aside by a fresh run

A checkpoint is written into a ``*.tmp-*`` folder, flushed to disk (``fsync``), renamed to
``global_step_N`` and only then named in ``latest_checkpointed_iteration.txt``. A crash at any moment
therefore leaves either the previous complete checkpoint or the new one, never a half-written folder that
looks complete. The ``*.tmp-*`` folders are ignored when choosing what to resume and deleted by an
``auto`` resume.

Before a checkpoint is resumed, :func:`verify_checkpoint` compares every file with ``checksums.json``; an
``auto`` resume falls back to the newest intact checkpoint (with a warning naming the bad file), a
``resume_path`` resume stops with an error naming it. A disk that fills up (or turns read-only, or a file that
reaches the file-size limit) anywhere in a save is reported as such (:func:`rlcore.checkpoint.disk.disk_problem`); the previous checkpoint is left as it
was.

A save given the run's :class:`~rlcore.checkpoint.ownership.RunIdentity` records it in ``run.json`` and never
replaces a ``global_step_N`` of another lineage. Before any model loads, :func:`claim_checkpoints` moves another
lineage's checkpoints aside for a fresh run (``previous/``), and refuses a run that resumes a checkpoint from
elsewhere into a folder holding them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
import signal
import sys
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from rlcore.checkpoint.disk import disk_problem, exception_chain, last_written
from rlcore.checkpoint.ownership import RunIdentity, describe_writer, read_run_record, write_run_record
from rlcore.config.sections.trainer import TrainerConfig
from rlcore.errors import RLCoreError

log = logging.getLogger(__name__)

#: the file naming the step of the newest complete checkpoint
LATEST_FILE = "latest_checkpointed_iteration.txt"
#: the controller's part of a checkpoint
TRAINER_STATE_FILE = "trainer_state.json"
#: split placement: the rollout-only ranks' engine states (they write no checkpoint of their own)
ROLLOUT_STATE_FILE = "rollout_state.pkl"
#: the file listing the size and SHA-256 of every other file of a checkpoint
CHECKSUMS_FILE = "checksums.json"
#: the subfolder where a fresh run moves another run's checkpoints (see :func:`claim_checkpoints`)
PREVIOUS_DIR = "previous"
#: the values of ``trainer.resume_mode``
RESUME_MODES: tuple[str, ...] = ("auto", "disable", "resume_path")
#: test seam: ``RLCORE_TEST_CRASH_IN_SAVE=N`` makes the process SIGKILL itself while saving step N, after the
#: workers and the controller wrote their parts and before the folder is renamed (see :meth:`CheckpointManager.save`)
CRASH_ENV = "RLCORE_TEST_CRASH_IN_SAVE"

_STEP_DIR = re.compile(r"global_step_(\d+)")
_TMP_NAME = re.compile(r"(global_step_\d+|latest_checkpointed_iteration\.txt)\.tmp-.+")


class CheckpointError(RLCoreError):
    """A checkpoint setting or folder is wrong; the message names the config key or the path."""


def checkpoint_step(path: str | Path) -> int | None:
    """N for a folder named ``global_step_N``, else None."""
    match = _STEP_DIR.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def _fsync_tree(root: Path) -> None:
    """Flush every file and folder under ``root`` (and ``root`` itself) to disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_checksums(folder: Path) -> None:
    """Record the size and SHA-256 of every file under ``folder`` in ``folder/checksums.json``."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS_FILE)
    table = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (folder / CHECKSUMS_FILE).write_text(json.dumps(table, indent=1))


def _check_table_shape(folder: Path, table: Any) -> None:
    """Raise :class:`CheckpointError` unless ``table`` maps file names to ``{"size": int, "sha256": str}``,
    as :func:`write_checksums` writes it (valid JSON of another shape is a damaged file too)."""
    if not isinstance(table, dict):
        raise CheckpointError(
            f"checkpoint {folder}: {CHECKSUMS_FILE} is damaged (it holds {json.dumps(table)[:60]}, not a table of "
            "files)"
        )
    for name, entry in table.items():
        inside = not Path(name).is_absolute() and ".." not in Path(name).parts
        size = entry.get("size") if isinstance(entry, dict) and inside else None
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or not isinstance(digest, str):
            raise CheckpointError(
                f"checkpoint {folder}: {CHECKSUMS_FILE} is damaged (its entry {name!r}: {json.dumps(entry)[:80]} is not "
                "a file of the checkpoint with a size and a sha256)"
            )


def verify_checkpoint(folder: Path) -> bool:
    """Check every file of a checkpoint against its ``checksums.json``; True when verified, False when the
    checkpoint has no checksums (written before rlcore recorded them: it is logged and accepted).

    Raises :class:`CheckpointError` naming the checkpoint and the first file that is missing, truncated or
    changed, or saying that ``checksums.json`` is damaged (not JSON, or JSON of another shape than
    :func:`write_checksums` writes).
    """
    table_file = folder / CHECKSUMS_FILE
    if not table_file.is_file():
        log.warning("checkpoint %s has no %s: its files cannot be verified", folder, CHECKSUMS_FILE)
        return False
    try:
        table = json.loads(table_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"checkpoint {folder}: {CHECKSUMS_FILE} is damaged ({exc})") from exc
    _check_table_shape(folder, table)
    for name, expected in table.items():
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint {folder}: file {name} is missing")
        size = path.stat().st_size
        if size != expected["size"]:
            what = "truncated" if size < expected["size"] else "longer than it was written"
            raise CheckpointError(f"checkpoint {folder}: file {name} is {what} ({size} of {expected['size']} bytes)")
        if _sha256(path) != expected["sha256"]:
            raise CheckpointError(
                f"checkpoint {folder}: file {name} is damaged (its SHA-256 does not match the one "
                f"recorded when it was written)"
            )
    return True


def _disk_error(
    why: str, exc: BaseException, step: int, root: Path, previous: Path | None, last: str | None
) -> CheckpointError:
    """A one-line error for a save that failed on the disk: what was wrong, the file written last, what was kept."""
    kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
    where = f"; the last file written was {last}" if last else ""
    detail = (str(exc).strip().splitlines() or [""])[0][:200]
    return CheckpointError(
        f"cannot save the checkpoint of step {step} in {root} (trainer.default_local_dir): {why} "
        f"[{type(exc).__name__}: {detail}]{where}; {kept}"
    )


def saves_checkpoints(trainer: TrainerConfig) -> bool:
    """Whether a run writes checkpoints (``trainer.save_freq > 0`` or ``trainer.save_on_signal``)."""
    return trainer.save_freq > 0 or bool(trainer.save_on_signal)


def _crash_if_asked(step: int) -> None:
    """The test seam :data:`CRASH_ENV`: SIGKILL this process while saving the step it names."""
    value = os.environ.get(CRASH_ENV)
    if value and int(value) == step:
        print(
            f"{CRASH_ENV}={value}: killing the process in the middle of saving step {step}", file=sys.stderr, flush=True
        )
        os.kill(os.getpid(), signal.SIGKILL)


def _keep_count(trainer: TrainerConfig) -> int | None:
    """How many complete checkpoints to keep: the smaller of the ``max_*_ckpt_to_keep`` keys that are set
    (a checkpoint folder is kept or deleted whole); None (or 0) keeps all."""
    counts = []
    for key in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep"):
        value = getattr(trainer, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(f"trainer.{key} must be null or a non-negative integer, got {value!r}")
        if value > 0:
            counts.append(value)
    return min(counts) if counts else None


class CheckpointManager:
    """Saves checkpoints atomically under ``trainer.default_local_dir``, rotates them and finds the latest.

    Args:
        trainer: the run's ``trainer`` section; reads ``default_local_dir``, ``max_actor_ckpt_to_keep`` and
            ``max_critic_ckpt_to_keep``.
        identity: the saving run; its record goes into each checkpoint (``run.json``), and a checkpoint of
            another lineage is never replaced. None: no record, no check.
    """

    def __init__(self, trainer: TrainerConfig, identity: RunIdentity | None = None) -> None:
        if not trainer.default_local_dir:
            raise CheckpointError("trainer.default_local_dir is not set: checkpoints need a folder")
        self.root = Path(trainer.default_local_dir)
        self.keep = _keep_count(trainer)
        self.identity = identity

    def step_dir(self, step: int) -> Path:
        """The folder of the checkpoint of ``step`` (whether or not it exists)."""
        return self.root / f"global_step_{step}"

    def complete(self) -> list[tuple[int, Path]]:
        """The complete checkpoints as ``(step, folder)``, oldest step first."""
        if not self.root.is_dir():
            return []
        found = [(checkpoint_step(p), p) for p in self.root.iterdir() if p.is_dir()]
        return sorted((step, path) for step, path in found if step is not None)

    def incomplete(self) -> list[Path]:
        """The ``global_step_N.tmp-*`` folders (checkpoints being written, or left half-written by a crash)
        and ``latest_checkpointed_iteration.txt.tmp-*`` files."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _TMP_NAME.fullmatch(p.name))

    def remove_incomplete(self) -> list[Path]:
        """Delete what :meth:`incomplete` lists (call it only when no other process is saving here)."""
        removed = self.incomplete()
        for path in removed:
            log.warning("deleting %s, left incomplete by an interrupted checkpoint save", path)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return removed

    def set_aside(self, folders: list[Path]) -> Path:
        """Move the checkpoint ``folders`` (and ``latest_checkpointed_iteration.txt``) into a new
        ``previous/<time>-<lineage>/`` folder of the root, where resume and rotation never look; returns it.
        Renames within one file system: nothing is copied.

        All or nothing: when a move fails (a folder that may not be moved, ``EPERM``/``EACCES``), what was
        moved goes back, the new folders are removed, and a :class:`CheckpointError` names the folder, the
        reason and, should a move back fail too, where the moved folders are."""
        record = read_run_record(folders[-1]) or {}
        label = f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{record.get('lineage', 'unrecorded')}"
        previous = self.root / PREVIOUS_DIR
        aside = previous / label
        made = [path for path in (previous, aside) if not path.exists()]
        pointer = self.root / LATEST_FILE
        moving = [*folders, *([pointer] if pointer.exists() else [])]
        moved: list[Path] = []
        current = aside
        try:
            aside.mkdir(parents=True)
            for current in moving:
                os.rename(current, aside / current.name)
                moved.append(current)
        except OSError as exc:
            raise self._undo_set_aside(exc, current, aside, moved, made) from exc
        _fsync_dir(self.root)
        return aside

    def _undo_set_aside(
        self, exc: OSError, failed: Path, aside: Path, moved: list[Path], made: list[Path]
    ) -> CheckpointError:
        """After :meth:`set_aside` failed to move ``failed``: move ``moved`` back, remove the folders it
        ``made`` (when empty), and return the one-line error."""
        stuck = []
        for path in reversed(moved):
            try:
                os.rename(aside / path.name, path)
            except OSError:
                stuck.append(path.name)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                if folder.exists():  # not empty: what could not be moved back is there
                    break
        if stuck:
            where = f"{', '.join(stuck)} could not be moved back and are in {aside}"
        elif moved:
            where = f"{', '.join(path.name for path in moved)}, moved before it, went back: nothing was moved"
        else:
            where = "nothing was moved"
        what = f"make {aside}" if failed == aside else f"move {failed} into {aside}"
        return CheckpointError(
            f"cannot {what} ({exc.strerror or exc}): {self.root} (trainer.default_local_dir) holds checkpoints of "
            f"another run, which this fresh run moves aside; {where}. Give this run its own folder (another "
            "trainer.experiment_name, or trainer.default_local_dir), or move those checkpoints yourself"
        )

    def latest(self) -> Path | None:
        """The checkpoint named by ``latest_checkpointed_iteration.txt``, else the newest complete one.

        When the file names a folder that does not exist (deleted by hand, or never renamed into place) or
        cannot be read, the newest complete ``global_step_N`` is used and a warning says so. None when there
        is no complete checkpoint.
        """
        complete = self.complete()
        pointer = self.root / LATEST_FILE
        if pointer.is_file():
            text = pointer.read_text().strip()
            if text.isdigit() and self.step_dir(int(text)).is_dir():
                return self.step_dir(int(text))
            fallback = complete[-1][1].name if complete else "none"
            log.warning(
                "%s names %r, which is not a checkpoint folder in %s; newest complete checkpoint: %s",
                pointer,
                text,
                self.root,
                fallback,
            )
        return complete[-1][1] if complete else None

    def save(self, step: int, write_fn: Callable[[Path], None]) -> Path:
        """Write the checkpoint of ``step`` with ``write_fn`` and publish it atomically; returns its folder.

        ``write_fn(folder)`` writes every part into a fresh ``global_step_N.tmp-<id>`` folder; the run's record
        (``run.json``, with an identity) and the checksums of its files (``checksums.json``) are added. The
        folder is then flushed to disk, renamed to ``global_step_N`` (replacing an older folder of that step
        of the same lineage; one of another lineage is an error), and only then
        ``latest_checkpointed_iteration.txt`` is replaced (write a temporary file, ``os.replace``). Finally
        complete checkpoints of earlier steps beyond the keep count are deleted. If ``write_fn`` raises, the
        temporary folder is removed and the error propagates; a disk problem anywhere (full, over quota,
        read-only, a file at the file-size limit, in whatever exception the writer wraps it) and any ``OSError`` become a
        :class:`CheckpointError` that says what happened, the file written last and what was kept. All workers
        must see the same file system (a multi-node run needs a shared ``default_local_dir``).
        """
        final = self.step_dir(step)
        self._check_replace(final)
        previous = self.latest()
        tmp = self.root / f"{final.name}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            write_fn(tmp)
            if self.identity is not None:
                write_run_record(tmp, self.identity)
            write_checksums(tmp)
            _crash_if_asked(step)
            _fsync_tree(tmp)
        except (KeyboardInterrupt, SystemExit):
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except BaseException as exc:  # torch.distributed.checkpoint's CheckpointException is a BaseException
            self._fail(exc, step, previous, tmp)
        replaced = None
        try:
            if final.exists():
                replaced = self.root / f"{final.name}.tmp-replaced-{uuid.uuid4().hex[:12]}"
                os.rename(final, replaced)
            os.rename(tmp, final)
            _fsync_dir(self.root)
            self._write_latest(step)
        except OSError as exc:
            why = disk_problem(exc, self.root) or exc.strerror or str(exc)
            raise _disk_error(why, exc, step, self.root, previous, None) from exc
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
        self._rotate(step)
        return final

    def _check_replace(self, final: Path) -> None:
        """Refuse to replace a checkpoint of another lineage than this manager's run's."""
        if self.identity is None or not final.is_dir():
            return
        if not self.identity.owns(final):
            raise CheckpointError(
                f"{final} was written by {describe_writer(read_run_record(final))}, not by a run this one continues: it is not replaced. Give this "
                "run its own folder (another trainer.experiment_name, or trainer.default_local_dir), or resume that "
                "checkpoint (trainer.resume_mode)"
            )

    def _fail(self, exc: BaseException, step: int, previous: Path | None, tmp: Path) -> NoReturn:
        """A save failed with ``exc``: remove the temporary folder and raise (a stop signal's
        ``KeyboardInterrupt`` or a ``SystemExit`` that a writer wrapped, such as a second SIGTERM inside
        ``torch.distributed.checkpoint``, unwrapped, so that the run ends as interrupted; a disk problem or an
        ``OSError`` as a :class:`CheckpointError`; anything else as it is). The disk is looked at before the
        folder goes."""
        ending = next((e for e in exception_chain(exc) if isinstance(e, (KeyboardInterrupt, SystemExit))), None)
        if ending is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ending from None
        why = disk_problem(exc, self.root, tmp)
        last = last_written(tmp) if tmp.is_dir() else None
        shutil.rmtree(tmp, ignore_errors=True)
        if why is None and isinstance(exc, OSError):
            why = exc.strerror or str(exc)
        if why is None:
            raise exc
        raise _disk_error(why, exc, step, self.root, previous, last) from exc

    def _write_latest(self, step: int) -> None:
        """Replace ``latest_checkpointed_iteration.txt`` atomically with ``step``."""
        pointer = self.root / LATEST_FILE
        tmp = pointer.with_name(f"{LATEST_FILE}.tmp-{uuid.uuid4().hex[:12]}")
        with open(tmp, "w") as handle:
            handle.write(str(step))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, pointer)
        _fsync_dir(self.root)

    def _rotate(self, step: int) -> None:
        """Keep the newest ``keep`` checkpoints up to ``step``; later steps (another run's) are left alone."""
        if self.keep is None:
            return
        older = [path for s, path in self.complete() if s <= step]
        for path in older[: max(len(older) - self.keep, 0)]:
            shutil.rmtree(path, ignore_errors=True)


def resume_path(trainer: TrainerConfig) -> Path | None:
    """The checkpoint folder a run resumes from, by ``trainer.resume_mode``; None to start fresh.

    - ``auto``: the checkpoint named by ``latest_checkpointed_iteration.txt`` in ``trainer.default_local_dir``
      (see :meth:`CheckpointManager.latest`), None when there is none. Half-written ``*.tmp-*`` folders are
      ignored and deleted. A checkpoint that fails :func:`verify_checkpoint` is skipped with a warning for
      the newest intact one (an error when none is intact). ``trainer.resume_from_path`` must not be set (it would be ignored).
    - ``disable``: None.
    - ``resume_path``: ``trainer.resume_from_path``, which must be an existing, intact ``global_step_N`` folder.

    Raises :class:`CheckpointError` naming the key at fault.
    """
    mode = trainer.resume_mode
    from_path = trainer.resume_from_path
    if mode not in RESUME_MODES:
        raise CheckpointError(f"trainer.resume_mode must be one of {', '.join(RESUME_MODES)}, got {mode!r}")
    if mode == "disable":
        return None
    if mode == "resume_path":
        if not from_path:
            raise CheckpointError(
                "trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N folder)"
            )
        path = Path(from_path)
        if checkpoint_step(path) is None:
            raise CheckpointError(
                f"trainer.resume_from_path={str(from_path)!r} must name a global_step_N checkpoint folder"
            )
        if not path.is_dir():
            raise CheckpointError(f"trainer.resume_from_path={str(from_path)!r}: no such checkpoint folder")
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            raise CheckpointError(
                f"{exc}; resume from another checkpoint (trainer.resume_from_path) or set "
                "trainer.resume_mode=auto to take the newest intact one"
            ) from exc
        return path
    if from_path:
        raise CheckpointError(
            f"trainer.resume_from_path={str(from_path)!r} is set but trainer.resume_mode=auto ignores it; "
            "set trainer.resume_mode=resume_path to resume from it"
        )
    manager = CheckpointManager(trainer)
    manager.remove_incomplete()
    latest = manager.latest()
    if latest is None:
        return None
    candidates = [latest] + [path for _, path in reversed(manager.complete()) if path != latest]
    damaged = []
    for path in candidates:
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            damaged.append(str(exc))
            continue
        if damaged:
            log.warning("%s; resuming from the newest intact checkpoint, %s", "; ".join(damaged), path)
        return path
    raise CheckpointError(
        f"every checkpoint in {manager.root} is damaged ({'; '.join(damaged)}); "
        "start over in another folder (trainer.resume_mode=disable with another trainer.experiment_name or "
        "trainer.default_local_dir)"
    )


def claim_checkpoints(
    trainer: TrainerConfig, identity: RunIdentity, resume_from: Path | None, *, saves: bool | None = None
) -> None:
    """Make ``identity`` continue the lineage of the checkpoint it resumes (``resume_from``); then, when the run
    saves checkpoints (``saves``; by default :func:`saves_checkpoints`) and ``trainer.default_local_dir``
    holds complete checkpoints of another lineage, which its saves would replace or mix with:

    - a fresh run (``resume_from`` None: the folder was new, ``resume_mode=disable``, or its newest checkpoint
      had already finished its run) moves them aside, into ``previous/<time>-<lineage>/`` in the same folder,
      and says so: repeating a command starts afresh and loses nothing;
    - a run resuming a checkpoint from elsewhere stops with a :class:`CheckpointError` naming the first such
      checkpoint and the run that wrote it.

    Call it before any model loads, holding the folder's lock.
    """
    if resume_from is not None:
        identity.adopt(resume_from)
    if not (saves_checkpoints(trainer) if saves is None else saves):
        return
    manager = CheckpointManager(trainer)
    foreign = [path for _, path in manager.complete() if not identity.owns(path)]
    if not foreign:
        return
    writer = describe_writer(read_run_record(foreign[-1]))
    if resume_from is None:
        aside = manager.set_aside(foreign)
        click.echo(
            f"{manager.root} (trainer.default_local_dir) held {len(foreign)} checkpoint(s) of another run "
            f"({writer}); this fresh run moved them to {aside}, so its own saves replace nothing"
        )
        return
    more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
    raise CheckpointError(
        f"trainer.default_local_dir={manager.root} holds {foreign[0].name}{more}, written by {writer}; this run "
        f"resumes from {resume_from} and its checkpoints would replace or mix with those. Give this run its own "
        "folder (another trainer.experiment_name, or trainer.default_local_dir), resume those checkpoints "
        "(trainer.resume_mode=auto), or delete them"
    )


def write_trainer_state(folder: Path, state: Mapping[str, Any]) -> None:
    """Write the controller's part of a checkpoint as ``folder/trainer_state.json``."""
    (folder / TRAINER_STATE_FILE).write_text(json.dumps(dict(state), indent=2))


def read_trainer_state(folder: Path) -> dict[str, Any]:
    """Read ``folder/trainer_state.json``; an error names the file when it is missing or broken."""
    file = Path(folder) / TRAINER_STATE_FILE
    if not file.is_file():
        raise CheckpointError(f"{folder} is not a complete checkpoint: it has no {TRAINER_STATE_FILE}")
    try:
        state = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(state, dict) or "global_step" not in state:
        raise CheckpointError(f"{file} has no global_step")
    return state


def write_rollout_states(folder: Path, states: list[Any]) -> None:
    """Write the rollout-only ranks' engine states (``rollout_state()`` of each rank, in rank order) as
    ``folder/rollout_state.pkl``: with split placement those ranks hold the sampling state a resume needs."""
    (folder / ROLLOUT_STATE_FILE).write_bytes(pickle.dumps(list(states), protocol=pickle.HIGHEST_PROTOCOL))


def read_rollout_states(folder: Path) -> list[Any] | None:
    """What :func:`write_rollout_states` wrote into ``folder``; None when the checkpoint has none (a run with
    colocated placement). An error names the file when it cannot be read."""
    file = Path(folder) / ROLLOUT_STATE_FILE
    if not file.is_file():
        return None
    try:
        states = pickle.loads(file.read_bytes())  # noqa: S301 - the run's own checkpoint, like its torch files
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise CheckpointError(f"{file}: cannot read the rollout engines' state ({type(exc).__name__}: {exc})") from exc
    if not isinstance(states, list):
        raise CheckpointError(f"{file} does not hold a list of rollout engine states")
    return states
