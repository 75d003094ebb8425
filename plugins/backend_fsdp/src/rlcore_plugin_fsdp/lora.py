"""LoRA through peft (``actor_rollout_ref.model.lora_rank > 0`` or a ``lora_adapter_path``): adapters on the actor,
merged weights out.

The actor is wrapped with ``peft.get_peft_model`` (or loads ``lora_adapter_path``, whose ``adapter_config.json``
gives the rank when ``lora_rank`` is 0, as verl's scripts that resume from an adapter expect) so that only the
adapter matrices train. The reference policy is the same model with its adapters disabled. The rollout engine,
which knows nothing about adapters, receives merged Hugging Face weights ``W + scaling · B·A`` computed
from the gathered full state dict, leaving the training model untouched.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcore.api import ModelConfig, RLCoreError

#: prefix peft puts before the wrapped model's parameter names
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraSettings:
    """The validated LoRA keys of a ``model`` section.

    Attributes:
        rank: ``lora_rank`` (> 0).
        alpha: ``lora_alpha``; the adapter output is scaled by ``alpha / rank``.
        target_modules: ``target_modules``: ``"all-linear"`` (every linear layer but the output head) or a
            list of module names.
        exclude_modules: ``exclude_modules`` (verl's key, peft's semantics): modules that get no adapter, a
            regular expression that must match a module's whole name or a list of names (a module matches a
            name it equals or ends with ``.name``); None excludes nothing.
        adapter_path: ``lora_adapter_path``: a saved peft adapter to start from, or None.
    """

    rank: int
    alpha: float
    target_modules: str | list[str]
    adapter_path: str | None
    exclude_modules: str | list[str] | None = None


def adapter_rank(path: str, key: str) -> int:
    """The rank ``r`` of the peft adapter saved at ``path`` (its ``adapter_config.json``); a folder without one, or
    one without a positive integer ``r``, is an error naming ``{key}.lora_adapter_path``."""
    config = Path(path) / "adapter_config.json"
    try:
        rank = json.loads(config.read_text()).get("r")
    except (OSError, ValueError) as exc:
        raise RLCoreError(
            f"{key}.lora_adapter_path={path!r}: no peft adapter there ({config} cannot be read: {exc})"
        ) from exc
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise RLCoreError(f"{key}.lora_adapter_path={path!r}: {config} has no positive integer rank r ({rank!r})")
    return rank


def lora_settings(model: ModelConfig, key: str) -> LoraSettings | None:
    """The LoRA settings of the typed model section ``model`` at ``key``, or None when ``lora_rank`` is 0 or
    null and no ``lora_adapter_path`` is given (LoRA off). With an adapter path and ``lora_rank`` 0 the rank is
    the adapter's (:func:`adapter_rank`); the adapter must exist either way.

    Raises:
        RLCoreError: an invalid ``lora_rank``, ``lora_alpha`` or ``target_modules``, or an adapter path without
            a peft adapter, naming the key.
    """
    rank = model.lora_rank or 0
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise RLCoreError(f"{key}.lora_rank must be a non-negative integer (0 = no LoRA), got {rank!r}")
    path = model.lora_adapter_path or None
    if path is not None:
        rank = rank or adapter_rank(path, key)
    if rank == 0:
        return None
    alpha = model.lora_alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise RLCoreError(f"{key}.lora_alpha must be a positive number, got {alpha!r}")
    targets: Any = model.target_modules
    if isinstance(targets, str):
        targets = targets if targets == "all-linear" else [targets]
    if not targets or not isinstance(targets, (str, list)) or not all(isinstance(t, str) for t in targets):
        raise RLCoreError(f"{key}.target_modules must be 'all-linear' or a list of module names, got {targets!r}")
    excluded: Any = model.exclude_modules
    if excluded is not None and not (
        (isinstance(excluded, str) and excluded)
        or (isinstance(excluded, list) and all(isinstance(e, str) and e for e in excluded))
    ):
        raise RLCoreError(
            f"{key}.exclude_modules must be a regular expression or a list of module names, got {excluded!r}"
        )
    if isinstance(excluded, str):
        try:
            re.compile(excluded)
        except re.error as exc:
            raise RLCoreError(f"{key}.exclude_modules={excluded!r} is not a valid regular expression: {exc}") from exc
    return LoraSettings(
        rank=rank,
        alpha=float(alpha),
        target_modules=targets,
        adapter_path=path,
        exclude_modules=excluded or None,
    )


def apply_lora(model: nn.Module, settings: LoraSettings, key: str) -> nn.Module:
    """Wrap ``model`` in a peft ``PeftModel`` with trainable LoRA adapters (everything else frozen).

    A missing peft installation or an adapter that cannot be loaded is an error naming ``key``.
    """
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError as exc:
        raise RLCoreError(
            f"{key}.lora_rank > 0 needs peft: pip install 'rlcore-plugin-fsdp[lora]' (or pip install peft)"
        ) from exc
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        if settings.adapter_path:
            try:
                return PeftModel.from_pretrained(model, settings.adapter_path, is_trainable=True)
            except (OSError, ValueError) as exc:
                raise RLCoreError(f"{key}.lora_adapter_path={settings.adapter_path!r} cannot be loaded: {exc}") from exc
        config = LoraConfig(
            r=settings.rank,
            # peft annotates lora_alpha as int, but scales by lora_alpha / r: a float alpha works as written
            lora_alpha=settings.alpha,  # type: ignore[arg-type]
            target_modules=settings.target_modules,
            exclude_modules=settings.exclude_modules,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            return get_peft_model(model, config)
        except ValueError as exc:
            raise RLCoreError(
                f"{key}.target_modules={settings.target_modules!r}, "
                f"{key}.exclude_modules={settings.exclude_modules!r}: {exc}"
            ) from exc


@dataclass(frozen=True)
class LoraMerger:
    """Turns a peft model's full state dict into merged Hugging Face weights.

    Attributes:
        layers: for every adapted module (its name inside the peft model): the active adapter's name, its
            scaling and whether the base weight is stored transposed (``fan_in_fan_out``).
    """

    layers: dict[str, tuple[str, float, bool]]

    @classmethod
    def from_model(cls, model: nn.Module) -> LoraMerger:
        """Collect the adapted modules of a peft ``model`` (before or after FSDP wrapping)."""
        from peft.tuners.lora import LoraLayer

        layers: dict[str, tuple[str, float, bool]] = {}
        for name, module in model.named_modules():
            if isinstance(module, LoraLayer):
                adapter = module.active_adapters[0]
                if adapter in module.lora_A:
                    scaling = float(module.scaling[adapter])
                    layers[name] = (adapter, scaling, bool(getattr(module, "fan_in_fan_out", False)))
        return cls(layers)

    def merge_stream(
        self, state: Mapping[str, torch.Tensor], full: Callable[[torch.Tensor], torch.Tensor]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The merged weights of :meth:`merge`, one at a time, from a *sharded* state dict: ``full`` gathers
        one tensor (``DTensor.full_tensor``), so an adapted weight gathers only its base weight and its two
        adapter matrices (verl's ``layered_summon``: the peft model is never gathered whole). Every rank
        must consume the stream in the same order (the gathers are collective)."""
        for name, tensor in state.items():
            if ".lora_" in name:
                continue
            module, _, leaf = name.rpartition(".")
            owner = module.removesuffix(".base_layer")
            part = {name: full(tensor)}
            if module.endswith(".base_layer") and owner in self.layers and leaf == "weight":
                adapter = self.layers[owner][0]
                for matrix in ("lora_A", "lora_B"):
                    key = f"{owner}.{matrix}.{adapter}.weight"
                    part[key] = full(state[key])
            yield from self.merge(part).items()

    def merge(self, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Merged weights with Hugging Face names from the peft model's full state dict ``state``.

        For every adapted module ``W + scaling · B·A`` replaces ``<module>.base_layer.weight`` under the
        name ``<module>.weight``; adapter matrices are dropped and the ``base_model.model.`` prefix removed.
        New tensors are created, so ``state`` (and the model it came from) is left unchanged.
        """
        merged: dict[str, torch.Tensor] = {}
        for name, tensor in state.items():
            module, _, leaf = name.rpartition(".")
            if ".lora_" in name:
                continue
            if module.endswith(".base_layer") and module.removesuffix(".base_layer") in self.layers:
                owner = module.removesuffix(".base_layer")
                if leaf == "weight":
                    adapter, scaling, transposed = self.layers[owner]
                    a = state[f"{owner}.lora_A.{adapter}.weight"]
                    b = state[f"{owner}.lora_B.{adapter}.weight"]
                    delta = (b.float() @ a.float()) * scaling
                    tensor = (tensor.float() + (delta.T if transposed else delta)).to(tensor.dtype)
                name = f"{owner}.{leaf}"
            merged[name.removeprefix(PEFT_PREFIX)] = tensor
        return merged
