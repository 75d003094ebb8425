"""The multi-turn seam: what the core calls to roll out a batch through agent loops, and what a multi-turn plugin
(``rlcore-plugin-agents``: the agent runner, the ``single_turn``/``tool_agent`` loops, the tool executor,
rollout tracing, the Hermes parser and the calculator tool) implements.

A plugin's ``multi_turn(config, registry)`` hook returns the run's :class:`MultiTurn`;
:func:`rlcore.plugins.run_multi_turn` asks for it. ``rlcore run`` calls its :meth:`MultiTurn.check` before
anything starts (the dry run too); the trainer builds its :meth:`MultiTurn.runner` once, with the policy's
tokenizer, and sends every rollout batch the runner :meth:`~MultiTurnRunner.applies_to` through
:meth:`~MultiTurnRunner.run` instead of the rollout engine. Without a plugin the core uses :class:`SingleTurn`:
every batch goes to the engine, and a batch whose samples name an agent loop is an error naming the
distribution to install.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.api.batch import Batch

__all__ = ["MultiTurn", "MultiTurnRunner", "SingleTurn", "agent_names"]


@runtime_checkable
class MultiTurnRunner(Protocol):
    """The trainer's side: decides which rollout batches go through agent loops and runs them."""

    def applies_to(self, batch: Batch) -> bool:
        """Whether ``batch`` (left-padded prompts, repeated ``n`` times) needs agent loops."""
        ...

    def run(self, batch: Batch, generate: Callable[[Batch], Batch]) -> Batch:
        """The rollout of ``batch`` through agent loops; ``generate`` is the rollout group's
        ``generate_sequences``, called once per batched turn. The result has an engine's layout."""
        ...


@runtime_checkable
class MultiTurn(Protocol):
    """A run's multi-turn rollouts, from a plugin's ``multi_turn(config, registry)`` hook."""

    def check(self) -> None:
        """What ``rlcore run`` checks before anything starts: raise :class:`RLCoreError` naming the key for a
        setting that cannot run (an unknown agent loop or tool-call format, a tool file that does not load)."""
        ...

    def runner(self, tokenizer: Any) -> MultiTurnRunner:
        """The runner the trainer keeps for the run (``tokenizer``: the policy's)."""
        ...


def agent_names(batch: Batch) -> list[str | None]:
    """Each sample's ``agent_name`` (a dataset column, else ``extra_info.agent_name``), None when unset."""
    size = len(batch)
    if "agent_name" in batch.non_tensors:
        return [str(v) if v else None for v in batch["agent_name"]]
    infos = batch["extra_info"] if "extra_info" in batch.non_tensors else [None] * size
    return [str(i["agent_name"]) if isinstance(i, dict) and i.get("agent_name") else None for i in infos]


class SingleTurn:
    """The multi-turn rollouts of a run without a multi-turn plugin: nothing to check, and every batch goes to
    the engine (its own runner). ``missing`` is the error for a batch whose samples name an agent loop."""

    def __init__(self, missing: str) -> None:
        self.missing = missing

    def check(self) -> None:
        """Nothing to check."""

    def runner(self, tokenizer: Any) -> SingleTurn:
        """Itself."""
        return self

    def applies_to(self, batch: Batch) -> bool:
        """False; a sample naming an agent loop raises :class:`RLCoreError` (``missing``)."""
        named = sorted({name for name in agent_names(batch) if name})
        if named:
            raise RLCoreError(f"samples name the agent loop(s) {', '.join(named)}: {self.missing}")
        return False

    def run(self, batch: Batch, generate: Callable[[Batch], Batch]) -> Batch:
        """Never called (:meth:`applies_to` is False): the engine's rollout of ``batch``."""
        return generate(batch)
