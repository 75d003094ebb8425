"""Start the ranks of a test's gloo group from a fork server that has imported torch, transformers and rlcore once.

``torch.multiprocessing.spawn`` starts every rank as a fresh interpreter that imports torch, transformers, rlcore
and the engine again (seconds of CPU per rank). :func:`spawn` forks each rank from multiprocessing's fork server
instead (one per process: a pytest worker starts it on its first :func:`spawn`), which imported
:data:`BASE_PRELOAD`, every training backend's module and every ``rlcore`` entry point's module before forking::

    from rlcore_testkit.ranks import spawn

    spawn(run_rank, args=(world_size, store_file, str(model_dir)), nprocs=world_size)

A job that needs more (megatron-core) names it in ``preload``: a server started without it is stopped and
started again with it, once per process, so that a process running only other jobs never pays for importing it.

A rank gets what ``spawn`` would give it: the parent's current ``sys.path`` and working directory
(multiprocessing's preparation data) and, applied before ``fn`` runs, the parent's current environment and its
current standard output and error (pytest's capture of the running test), where the server keeps the ones it
started with. What a preloaded module or library read from the environment when it was imported
(huggingface_hub's constants; OpenMP's ``OMP_NUM_THREADS``: a rank that needs its thread count calls
``torch.set_num_threads``) comes from the environment of the :func:`spawn` that started the server.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from multiprocessing import forkserver, reduction
from typing import Any, Literal, overload

from torch.multiprocessing import ProcessContext, start_processes

#: imported by the fork server before it forks a rank: what every rank of the tests imports (torch's
#: distributed and FSDP2 modules, transformers' model code and the tiny models' Qwen2, rlcore's workers).
#: Nothing here may start a thread or run a parallel torch op at import (the server forks afterwards).
BASE_PRELOAD: tuple[str, ...] = (
    "torch",
    "torch.distributed",
    "torch.distributed.fsdp",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.qwen2.modeling_qwen2",
    "rlcore",
    "rlcore.api",
    "rlcore.workers.actor",
    "rlcore.workers.critic",
    "rlcore_testkit.contracts.backend",
)

#: the modules the running fork server imported (``None``: this process has not started one)
_server_modules: tuple[str, ...] | None = None


def plugin_modules() -> list[str]:
    """The module of every ``rlcore`` entry point and of every registered training backend (their engines
    import their heavy dependencies lazily, so these are cheap)."""
    from rlcore.api import make_plugin_manager

    hooks = [entry.module for entry in metadata.entry_points(group="rlcore")]
    installed = make_plugin_manager().registry  # the installed plugins only, not a test's registered ones
    backends = [comp.target_path.split(":")[0] for comp in installed.components("training_backend")]
    return [*hooks, *backends]


def ensure_server(preload: Iterable[str] = ()) -> tuple[str, ...]:
    """Have multiprocessing's fork server import :data:`BASE_PRELOAD`, :func:`plugin_modules` and ``preload``
    before it forks: set its preload list when it has not started, restart it when it started without one of
    ``preload``. Returns the modules it imports."""
    global _server_modules
    extra = [name for name in preload if _server_modules is None or name not in _server_modules]
    if _server_modules is not None and not extra:
        return _server_modules
    if _server_modules is not None:
        forkserver._forkserver._stop()  # type: ignore[attr-defined]  # the one way to restart it with more modules
    wanted = _server_modules or (*BASE_PRELOAD, *plugin_modules())
    _server_modules = tuple(dict.fromkeys((*wanted, *extra)))
    multiprocessing.set_forkserver_preload(list(_server_modules))
    return _server_modules


class ParentOutput:
    """The parent's standard output and error: pickled while a rank starts, they reach the forked rank as
    duplicates of the parent's descriptors (multiprocessing passes them through the fork server)."""

    def __reduce__(self) -> tuple[Callable[..., tuple[int, int]], tuple[Any, Any]]:
        """Hand descriptors 1 and 2 to the rank being started."""
        return inherited_output, (reduction.DupFd(1), reduction.DupFd(2))


def inherited_output(out: Any, err: Any) -> tuple[int, int]:
    """In the rank: the descriptors of the parent's standard output and error."""
    return out.detach(), err.detach()


def run_with_environment(
    rank: int, fn: Callable[..., Any], environment: Mapping[str, str], output: tuple[int, int], args: tuple
) -> None:
    """A forked rank: take the parent's environment and standard output and error from when it called
    :func:`spawn`, then run ``fn(rank, *args)``."""
    os.environ.clear()
    os.environ.update(environment)
    for descriptor, target in zip(output, (1, 2), strict=True):
        os.dup2(descriptor, target)
        os.close(descriptor)
    fn(rank, *args)


@overload
def spawn(
    fn: Callable[..., Any],
    args: tuple = ...,
    nprocs: int = ...,
    *,
    join: Literal[True] = ...,
    preload: Iterable[str] = ...,
) -> None: ...
@overload
def spawn(
    fn: Callable[..., Any], args: tuple = ..., nprocs: int = ..., *, join: Literal[False], preload: Iterable[str] = ...
) -> ProcessContext: ...
def spawn(
    fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, *, join: bool = True, preload: Iterable[str] = ()
) -> ProcessContext | None:
    """Run ``fn(rank, *args)`` in ``nprocs`` processes forked from the fork server (:func:`ensure_server` with
    ``preload``), as ``torch.multiprocessing.start_processes`` does: with ``join`` wait for all of them (a rank
    that raises fails here with its traceback, and the others are stopped) and return ``None``; without,
    return the :class:`~torch.multiprocessing.ProcessContext` to join. ``fn`` and ``args`` must be picklable
    (``fn`` by its module's name)."""
    ensure_server(preload)
    context_args = (fn, dict(os.environ), ParentOutput(), args)
    return start_processes(run_with_environment, args=context_args, nprocs=nprocs, join=join, start_method="forkserver")
