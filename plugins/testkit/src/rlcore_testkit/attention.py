"""What attention a forward (and backward) actually ran: the ``scaled_dot_product_attention`` calls and the
shape of every tensor created, to check that a packed row of ``T`` tokens never gets a ``T × T`` mask
(:mod:`rlcore.modelkit.packed_attention`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


@dataclass(frozen=True)
class SdpaCall:
    """One call of ``torch.nn.functional.scaled_dot_product_attention``.

    Attributes:
        query: the query's shape ``[B, H, L, D]``.
        masked: whether it had an ``attn_mask``.
        causal: its ``is_causal``.
    """

    query: tuple[int, ...]
    masked: bool
    causal: bool


class _SdpaCalls(TorchFunctionMode):
    """Records every ``scaled_dot_product_attention`` call."""

    def __init__(self, calls: list[SdpaCall]) -> None:
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
            self.calls.append(SdpaCall(tuple(args[0].shape), mask is not None, bool(causal)))
        return func(*args, **kwargs)


class _Shapes(TorchDispatchMode):
    """Records the shape of every tensor an operator returns (forward and backward)."""

    def __init__(self, shapes: list[tuple[int, ...]]) -> None:
        super().__init__()
        self.shapes = shapes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.shapes.extend(tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


@dataclass
class AttentionProbe:
    """``with AttentionProbe() as probe: ...`` records the block's attention calls and created tensors.

    Attributes:
        calls: the ``scaled_dot_product_attention`` calls, in order.
        shapes: the shapes of the tensors every operator returned, forward and backward.
    """

    calls: list[SdpaCall] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    _modes: list[Any] = field(default_factory=list)

    def __enter__(self) -> AttentionProbe:
        """Start recording."""
        self._modes = [_SdpaCalls(self.calls), _Shapes(self.shapes)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop recording."""
        for mode in reversed(self._modes):
            mode.__exit__(exc_type, exc, tb)

    def squares(self, size: int) -> list[tuple[int, ...]]:
        """The recorded shapes ``[..., size, size]`` of three or more dimensions: a mask or score matrix
        ``[B, 1|H, T, T]`` for ``size = T`` (weights, two-dimensional, are left out; so choose ``size`` unlike
        the model's hidden and head sizes, whose activations ``[B, T, hidden]`` and ``[B, H, T, head]`` would
        match when ``T`` equals them)."""
        return [shape for shape in self.shapes if len(shape) >= 3 and shape[-2:] == (size, size)]
