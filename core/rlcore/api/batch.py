"""The :class:`Batch`: the one object that carries a step's data between the controller and its workers.

A Batch has three parts, all indexed by sample along dim 0:

``tensors``
    ``dict[str, torch.Tensor]``; every tensor's first dimension is ``len(batch)``.
``non_tensors``
    ``dict[str, np.ndarray]``; 1-D numpy ``object`` arrays of length ``len(batch)`` (lists, tuples and
    other 1-D arrays are converted on the way in).
``meta``
    ``dict[str, Any]``, free-form (``temperature``, ``metrics``, ``validate``, ...). ``meta["metrics"]``,
    when present, is a dict of metric name to value that :meth:`Batch.concat` merges into lists.

Row selection by an int or a slice (and so :meth:`Batch.chunk`, :meth:`Batch.split` and
:meth:`Batch.unpad`) returns views that share memory with the source, as torch and numpy do; selection by
a list, an index array or a boolean mask copies. Object-array elements (dicts, lists) are never copied:
a repeated or indexed Batch holds references to the same Python objects. Pickling stores only the rows a
tensor view covers, so a chunk sent to a worker does not carry its parent's storage.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, overload

import numpy as np
import torch

from rlcore.errors import RLCoreError

__all__ = ["Batch", "BatchError", "BatchIndexError", "BatchKeyError", "BatchTypeError", "NonTensorValues", "RowIndex"]

#: what :meth:`Batch.index` accepts: a row, a slice, row numbers or a boolean mask over the rows
RowIndex = int | np.integer | slice | Sequence[int] | Sequence[bool] | range | np.ndarray | torch.Tensor
#: what a Batch accepts as a non-tensor entry: one value per row (the values themselves are arbitrary: texts,
#: dicts of images, ground truths, ...), kept as a 1-D object array
NonTensorValues = np.ndarray | list[Any] | tuple[Any, ...]


class BatchError(RLCoreError, ValueError):
    """Inconsistent Batch data: mismatched lengths, conflicting values or an impossible size."""


class BatchKeyError(RLCoreError, KeyError):
    """A key that is not in the Batch."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class BatchTypeError(RLCoreError, TypeError):
    """A key, value or index of a type the Batch cannot hold or use."""


class BatchIndexError(RLCoreError, IndexError):
    """A row number outside the Batch."""


def _object_array(values: Sequence[object]) -> np.ndarray:
    """A 1-D object array holding ``values`` as elements, even when they are themselves lists or dicts."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _check_key(key: object) -> str:
    """Return ``key`` if it is a string, else raise."""
    if not isinstance(key, str):
        raise BatchTypeError(f"Batch keys are strings, got {key!r} ({type(key).__name__})")
    return key


def _as_tensor(key: str, value: object) -> torch.Tensor:
    """Validate a value stored under ``tensors[key]``."""
    if not isinstance(value, torch.Tensor):
        raise BatchTypeError(f"tensor {key!r} must be a torch.Tensor, got {type(value).__name__}")
    if value.ndim == 0:
        raise BatchTypeError(
            f"tensor {key!r} is 0-dimensional; a Batch tensor has one row per sample (put scalars in meta)"
        )
    return value


def _as_non_tensor(key: str, value: object) -> np.ndarray:
    """Convert a per-sample sequence stored under ``non_tensors[key]`` into a 1-D object array."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise BatchTypeError(
                f"non-tensor {key!r} must be 1-D, got shape {value.shape}; "
                "store it as a tensor or as a list of per-sample values"
            )
        return value if value.dtype == object else value.astype(object)
    if isinstance(value, (list, tuple)):
        return _object_array(value)
    raise BatchTypeError(
        f"{key!r}: a Batch holds torch tensors or per-sample sequences (list, tuple, 1-D numpy array), "
        f"got {type(value).__name__}; put scalars in meta"
    )


def _positive_int(what: str, value: object) -> int:
    """Return ``value`` if it is an int >= 1, else raise naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BatchTypeError(f"{what} must be an int, got {value!r}")
    if value < 1:
        raise BatchError(f"{what} must be >= 1, got {value}")
    return int(value)


def _normalize_index(idx: object, n: int) -> slice | np.ndarray:
    """Turn any accepted row index into a forward slice or an int64 array of non-negative row numbers."""
    if isinstance(idx, torch.Tensor) and idx.ndim == 0 and idx.dtype != torch.bool and not idx.is_floating_point():
        idx = int(idx.item())
    if isinstance(idx, (bool, np.bool_)):
        raise BatchTypeError(f"cannot index a Batch with the bool {idx!r}; use a boolean mask with one entry per row")
    if isinstance(idx, (int, np.integer)):
        row = int(idx)
        if not -n <= row < n:
            raise BatchIndexError(f"row {row} is out of range for a Batch of {n} rows")
        row %= n
        return slice(row, row + 1)
    if isinstance(idx, slice):
        start, stop, step = idx.indices(n)
        return slice(start, stop, step) if step > 0 else np.arange(start, stop, step, dtype=np.int64)
    if isinstance(idx, torch.Tensor):
        if idx.is_floating_point() or idx.is_complex():
            raise BatchTypeError(f"index tensor must be integer or bool, got {idx.dtype}")
        rows = idx.detach().cpu().numpy()
    elif isinstance(idx, np.ndarray):
        rows = idx
    elif isinstance(idx, (list, tuple, range)):
        rows = np.asarray(idx) if len(idx) else np.empty(0, dtype=np.int64)
    else:
        raise BatchTypeError(
            f"cannot index a Batch with {type(idx).__name__}; use a str key, an int, a slice, row numbers or a mask"
        )
    if rows.ndim != 1:
        raise BatchTypeError(f"a row index must be 1-D, got shape {rows.shape}")
    if rows.dtype == bool:
        if len(rows) != n:
            raise BatchError(f"boolean mask has {len(rows)} entries but the Batch has {n} rows")
        return np.flatnonzero(rows)
    if not np.issubdtype(rows.dtype, np.integer):
        raise BatchTypeError(f"row indices must be integers or bools, got dtype {rows.dtype}")
    rows = rows.astype(np.int64, copy=False)
    if rows.size and (rows.min() < -n or rows.max() >= n):
        bad = int(rows[(rows < -n) | (rows >= n)][0])
        raise BatchIndexError(f"row {bad} is out of range for a Batch of {n} rows")
    return np.where(rows < 0, rows + n, rows)


def _tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality of shape, dtype and values; NaNs in the same places count as equal."""
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    b = b.to(a.device)
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        nan_a, nan_b = a.isnan(), b.isnan()
        return torch.equal(nan_a, nan_b) and torch.equal(a[~nan_a], b[~nan_b])
    return False


def _values_equal(x: object, y: object) -> bool:
    """Deep equality for non-tensor elements and meta values (dicts, sequences, arrays, tensors, NaN)."""
    if x is y:
        return True
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and _tensors_equal(x, y)
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)) or x.shape != y.shape:
            return False
        if x.dtype == object or y.dtype == object:
            return all(_values_equal(p, q) for p, q in zip(x.ravel(), y.ravel()))
        try:
            return bool(np.array_equal(x, y, equal_nan=True))
        except TypeError:  # equal_nan is undefined for strings and other non-numeric dtypes
            return bool(np.array_equal(x, y))
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        return x.keys() == y.keys() and all(_values_equal(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return type(x) is type(y) and len(x) == len(y) and all(_values_equal(p, q) for p, q in zip(x, y))
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True
    try:
        return bool(x == y)
    except (TypeError, ValueError, RuntimeError):
        return False


def _metrics_of(meta: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``meta["metrics"]`` (empty when absent), checked to be a mapping."""
    metrics = meta.get("metrics", {})
    if not isinstance(metrics, Mapping):
        raise BatchTypeError(f"meta['metrics'] of {where} must be a dict, got {type(metrics).__name__}")
    return metrics


def _compact(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself, or a copy when ``t`` is a view into a larger storage (so pickling stays small)."""
    if t.layout != torch.strided or t.device.type == "meta":
        return t
    if t.untyped_storage().nbytes() > t.numel() * t.element_size():
        return t.clone(memory_format=torch.contiguous_format)
    return t


class Batch:
    """A step's data: per-sample tensors and object arrays sharing dim 0, plus free-form meta.

    ``Batch(tensors=None, non_tensors=None, meta=None)`` copies the three dicts (not their values),
    converts lists, tuples and non-object 1-D arrays in ``non_tensors`` into 1-D object arrays, and checks
    that every entry has the same number of rows; a mismatch raises :class:`BatchError` naming both keys
    and lengths.
    """

    __slots__ = ("tensors", "non_tensors", "meta")

    tensors: dict[str, torch.Tensor]
    non_tensors: dict[str, np.ndarray]
    meta: dict[str, Any]

    def __init__(
        self,
        tensors: Mapping[str, torch.Tensor] | None = None,
        non_tensors: Mapping[str, NonTensorValues] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.tensors = {_check_key(k): _as_tensor(k, v) for k, v in (tensors or {}).items()}
        self.non_tensors = {}
        for key, value in (non_tensors or {}).items():
            if _check_key(key) in self.tensors:
                raise BatchError(f"{key!r} is given both as a tensor and as a non-tensor")
            self.non_tensors[key] = _as_non_tensor(key, value)
        self.meta = dict(meta or {})
        reference: tuple[str, int] | None = None
        for key, rows in self._row_counts():
            if reference is None:
                reference = (key, rows)
            elif rows != reference[1]:
                raise BatchError(
                    f"{key!r} has {rows} rows but {reference[0]!r} has {reference[1]}; "
                    "every tensor and non-tensor of a Batch must have the same first dimension"
                )

    @classmethod
    def _make(cls, tensors: dict[str, torch.Tensor], non_tensors: dict[str, np.ndarray], meta: dict[str, Any]) -> Batch:
        """Build a Batch from parts already known to be valid, without checking them again."""
        batch = cls.__new__(cls)
        batch.tensors, batch.non_tensors, batch.meta = tensors, non_tensors, meta
        return batch

    @classmethod
    def from_dict(
        cls, data: Mapping[str, torch.Tensor | NonTensorValues], meta: Mapping[str, Any] | None = None
    ) -> Batch:
        """Build a Batch from one dict: ``torch.Tensor`` values become tensors, all others non-tensors."""
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        non_tensors = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls(tensors, non_tensors, meta)

    def _row_counts(self, exclude: str | None = None) -> Iterator[tuple[str, int]]:
        """``(key, rows)`` for every tensor and non-tensor except ``exclude``."""
        entries: list[tuple[str, Sized]] = [*self.tensors.items(), *self.non_tensors.items()]
        for key, value in entries:
            if key != exclude:
                yield key, len(value)

    def __len__(self) -> int:
        """The number of rows (samples); 0 for a Batch without tensors or non-tensors."""
        for _, rows in self._row_counts():
            return rows
        return 0

    def keys(self) -> list[str]:
        """All keys: the tensor keys, then the non-tensor keys."""
        return [*self.tensors, *self.non_tensors]

    def __iter__(self) -> Iterator[str]:
        """Iterate over :meth:`keys`, as a mapping does (use :meth:`split` to iterate over rows)."""
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is a tensor or non-tensor key."""
        return key in self.tensors or key in self.non_tensors

    def _missing(self, key: str) -> BatchKeyError:
        """The error for a key that is not in the Batch, listing the keys that are."""
        return BatchKeyError(f"{key!r} is not in the Batch; available keys: {self.keys()}")

    @overload
    def __getitem__(self, key: str) -> Any: ...  # a tensor or an object array: callers know which key is which

    @overload
    def __getitem__(self, key: RowIndex) -> Batch: ...

    def __getitem__(self, key: str | RowIndex) -> torch.Tensor | np.ndarray | Batch:
        """``batch["key"]`` returns the tensor or object array; any other index selects rows (:meth:`index`)."""
        if not isinstance(key, str):
            return self.index(key)
        if key in self.tensors:
            return self.tensors[key]
        if key in self.non_tensors:
            return self.non_tensors[key]
        raise self._missing(key)

    def __setitem__(self, key: str, value: torch.Tensor | NonTensorValues) -> None:
        """Store a tensor (into ``tensors``) or a per-sample sequence (into ``non_tensors``), replacing
        any entry of either kind under ``key``; its length must match the other entries."""
        _check_key(key)
        stored = _as_tensor(key, value) if isinstance(value, torch.Tensor) else _as_non_tensor(key, value)
        for ref, rows in self._row_counts(exclude=key):
            if len(stored) != rows:
                raise BatchError(f"{key!r} has {len(stored)} rows but the Batch has {rows} (from {ref!r})")
            break
        if isinstance(stored, torch.Tensor):
            self.non_tensors.pop(key, None)
            self.tensors[key] = stored
        else:
            self.tensors.pop(key, None)
            self.non_tensors[key] = stored

    def __delitem__(self, key: str) -> None:
        """Remove a tensor or non-tensor key."""
        if key in self.tensors:
            del self.tensors[key]
        elif key in self.non_tensors:
            del self.non_tensors[key]
        else:
            raise self._missing(key)

    def index(self, idx: RowIndex) -> Batch:
        """Select rows: an int (a 1-row Batch), a slice, a list/array/tensor of row numbers (negative ones
        count from the end) or a boolean mask (numpy or torch) with one entry per row.

        Meta is shallow-copied. Ints and forward slices give views; other indices copy.
        """
        rows = _normalize_index(idx, len(self))
        if isinstance(rows, slice):
            tensors = {k: t[rows] for k, t in self.tensors.items()}
        else:
            cpu_rows = torch.from_numpy(rows)
            by_device: dict[torch.device, torch.Tensor] = {}
            tensors = {}
            for key, t in self.tensors.items():
                if t.device not in by_device:
                    by_device[t.device] = cpu_rows.to(t.device)
                tensors[key] = t[by_device[t.device]]
        non_tensors = {k: a[rows] for k, a in self.non_tensors.items()}
        return Batch._make(tensors, non_tensors, dict(self.meta))

    def _key_list(self, keys: str | Iterable[str]) -> list[str]:
        """``keys`` as a list (a single string is one key), each checked to be in the Batch."""
        names = [keys] if isinstance(keys, str) else list(keys)
        for name in names:
            if name not in self:
                raise self._missing(name)
        return names

    def select(self, keys: str | Iterable[str] | None = None) -> Batch:
        """A new Batch with only ``keys`` (tensor and non-tensor keys alike; all keys when None).

        The values are shared, not copied; meta is shallow-copied. A missing key raises
        :class:`BatchKeyError` naming it.
        """
        names = self.keys() if keys is None else self._key_list(keys)
        tensors = {k: self.tensors[k] for k in names if k in self.tensors}
        non_tensors = {k: self.non_tensors[k] for k in names if k in self.non_tensors}
        return Batch._make(tensors, non_tensors, dict(self.meta))

    def pop(self, keys: str | Iterable[str]) -> Batch:
        """Remove ``keys`` from this Batch and return them as a new Batch (meta shallow-copied).

        Nothing is removed if any key is missing.
        """
        popped = self.select(self._key_list(keys))
        for key in popped.keys():
            del self[key]
        return popped

    def union(self, other: Batch) -> Batch:
        """Merge ``other`` into this Batch in place and return self.

        Both must have the same number of rows unless one has no keys. A key present in both must hold
        equal values (exact for tensors, element-wise for non-tensors) and be of the same kind; meta keys
        present in both must be equal, except ``meta["metrics"]``, whose dicts are merged with ``other``'s
        values winning for a metric both report. Any conflict raises :class:`BatchError` naming the key,
        and leaves this Batch unchanged.
        """
        if not isinstance(other, Batch):
            raise BatchTypeError(f"union needs a Batch, got {type(other).__name__}")
        if self.keys() and other.keys() and len(self) != len(other):
            raise BatchError(f"cannot union a Batch of {len(other)} rows into one of {len(self)} rows")
        for key, t in other.tensors.items():
            if key in self.non_tensors:
                raise BatchError(f"union: {key!r} is a non-tensor here but a tensor in the other Batch")
            if key in self.tensors and not _tensors_equal(self.tensors[key], t):
                raise BatchError(f"union: tensor {key!r} differs between the two Batches")
        for key, a in other.non_tensors.items():
            if key in self.tensors:
                raise BatchError(f"union: {key!r} is a tensor here but a non-tensor in the other Batch")
            if key in self.non_tensors and not _values_equal(self.non_tensors[key], a):
                raise BatchError(f"union: non-tensor {key!r} differs between the two Batches")
        for key, value in other.meta.items():
            if key != "metrics" and key in self.meta and not _values_equal(self.meta[key], value):
                raise BatchError(
                    f"union: meta {key!r} differs: {reprlib.repr(self.meta[key])} here, "
                    f"{reprlib.repr(value)} in the other Batch"
                )
        other_metrics = _metrics_of(other.meta, "the other Batch")
        metrics = _metrics_of(self.meta, "this Batch")
        self.tensors.update(other.tensors)
        self.non_tensors.update(other.non_tensors)
        for key, value in other.meta.items():
            self.meta.setdefault(key, value)
        if "metrics" in other.meta:
            self.meta["metrics"] = {**metrics, **other_metrics}
        return self

    def chunk(self, chunks: int) -> list[Batch]:
        """Split into ``chunks`` equal parts (views); the length must be divisible by ``chunks``."""
        chunks = _positive_int("chunks", chunks)
        n = len(self)
        if n % chunks:
            raise BatchError(
                f"cannot chunk a Batch of {n} rows into {chunks} equal parts; "
                f"pad it with pad_to_divisor({chunks}) first and unpad the result"
            )
        size = n // chunks
        return [self.index(slice(i * size, (i + 1) * size)) for i in range(chunks)]

    def split(self, size: int) -> list[Batch]:
        """Split into consecutive parts (views) of ``size`` rows; the last may be shorter.

        An empty Batch gives one empty part.
        """
        size = _positive_int("split size", size)
        return [self.index(slice(start, start + size)) for start in range(0, max(len(self), 1), size)]

    @staticmethod
    def concat(batches: Iterable[Batch]) -> Batch:
        """Concatenate Batches along the rows.

        All parts must have the same tensor and non-tensor keys, and each tensor key the same dtype and
        trailing shape. Meta keys other than ``"metrics"`` must be set in every part with equal values.
        The parts' ``meta["metrics"]`` dicts are merged into ``{name: [v1, v2, ...]}`` in part order; a
        value that is already a list is extended into the result rather than nested.
        """
        parts = list(batches)
        if not parts:
            raise BatchError("concat needs at least one Batch")
        for i, part in enumerate(parts):
            if not isinstance(part, Batch):
                raise BatchTypeError(f"concat: part {i} is a {type(part).__name__}, not a Batch")
        first = parts[0]
        for i, part in enumerate(parts[1:], start=1):
            for kind, ours, theirs in (
                ("tensor", first.tensors, part.tensors),
                ("non-tensor", first.non_tensors, part.non_tensors),
            ):
                if ours.keys() != theirs.keys():
                    missing, extra = sorted(ours.keys() - theirs.keys()), sorted(theirs.keys() - ours.keys())
                    raise BatchError(
                        f"concat: part {i}'s {kind} keys differ from part 0's (missing {missing}, extra {extra})"
                    )
        tensors = {}
        for key, t in first.tensors.items():
            for i, part in enumerate(parts[1:], start=1):
                if part.tensors[key].dtype != t.dtype:
                    raise BatchError(
                        f"concat: tensor {key!r} is {t.dtype} in part 0 but {part.tensors[key].dtype} in part {i}"
                    )
            try:
                tensors[key] = torch.cat([part.tensors[key] for part in parts], dim=0)
            except RuntimeError as err:
                raise BatchError(f"concat: cannot concatenate tensor {key!r}: {err}") from err
        non_tensors = {key: np.concatenate([part.non_tensors[key] for part in parts]) for key in first.non_tensors}
        return Batch._make(tensors, non_tensors, _concat_meta([part.meta for part in parts]))

    def repeat(self, repeats: int, interleave: bool = True) -> Batch:
        """Repeat every row ``repeats`` times: ``[a, a, b, b]`` when ``interleave``, else ``[a, b, a, b]``.

        Object-array elements are shared between the copies, not duplicated.
        """
        repeats = _positive_int("repeats", repeats)
        if interleave:
            tensors = {k: t.repeat_interleave(repeats, dim=0) for k, t in self.tensors.items()}
            non_tensors = {k: np.repeat(a, repeats) for k, a in self.non_tensors.items()}
        else:
            tensors = {k: t.repeat(repeats, *([1] * (t.ndim - 1))) for k, t in self.tensors.items()}
            non_tensors = {k: np.tile(a, repeats) for k, a in self.non_tensors.items()}
        return Batch._make(tensors, non_tensors, dict(self.meta))

    def reorder(self, indices: RowIndex) -> None:
        """Reorder the rows in place so that new row ``i`` is old row ``indices[i]``.

        ``indices`` (a list, numpy array or torch tensor) must be a permutation of ``range(len(self))``.
        """
        n = len(self)
        rows = _normalize_index(indices, n)
        if isinstance(rows, slice):
            rows = np.arange(n, dtype=np.int64)[rows]
        if len(rows) != n or not np.array_equal(np.sort(rows), np.arange(n)):
            raise BatchError(f"reorder needs a permutation of range({n}), got {reprlib.repr(rows.tolist())}")
        reordered = self.index(rows)
        self.tensors.update(reordered.tensors)
        self.non_tensors.update(reordered.non_tensors)

    def pad_to_divisor(self, divisor: int) -> tuple[Batch, int]:
        """Pad with copies of the leading rows (cycling when more are needed) until the length is a
        multiple of ``divisor``; return ``(padded, pad_size)``. Undo with :meth:`unpad`.

        When no padding is needed the result is a shallow copy (see :meth:`select`).
        """
        divisor = _positive_int("divisor", divisor)
        n = len(self)
        pad_size = -n % divisor
        if not pad_size:
            return self.select(), 0
        rows = np.concatenate([np.arange(n), np.arange(pad_size) % n]).astype(np.int64)
        return self.index(rows), pad_size

    def unpad(self, pad_size: int) -> Batch:
        """A view without the last ``pad_size`` rows (the inverse of :meth:`pad_to_divisor`)."""
        if isinstance(pad_size, bool) or not isinstance(pad_size, (int, np.integer)):
            raise BatchTypeError(f"pad_size must be an int, got {pad_size!r}")
        n = len(self)
        if not 0 <= pad_size <= n:
            raise BatchError(f"pad_size must be between 0 and the Batch length {n}, got {pad_size}")
        return self.index(slice(0, n - int(pad_size)))

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor to ``device`` in place and return self."""
        for key, t in self.tensors.items():
            self.tensors[key] = t.to(device)
        return self

    def copy_to(self, device: torch.device | str) -> Batch:
        """A shallow copy whose tensors are on ``device``; this batch is left as it is."""
        return Batch({key: t.to(device) for key, t in self.tensors.items()}, dict(self.non_tensors), dict(self.meta))

    def __repr__(self) -> str:
        """A one-line summary: length, each key's shape and dtype, and the meta keys."""
        tensors = ", ".join(
            f"{k}: {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for k, t in self.tensors.items()
        )
        non_tensors = ", ".join(f"{k}: ({len(a)},)" for k, a in self.non_tensors.items())
        return f"Batch(len={len(self)}, tensors={{{tensors}}}, non_tensors={{{non_tensors}}}, meta={list(self.meta)})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state; tensor views are compacted so that only their own rows are serialized."""
        return {
            "tensors": {k: _compact(t) for k, t in self.tensors.items()},
            "non_tensors": self.non_tensors,
            "meta": self.meta,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`__getstate__`."""
        self.tensors, self.non_tensors, self.meta = state["tensors"], state["non_tensors"], state["meta"]


def _concat_meta(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """Meta of :meth:`Batch.concat`: keys other than ``metrics`` must agree; metrics become lists."""
    merged: dict[str, Any] = {}
    metrics: dict[str, list[Any]] = {}
    has_metrics = False
    for i, meta in enumerate(metas):
        if "metrics" in meta:
            has_metrics = True
            for name, value in _metrics_of(meta, f"part {i}").items():
                metrics.setdefault(name, []).extend(value if isinstance(value, list) else [value])
        for key, value in meta.items():
            if key == "metrics" or key in merged:
                continue
            for j, other in enumerate(metas):
                if key not in other:
                    raise BatchError(f"concat: meta {key!r} is set in part {i} but missing from part {j}")
                if not _values_equal(value, other[key]):
                    raise BatchError(
                        f"concat: meta {key!r} differs: {reprlib.repr(value)} in part {i}, "
                        f"{reprlib.repr(other[key])} in part {j}"
                    )
            merged[key] = value
    if has_metrics:
        merged["metrics"] = metrics
    return merged
