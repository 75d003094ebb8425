"""The end of a run, whatever ends it: ``summary.json`` with its status, a non-zero exit for a failure, and
the checkpoint folder's lock released.

:func:`guarded_fit` is the last part of ``rlcore run``: it locks ``trainer.default_local_dir``
(:mod:`rlcore.checkpoint.lock`), builds the trainer, chooses what to resume and reads the data
(:meth:`~rlcore.controller.trainer.Trainer.prepare`), makes the run directory and trains. A start-up error
before the run directory exists leaves nothing behind. Once it exists, however the run ends — completed,
stopped by SIGINT/SIGTERM (after its grace period, even with the main thread stuck: see
:mod:`rlcore.graceful_stop`), a user error, user code calling ``sys.exit()``, a bug — the summary is
written with its status, and only a completed run returns normally. The controller is the child subreaper of
its descendants for the whole run, and the processes that user code started and left running are killed
when training ends, however it ends (:mod:`rlcore.child_processes`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from rlcore.checkpoint.lock import lock_checkpoint_folder
from rlcore.child_processes import become_subreaper, kill_leftovers
from rlcore.config.sections.trainer import TrainerConfig
from rlcore.controller.health import HealthStop
from rlcore.errors import RLCoreError
from rlcore.plugins import PluginManager
from rlcore.run_context import RunContext
from rlcore.usercode import EXIT_EXCEPTIONS, exit_error, is_stop_signal

if TYPE_CHECKING:
    from rlcore.controller.components import RunComponents

#: ``summarise(last_metrics, status)``: print the run's end and write ``summary.json``
Summarise = Callable[[dict[str, Any], str], None]
#: ``print_kept(abandoned)``: after a stop signal, say which steps and checkpoint were kept
PrintKept = Callable[[bool], None]


class RunInterrupted(SystemExit):
    """A run stopped by SIGINT/SIGTERM after its summary was written; exits with ``128 + signal``."""


def _summarise_failure(summarise: Summarise, last: dict[str, Any], status: str) -> None:
    """Write the summary of a run that failed; a failure to write it is printed, never raised over the
    run's own error."""
    try:
        summarise(last, status)
    except Exception as exc:  # noqa: BLE001 - e.g. the run directory's disk is full: the run's error comes first
        click.echo(f"warning: the run's summary could not be written ({type(exc).__name__}: {exc})", err=True)


def _outcome(exc: BaseException, stop: Any) -> tuple[BaseException, str, bool]:
    """What ends a run that raised ``exc`` (``stop``: its :class:`~rlcore.graceful_stop.StopRequest`, None
    before the trainer exists): the exception to raise, the status for ``summary.json``, and whether a stop
    signal abandoned the step in progress."""
    signalled = isinstance(exc, KeyboardInterrupt) and (stop.caused(exc) if stop else is_stop_signal(exc))
    if signalled:
        signum = (stop.signum if stop else None) or signal.SIGINT
        return RunInterrupted(128 + signum), f"interrupted by {signal.Signals(signum).name}", True
    error = exit_error(exc, "user code") if isinstance(exc, EXIT_EXCEPTIONS) else exc
    if isinstance(error, HealthStop):  # a monitor's action=stop: exit status 2 like any RLCoreError
        return error, f"stopped: {error}", False
    described = str(error) if isinstance(error, RLCoreError) else f"{type(error).__name__}: {error}"
    return error, f"failed: {described}", False


def fit_to_the_end(trainer: Any, summarise: Summarise, print_kept: PrintKept) -> dict[str, Any]:
    """Train ``trainer`` (its ``fit()``, ``stop`` and ``last``: ``rlcore run``'s and ``rlcore sft``'s trainers)
    once the run directory exists, and end the run however it ends: ``summary.json`` written with the status
    (also by the stop watchdog when the main thread is stuck), the steps and checkpoint kept printed after a
    stop signal, the processes that user code left running killed. Returns the last metrics of a completed
    run.

    Raises :class:`RunInterrupted` (exit status 143 or 130) after a stop signal, the :class:`RLCoreError` of a
    user error (a :class:`~rlcore.usercode.UserCodeExit` naming the line when user code raised ``SystemExit``
    or its own ``KeyboardInterrupt``), or the exception of a bug.
    """

    def overdue() -> None:
        """The stop watchdog's last resort: the main thread is stuck, the process is about to end."""
        summarise(trainer.last, f"interrupted by {trainer.stop.name} (the step in progress was abandoned)")
        print_kept(True)

    trainer.stop.on_overdue = overdue
    try:
        try:
            last = trainer.fit()
        finally:
            kill_leftovers()
    except BaseException as exc:
        error, status, signalled = _outcome(exc, trainer.stop)
        _summarise_failure(summarise, trainer.last, status)
        if signalled:
            print_kept(True)
        if error is exc:
            raise
        raise error from None
    if trainer.stop.requested:
        summarise(last, f"interrupted by {trainer.stop.name}")
        print_kept(False)
        raise RunInterrupted(128 + int(trainer.stop.signum or 0))
    summarise(last, "completed")
    return last


def guarded_fit(
    config: Any,
    run: RunContext,
    manager: PluginManager,
    components: RunComponents,
    *,
    open_run_dir: Callable[[], None],
    summarise: Summarise,
    print_kept: PrintKept,
) -> dict[str, Any]:
    """Train the run and return its last metrics; see the module docstring. The trainer receives ``components``
    (what :func:`rlcore.run.check_components` resolved). ``open_run_dir()`` makes the run directory (and sets
    ``run.run_dir``) once start-up has succeeded; then :func:`fit_to_the_end` trains.

    Raises what :func:`fit_to_the_end` raises; a start-up error (before the run directory exists) is raised the
    same way, without a summary.
    """
    from rlcore.controller.trainer import Trainer

    lock = None
    become_subreaper()  # a daemon that user code starts stays among the run's descendants, to be killed
    try:
        try:
            assert run.identity is not None  # RunContext gives every run one
            lock = lock_checkpoint_folder(TrainerConfig.from_tree(config), run.identity)
            trainer = Trainer(config, run, manager, components)
            trainer.prepare()
            open_run_dir()
            run.identity.run_dir = str(run.run_dir)
            if lock is not None:
                lock.record(run.identity)
        except BaseException as exc:
            error, _, _ = _outcome(exc, None)
            if error is exc:
                raise
            raise error from None
        return fit_to_the_end(trainer, summarise, print_kept)
    finally:
        if lock is not None:
            lock.release()
