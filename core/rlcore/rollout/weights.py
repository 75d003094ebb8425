"""What rollout engines and trainers share about weights: checksums that detect a weight sync that silently
failed, and the check of pushed ``(name, tensor)`` pairs against the served model's state dict."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from rlcore.errors import RLCoreError

__all__ = ["ExpectedState", "check_weight_names", "float64_sum", "state_checksum"]


def float64_sum(tensors: Iterable[torch.Tensor]) -> float:
    """The float64 sum of all values of ``tensors`` (0.0 for none), each tensor summed on its device."""
    sums = [t.detach().to(torch.float64).sum().cpu() for t in tensors]
    return float(torch.stack(sums).sum()) if sums else 0.0


def _storage_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Identifies the memory a tensor views: equal for a tensor registered under two names (tied weights)."""
    return (tensor.device, tensor.dtype, tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))


def state_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]], skip: Iterable[str] = ()) -> float:
    """The float64 sum of all values of a state dict, counting each distinct parameter once.

    This is the quantity a rollout engine's ``weight_checksum()`` reports, computed on the trainer's
    side. A tensor registered under several names (tied input/output embeddings share one storage) is
    counted once; names in ``skip`` are not counted at all (pass the engine's ``uncounted_names`` when
    the trainer's state dict holds tied weights as separate copies, or holds buffers).
    """
    skipped = set(skip)
    seen: set[tuple[Any, ...]] = set()
    distinct = []
    for name, tensor in named_tensors:
        if name in skipped:
            continue
        key = _storage_key(tensor)
        if key not in seen:
            seen.add(key)
            distinct.append(tensor)
    return float64_sum(distinct)


def names_preview(names: list[str], limit: int = 10) -> str:
    """A comma-separated list of at most ``limit`` names, with the count of the rest."""
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")


def check_weight_names(engine: str, unexpected: list[str], mismatched: list[str], missing: list[str]) -> None:
    """Raise one :class:`RLCoreError` for a weight update into the ``engine`` rollout engine that named
    unknown parameters, gave wrong shapes (``"name (engine S, given T)"``) or left parameters out."""
    problems = []
    if unexpected:
        problems.append(f"unknown parameter names: {names_preview(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches: {names_preview(mismatched)}")
    if missing:
        problems.append(f"parameters not given: {names_preview(missing)}")
    if problems:
        raise RLCoreError(
            f"{engine} rollout weight update failed (the trainer's state-dict names must match the rollout "
            f"model's Hugging Face names) — {'; '.join(problems)}"
        )


class ExpectedState:
    """A model's Hugging Face state dict without its weights, to check weight updates against.

    ``shapes`` maps every state-dict name to its shape, ``parameters`` holds the distinct parameters'
    names, ``aliases`` maps each tied alias (``lm_head.weight`` with tied embeddings) to the parameter it
    shares, and ``max_positions`` is the config's ``max_position_embeddings`` (None when absent).
    """

    def __init__(
        self,
        shapes: dict[str, tuple[int, ...]],
        parameters: Iterable[str],
        aliases: dict[str, str],
        max_positions: int | None = None,
    ) -> None:
        self.shapes = shapes
        self.parameters = frozenset(parameters)
        self.aliases = aliases
        self.max_positions = max_positions

    @classmethod
    def from_pretrained(cls, model_path: str) -> ExpectedState:
        """The expected state of the causal LM at ``model_path``, built on the meta device (nothing loaded)."""
        from transformers import AutoConfig

        from rlcore.modelkit.vlm import policy_loader

        config = AutoConfig.from_pretrained(model_path)
        with torch.device("meta"):
            model = policy_loader(config).from_config(config)
        owners = {id(param): name for name, param in model.named_parameters()}
        entries = model.state_dict(keep_vars=True)
        aliases = {name: owners[id(tensor)] for name, tensor in entries.items() if owners.get(id(tensor), name) != name}
        max_positions = getattr(config, "max_position_embeddings", None)
        return cls(
            {name: tuple(tensor.shape) for name, tensor in entries.items()},
            owners.values(),
            aliases,
            int(max_positions) if max_positions else None,
        )

    def collect(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, dtype: torch.dtype, strict: bool, engine: str
    ) -> dict[str, torch.Tensor]:
        """The pushed tensors as a complete CPU state dict in ``dtype``, every tied alias filled in from its
        parameter (engines that keep a separate copy of a tied head need it).

        Raises :class:`RLCoreError` naming the unknown names, the names with a wrong shape and, when
        ``strict``, the parameters not given — before the caller sends anything to its ``engine``.
        """
        state: dict[str, torch.Tensor] = {}
        unexpected: list[str] = []
        mismatched: list[str] = []
        for name, tensor in named_tensors:
            shape = self.shapes.get(name)
            if shape is None:
                unexpected.append(name)
            elif tuple(tensor.shape) != shape:
                mismatched.append(f"{name} (engine {shape}, given {tuple(tensor.shape)})")
            elif name not in self.aliases:
                state[name] = tensor.detach().to(device="cpu", dtype=dtype).contiguous()
        check_weight_names(engine, unexpected, mismatched, sorted(self.parameters - set(state)) if strict else [])
        for alias, source in self.aliases.items():
            if source in state:
                state[alias] = state[source].clone()
        return state
