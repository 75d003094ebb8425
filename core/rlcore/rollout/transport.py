"""The built-in weight transports (kind ``weight_transport``): ``naive`` and ``delta``.

``naive`` (verl's default backend): every tensor, every sync, in buckets of
``checkpoint_engine.update_weights_bucket_megabytes`` (or all at once).

``delta``: sends only the *elements* whose bytes changed since the engine's last sync, compared in the dtype the
engine holds (:attr:`~rlcore.api.transport.WeightReceiver.dtype`: bfloat16 for a bf16 rollout, whose small
updates mostly round away; float32 for a float32 one; the trainer's own dtype where the receiver does not say).
It keeps a copy of what the engine last received, in that dtype on the CPU (the receive side keeps its own),
and sends per tensor nothing when its bytes are unchanged, a :class:`~rlcore.api.transport.SparseDelta` (the
changed elements' positions, as varint gaps between them or a bitmask, whichever is smaller:
:mod:`rlcore.rollout.delta_codec`, and their new values) where that is smaller than the tensor, and the whole
tensor otherwise. Each bucket carries the BLAKE2b digest
of the tensors the receiver must hold once it applied the bucket (:func:`resolve_bucket` checks it). It sends
everything (a full sync) on its first send, after :meth:`DeltaTransport.reset` (a resume, a failed check after
a sync), when the engine's weight version is not the one its last send left, when the receiver cannot take a
partial update, and after a bucket whose digest did not match. ``engine_kwargs.delta.max_changed_fraction``
(default 0.5): once the bytes sent exceed that share of the weights, the rest of the sync is sent whole without
comparing (the model changed almost everywhere: comparing then costs more than it saves).

What it costs: a copy of the weights in the engine's dtype on each side, and per sync a cast, a comparison, the
changed positions' encoding and a hash of every tensor on the sender (``actor/weight_sync_encode_s``) and the
positions' decoding and a hash of every tensor sent on the receiver. What it saves depends on the engine's dtype: after an optimizer step of a dense fine-tune every
float32 element moves, so a float32 rollout gets every tensor whole; in bfloat16 only the elements whose update
crossed a rounding step change (``bench/weight_sync_memory.py --measure bytes`` has the figures).
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from rlcore.api.transport import BucketChecksumError, SparseDelta, TransportReport, WeightBucket, WeightReceiver
from rlcore.rollout.buckets import tensor_nbytes, weight_buckets
from rlcore.rollout.delta_codec import PositionError, decode_positions, encode_positions

if TYPE_CHECKING:
    from rlcore.api.rollout import RolloutEngine
    from rlcore.config.sections.rollout import CheckpointEngineConfig

__all__ = [
    "DeltaTransport",
    "EngineReceiver",
    "NaiveTransport",
    "apply_delta",
    "bucket_digest",
    "encode_delta",
    "engine_takes_partial",
    "resolve_bucket",
]

#: the integer type of a tensor's element size, to compare elements by their exact bytes
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _tensor_digest(tensor: torch.Tensor) -> bytes:
    """A 16-byte BLAKE2b digest of ``tensor``'s exact bytes, its dtype and shape."""
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
    digest = hashlib.blake2b(data.data, digest_size=16)  # the array's buffer: no copy
    digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    return digest.digest()


def bucket_digest(tensors: list[tuple[str, torch.Tensor]]) -> str:
    """The hex digest of a bucket's tensors: their names, exact bytes, dtypes and shapes, in order (two lists
    with equal digests hold the same values bit for bit)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in tensors:
        digest.update(name.encode())
        digest.update(_tensor_digest(tensor))
    return digest.hexdigest()


def encode_delta(new: torch.Tensor, base: torch.Tensor) -> torch.Tensor | SparseDelta | None:
    """``new`` against ``base`` (contiguous, of the same shape and dtype): None when their bytes are equal, a
    :class:`SparseDelta` of the elements whose bytes differ where it is smaller than ``new``, else ``new``."""
    bits = _BITS.get(new.element_size())
    if bits is None:  # no integer type of that width: compare whole
        return None if torch.equal(new.view(torch.uint8), base.view(torch.uint8)) else new
    flat = new.reshape(-1)
    changed = flat.view(bits) != base.reshape(-1).view(bits)
    count = int(torch.count_nonzero(changed))
    if count == 0:
        return None
    values_nbytes = count * new.element_size()
    if values_nbytes + min(count, -(-new.numel() // 8)) >= tensor_nbytes(new):
        return new  # not even the fewest position bytes (a byte a gap, or the mask) fit: skip encoding them
    encoding, positions, indices = encode_positions(changed)
    if positions.numel() + values_nbytes >= tensor_nbytes(new):
        return new
    return SparseDelta(tuple(new.shape), encoding, positions, flat[indices])


def apply_delta(base: torch.Tensor, delta: SparseDelta, name: str) -> torch.Tensor:
    """A copy of ``base`` (the receiver's snapshot of the weight ``name``) with ``delta``'s values written at its
    positions; raises :class:`BucketChecksumError` when the delta does not fit the snapshot."""
    if tuple(base.shape) != delta.shape or base.dtype != delta.values.dtype:
        raise BucketChecksumError(
            f"weight sync: the delta for {name!r} is of shape {delta.shape} in {delta.values.dtype}, the receiver "
            f"holds {tuple(base.shape)} in {base.dtype}"
        )
    try:
        indices = decode_positions(delta.encoding, delta.positions, base.numel(), delta.values.numel())
    except PositionError as exc:
        raise BucketChecksumError(f"weight sync: the delta for {name!r} does not fit: {exc}") from None
    result = base.clone()
    result.view(-1)[indices] = delta.values
    return result


def resolve_bucket(bucket: WeightBucket, snapshot: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """The tensors the receiver holds once it loaded ``bucket``: its whole tensors, then its deltas applied to
    ``snapshot`` (the tensors the receiver last loaded), checked against the bucket's digest. Raises
    :class:`BucketChecksumError` for a delta without a snapshot to apply it to, or bytes that do not match."""
    resolved = list(bucket.tensors)
    for name, delta in bucket.deltas:
        base = snapshot.get(name)
        if base is None:
            raise BucketChecksumError(
                f"weight sync: a delta for {name!r} arrived, but the receiver holds no copy of it"
            )
        resolved.append((name, apply_delta(base, delta, name)))
    if bucket.digest is not None and bucket_digest(resolved) != bucket.digest:
        names = ", ".join(name for name, _ in resolved[:5])
        raise BucketChecksumError(
            f"weight sync: a bucket of {len(resolved)} tensor(s) ({names}) arrived with bytes that do not "
            f"match the sender's checksum {bucket.digest}"
        )
    return resolved


def _entry_nbytes(entry: torch.Tensor | SparseDelta) -> int:
    """The bytes a whole tensor or a delta sends."""
    return entry.nbytes if isinstance(entry, SparseDelta) else tensor_nbytes(entry)


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
    """Only the elements whose bytes changed since the engine's last sync, in the engine's dtype (see the module
    docstring)."""

    incremental: ClassVar[bool] = True

    def __init__(self, config: CheckpointEngineConfig) -> None:
        self.config = config
        self.max_changed_fraction = config.delta_max_changed_fraction
        #: name -> the tensor the engine last received, in its dtype on the CPU (None: the next send is full)
        self.snapshot: dict[str, torch.Tensor] | None = None
        #: the receiver's weight version right after this transport's last send
        self.version: int | None = None
        #: the bytes of all the weights at the last send (the base of ``max_changed_fraction``)
        self.known_bytes = 0

    def reset(self) -> None:
        """Forget the snapshot: the next :meth:`send` is a full one."""
        self.snapshot = None
        self.version = None

    def send(
        self, weights: Iterator[tuple[str, torch.Tensor]], receiver: WeightReceiver, bucket_bytes: int | None
    ) -> TransportReport:
        """The changed elements of ``weights``, cast to ``receiver.dtype``, to ``receiver`` (every tensor whole
        when a full sync is due), bucket by bucket with a digest each; a failed load resets the snapshot and
        raises."""
        start = time.perf_counter()
        known = self.snapshot
        full = known is None or self.version != receiver.version or not receiver.partial
        dtype = receiver.dtype
        total_known = self.known_bytes
        snapshot: dict[str, torch.Tensor] = {}
        sent = total = count = 0
        encode_s = 0.0
        comparing = not full

        def encoded() -> Iterator[tuple[str, torch.Tensor | SparseDelta]]:
            nonlocal sent, total, comparing, encode_s
            for name, tensor in weights:
                began = time.perf_counter()
                held = tensor.detach().to(device="cpu", dtype=dtype or tensor.dtype, copy=True)
                snapshot[name] = held
                total += tensor_nbytes(held)
                base = known.get(name) if comparing and known is not None else None
                fits = base is not None and base.shape == held.shape and base.dtype == held.dtype
                entry = encode_delta(held, base) if fits and base is not None else held
                encode_s += time.perf_counter() - began
                if entry is None:
                    continue
                sent += _entry_nbytes(entry)
                if comparing and total_known and sent > self.max_changed_fraction * total_known:
                    comparing = False  # most of the model changed: stop comparing
                yield name, entry

        def buckets() -> Iterator[WeightBucket]:
            nonlocal count, encode_s
            for bucket in weight_buckets(encoded(), bucket_bytes, _entry_nbytes):
                count += 1
                began = time.perf_counter()
                whole = [(name, entry) for name, entry in bucket if isinstance(entry, torch.Tensor)]
                deltas = [(name, entry) for name, entry in bucket if isinstance(entry, SparseDelta)]
                digest = bucket_digest(whole + [(name, snapshot[name]) for name, _ in deltas])
                encode_s += time.perf_counter() - began
                yield WeightBucket(whole, digest, deltas)
                bucket.clear()

        self.reset()  # a failure half-way leaves the engine's state unknown
        receiver.load(buckets(), full=full)
        self.snapshot, self.version = snapshot, receiver.version
        self.known_bytes = total
        metrics = {
            "actor/weight_sync_bytes": float(sent),
            "actor/weight_sync_bytes_full": float(total),
            "actor/weight_sync_delta_fraction": sent / total if total else 0.0,
            "actor/weight_sync_encode_s": encode_s,
        }
        return TransportReport(sent, total, count, time.perf_counter() - start, full, metrics)


def engine_takes_partial(engine: Any) -> bool:
    """Whether the rollout engine's ``update_weights`` takes ``strict`` (False: an update of some weights)."""
    return "strict" in inspect.signature(engine.update_weights).parameters


class EngineReceiver:
    """The receive side of a rollout engine in this process (colocated placement): one ``update_weights`` call
    per sync, reading the buckets lazily, applying their deltas to the tensors it last loaded (kept when
    ``keep``: for an incremental transport) and checking each bucket's digest as it arrives. ``dtype``: the
    dtype the engine holds its weights in."""

    def __init__(self, engine: RolloutEngine, dtype: torch.dtype | None = None, *, keep: bool = False) -> None:
        self.engine = engine
        self.keep = keep
        self._dtype = dtype
        #: name -> the tensor the engine last loaded (kept when ``keep``), the base of the next deltas
        self.snapshot: dict[str, torch.Tensor] = {}

    @property
    def version(self) -> int:
        """The engine's weight version."""
        return int(self.engine.weight_version)

    @property
    def partial(self) -> bool:
        """Whether this receiver keeps the last weights and the engine takes an update of some of them."""
        return self.keep and engine_takes_partial(self.engine)

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype the engine holds its weights in (None: not given)."""
        return self._dtype

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """One ``update_weights`` of the buckets' tensors (``strict=False`` unless ``full``)."""
        if full:
            self.snapshot = {}

        def stream() -> Iterator[tuple[str, torch.Tensor]]:
            for bucket in buckets:
                resolved = resolve_bucket(bucket, self.snapshot)
                if self.keep:
                    self.snapshot.update(resolved)
                yield from resolved

        if full:
            self.engine.update_weights(stream())
        else:
            self.engine.update_weights(stream(), strict=False)  # type: ignore[call-arg]  # partial checked it
