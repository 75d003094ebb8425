"""The built-in weight transports (kind ``weight_transport``): ``naive`` and ``delta``.

``naive`` (verl's default backend): every tensor, every sync, in buckets of
``checkpoint_engine.update_weights_bucket_megabytes`` (or all at once).

``delta``: sends only the tensors whose exact bytes changed since the engine's last sync. It keeps, per tensor,
a BLAKE2b digest of the bytes the engine last received (16 bytes per tensor, no copy of the weights), sends the
changed tensors in buckets with a digest per bucket that the receive side checks, and sends everything (a full
sync) on its first send, after :meth:`DeltaTransport.reset` (a resume, a failed check after a sync), when the
engine's weight version is not the one its last send left, when the receiver cannot take a partial update,
and after a bucket arrived with a wrong digest. ``engine_kwargs.delta.max_changed_fraction`` (default 0.5):
once the changed tensors' bytes exceed that share of the weights, the rest of the sync is sent without
comparing (the model changes almost everywhere, hashing then costs more than it saves).

Where it wins, and where not: the comparison is per tensor, exact bytes. After an optimizer step of a dense
full fine-tune every parameter moves a little, so every tensor changes and delta sends everything (plus
the hashing). It sends less where whole tensors stay bitwise equal: frozen layers, embeddings of a LoRA run
(the merged weights change only where adapters sit), a step with a zero learning rate, parameters whose
gradients are zero. verl's 1-3 % per step come from a finer grain (changed *elements*, as indices and values,
of bf16 weights whose small updates mostly round away); rlcore's engines take whole tensors, so that grain
is measured by ``bench/weight_transport.py`` (``changed_elements_bf16``) but not sent.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

import torch

from rlcore.api.transport import BucketChecksumError, TransportReport, WeightBucket, WeightReceiver
from rlcore.rollout.buckets import tensor_nbytes, weight_buckets

if TYPE_CHECKING:
    from rlcore.api.rollout import RolloutEngine
    from rlcore.config.sections.rollout import CheckpointEngineConfig

__all__ = ["DeltaTransport", "EngineReceiver", "NaiveTransport", "bucket_digest", "check_bucket", "tensor_digest"]


def tensor_digest(tensor: torch.Tensor) -> bytes:
    """A 16-byte BLAKE2b digest of ``tensor``'s exact bytes, its dtype and shape (two tensors with equal
    digests hold the same values bit for bit)."""
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
    digest = hashlib.blake2b(data.tobytes(), digest_size=16)
    digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    return digest.digest()


def bucket_digest(tensors: list[tuple[str, torch.Tensor]]) -> str:
    """The hex digest of a bucket: its names and their tensors' :func:`tensor_digest`, in order."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in tensors:
        digest.update(name.encode())
        digest.update(tensor_digest(tensor))
    return digest.hexdigest()


def check_bucket(bucket: WeightBucket) -> None:
    """Raise :class:`BucketChecksumError` when ``bucket`` has a digest its tensors' bytes do not match."""
    if bucket.digest is not None and bucket_digest(bucket.tensors) != bucket.digest:
        names = ", ".join(name for name, _ in bucket.tensors[:5])
        raise BucketChecksumError(
            f"weight sync: a bucket of {len(bucket.tensors)} tensor(s) ({names}) arrived with bytes that do not "
            f"match the sender's checksum {bucket.digest}"
        )


class NaiveTransport:
    """verl's ``naive`` checkpoint engine: every tensor of the trainer, every sync."""

    incremental: ClassVar[bool] = False

    def __init__(self, config: CheckpointEngineConfig) -> None:
        self.config = config

    def send(
        self, weights: Iterator[tuple[str, torch.Tensor]], receiver: WeightReceiver, bucket_bytes: int | None
    ) -> TransportReport:
        """Every tensor of ``weights`` to ``receiver``, bucket by bucket (the next one gathered only once the
        previous one was handed on). Reports ``actor/weight_sync_buckets`` when a bucket size is set."""
        start = time.perf_counter()
        sent = count = 0

        def buckets() -> Iterator[WeightBucket]:
            nonlocal sent, count
            for bucket in weight_buckets(weights, bucket_bytes):
                count += 1
                sent += sum(tensor_nbytes(tensor) for _, tensor in bucket)
                yield WeightBucket(bucket)
                bucket.clear()  # the engine has copied these: let them go before the next gather

        receiver.load(buckets(), full=True)
        metrics = {"actor/weight_sync_buckets": float(count)} if bucket_bytes is not None else {}
        return TransportReport(sent, sent, count, time.perf_counter() - start, True, metrics)

    def reset(self) -> None:
        """Nothing to forget: every send is a full one."""


class DeltaTransport:
    """Only the tensors whose bytes changed since the engine's last sync (see the module docstring)."""

    incremental: ClassVar[bool] = True

    def __init__(self, config: CheckpointEngineConfig) -> None:
        self.config = config
        self.max_changed_fraction = config.delta_max_changed_fraction
        #: name -> digest of the bytes the engine last received (None: nothing known, the next send is full)
        self.digests: dict[str, bytes] | None = None
        #: the receiver's weight version right after this transport's last send
        self.version: int | None = None
        #: the bytes of all the weights at the last send (the base of ``max_changed_fraction``)
        self.known_bytes = 0

    def reset(self) -> None:
        """Forget the snapshot: the next :meth:`send` is a full one."""
        self.digests = None
        self.version = None

    def send(
        self, weights: Iterator[tuple[str, torch.Tensor]], receiver: WeightReceiver, bucket_bytes: int | None
    ) -> TransportReport:
        """The changed tensors of ``weights`` to ``receiver`` (all of them when a full sync is due), bucket by
        bucket with a digest each; a bucket refused for its digest resets the snapshot and raises."""
        start = time.perf_counter()
        known = self.digests
        full = known is None or self.version != receiver.version or not receiver.partial
        total_known = self.known_bytes
        digests: dict[str, bytes] = {}
        sent = total = count = 0
        comparing = not full

        def changed() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal sent, total, comparing
            for name, tensor in weights:
                size = tensor_nbytes(tensor)
                total += size
                digest = tensor_digest(tensor)
                digests[name] = digest
                if comparing and known is not None and known.get(name) == digest:
                    continue
                sent += size
                if comparing and total_known and sent > self.max_changed_fraction * total_known:
                    comparing = False  # most of the model changed: stop skipping
                yield name, tensor

        def buckets() -> Iterator[WeightBucket]:
            nonlocal count
            for bucket in weight_buckets(changed(), bucket_bytes):
                count += 1
                yield WeightBucket(bucket, bucket_digest(bucket))
                bucket.clear()

        self.reset()  # a failure half-way leaves the engine's state unknown
        receiver.load(buckets(), full=full)
        self.digests, self.version = digests, receiver.version
        self.known_bytes = total
        metrics = {
            "actor/weight_sync_bytes": float(sent),
            "actor/weight_sync_bytes_full": float(total),
            "actor/weight_sync_delta_fraction": sent / total if total else 0.0,
        }
        return TransportReport(sent, total, count, time.perf_counter() - start, full, metrics)


class EngineReceiver:
    """The receive side of a rollout engine in this process (colocated placement): one ``update_weights`` call
    per sync, reading the buckets lazily and checking each bucket's digest as it arrives."""

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine

    @property
    def version(self) -> int:
        """The engine's weight version."""
        return int(self.engine.weight_version)

    @property
    def partial(self) -> bool:
        """Whether the engine's ``update_weights`` takes ``strict`` (False: a partial update)."""
        return "strict" in inspect.signature(self.engine.update_weights).parameters

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """One ``update_weights`` of the buckets' tensors (``strict=False`` unless ``full``)."""

        def stream() -> Iterator[tuple[str, torch.Tensor]]:
            for bucket in buckets:
                check_bucket(bucket)
                yield from bucket.tensors

        if full:
            self.engine.update_weights(stream())
        else:
            self.engine.update_weights(stream(), strict=False)  # type: ignore[call-arg]  # partial checked it
