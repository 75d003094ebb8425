"""The weight-transport contract (kind ``weight_transport``, ``actor_rollout_ref.rollout.checkpoint_engine.backend``).

A weight transport moves the trainer's weights into a rollout engine after every actor update: verl's
checkpoint engine. It is given the trainer's ``(name, tensor)`` pairs as an iterator (gathered lazily, one
tensor at a time where the training engine can: consume it whole, in order, once), the engine's receive side
(:class:`WeightReceiver`) and the bucket size in bytes
(``checkpoint_engine.update_weights_bucket_megabytes``; None: no bound), and returns a
:class:`TransportReport`. The actor worker (colocated placement) and the controller (split placement, the
receiver is the rollout worker group) build one transport per run and call :meth:`WeightTransport.send` for
every sync; the check that the engine serves the trainer's weights follows every sync and is not the
transport's job. Built-ins: ``naive`` (every tensor, every sync) and ``delta`` (only the elements whose bytes
changed since the engine's last sync, in the dtype the engine holds: :attr:`WeightReceiver.dtype`), in
:mod:`rlcore.rollout.transport`.

This module imports no torch at import time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    import torch

    from rlcore.config.sections.rollout import CheckpointEngineConfig

__all__ = [
    "BucketChecksumError",
    "SparseDelta",
    "TransportReport",
    "WeightBucket",
    "WeightReceiver",
    "WeightTransport",
]


@dataclass(frozen=True)
class SparseDelta:
    """The changed elements of one tensor against the receiver's snapshot of it: the tensor's ``shape``, which
    flat positions changed (``positions``, a uint8 stream in ``encoding``: ``"gaps"``, the gaps between
    consecutive changed indices as LEB128 varints, or ``"mask"``, one bit per element;
    :mod:`rlcore.rollout.delta_codec`) and their new ``values`` (in the tensor's dtype, in index order). The
    receiver writes ``values`` at those positions into a copy of the tensor it last received
    (:func:`rlcore.rollout.transport.apply_delta`)."""

    shape: tuple[int, ...]
    encoding: str
    positions: torch.Tensor
    values: torch.Tensor

    @property
    def nbytes(self) -> int:
        """The bytes this delta sends: its position stream and values."""
        return self.positions.numel() * self.positions.element_size() + self.values.numel() * self.values.element_size()


@dataclass
class WeightBucket:
    """One bucket of weights on its way to the engine: whole tensors as ``(name, tensor)`` pairs in the trainer's
    order, ``deltas`` (``(name, SparseDelta)`` pairs for tensors the receiver holds a snapshot of; empty unless
    the transport sends element-level changes), and the hex digest of the tensors the receiver must hold once it
    loaded the bucket (``tensors``, then ``deltas`` applied, in order:
    :func:`rlcore.rollout.transport.bucket_digest`), which the receive side checks, or None for a transport
    that sends no checksum."""

    tensors: list[tuple[str, torch.Tensor]]
    digest: str | None = None
    deltas: list[tuple[str, SparseDelta]] = field(default_factory=list)


@dataclass(frozen=True)
class TransportReport:
    """What one :meth:`WeightTransport.send` did.

    Attributes:
        bytes_sent: the bytes handed to the receiver (whole tensors, and the indices and values of deltas).
        bytes_full: the bytes a full sync of this transport would have sent (every tensor of the iterator, in
            the dtype it sends them in).
        buckets: how many buckets were handed to the receiver.
        seconds: the wall time of the send, the receiver's loading included.
        full: whether every tensor was sent (the engine was told to expect all of them).
        metrics: the transport's own metrics for the step's ``metrics.jsonl`` (the built-in ``naive`` adds
            ``actor/weight_sync_buckets`` when a bucket size is set; ``delta`` adds
            ``actor/weight_sync_bytes``, ``actor/weight_sync_bytes_full``,
            ``actor/weight_sync_delta_fraction`` and ``actor/weight_sync_encode_s``).
    """

    bytes_sent: int
    bytes_full: int
    buckets: int
    seconds: float
    full: bool
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class WeightReceiver(Protocol):
    """The engine's receive side, which the caller of :meth:`WeightTransport.send` builds: in-process around
    the rollout engine (colocated), or the rollout worker group (split placement)."""

    @property
    def version(self) -> int:
        """The engine's weight version (:attr:`rlcore.api.rollout.RolloutEngine.weight_version`); a transport
        that keeps a snapshot of what it sent resends everything when the version is not the one its own
        last send left (the engine was updated behind its back, or restarted)."""
        ...

    @property
    def partial(self) -> bool:
        """Whether the engine accepts an update that names only some of its weights (the others stay), and
        :attr:`WeightBucket.deltas` against the tensors its last load left (the receive side keeps them)."""
        ...

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype the engine holds its weights in (its ``dtype`` argument): a transport may cast the
        trainer's tensors to it before comparing and sending them; None: unknown, send them as they are."""
        ...

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """Load the buckets into the engine as one weight update (one ``weight_version`` step), consuming them
        lazily in order; ``full``: every weight is among them (the engine refuses an update that leaves one
        out). Raises :class:`rlcore.errors.RLCoreError` (a :class:`BucketChecksumError` for a bucket whose
        bytes do not match its digest)."""
        ...


class WeightTransport(Protocol):
    """Constructed as ``Transport(config)`` with ``config`` the typed ``actor_rollout_ref.rollout.checkpoint_engine``
    section (:class:`rlcore.api.CheckpointEngineConfig`); one instance serves every sync of a run."""

    #: whether later sends may leave tensors out (the receiver of a split placement then keeps the weights it
    #: loaded, to check the served state against the trainer's after a partial update)
    incremental: ClassVar[bool]

    def __init__(self, config: CheckpointEngineConfig) -> None:
        """Keep ``config`` (the transport's arguments are ``config.engine_kwargs[<its name>]``)."""
        ...

    def send(
        self, weights: Iterator[tuple[str, torch.Tensor]], receiver: WeightReceiver, bucket_bytes: int | None
    ) -> TransportReport:
        """Move ``weights`` (every distinct tensor of the trainer, consumed whole) into ``receiver`` in buckets
        of at most ``bucket_bytes`` (a larger tensor alone; None: one bucket)."""
        ...

    def reset(self) -> None:
        """Forget what the engine is known to hold: the next :meth:`send` is a full one (after a resume, or when
        the check after a sync found the engine's weights differ from the trainer's)."""
        ...


class BucketChecksumError(RLCoreError):
    """A bucket's bytes on the receive side do not match the digest the sender computed."""
