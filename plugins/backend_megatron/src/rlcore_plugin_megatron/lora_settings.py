"""verl 0.10's ``actor_rollout_ref.model.lora`` section (LoRA on the Megatron backend): defaults and validation.

Torch-free, like :mod:`rlcore_plugin_megatron.settings`: the light ``hooks`` module declares the defaults.
The adapters themselves are :mod:`rlcore_plugin_megatron.lora`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.api import RLCoreError
from rlcore_plugin_megatron.config import MegatronLoRAConfig

#: verl 0.10's ``model.lora`` keys and defaults (:class:`~rlcore_plugin_megatron.config.MegatronLoRAConfig`)
LORA_DEFAULTS: dict[str, Any] = MegatronLoRAConfig().tree()
#: the megatron-core linear layers an adapter can wrap and how tensor parallelism splits them: a column-parallel
#: layer's output (its adapter: A replicated, B split by output), a row-parallel layer's input (A split by input,
#: B replicated). In a mixture-of-experts layer ``linear_fc1``/``linear_fc2`` also name every expert's (and the
#: shared expert's) projections.
TARGET_LAYERS: dict[str, str] = {
    "linear_qkv": "column",
    "linear_fc1": "column",
    "linear_proj": "row",
    "linear_fc2": "row",
}
A_INIT_METHODS = ("xavier", "kaiming")
DROPOUT_POSITIONS = ("pre", "post")


@dataclass(frozen=True)
class LoraSettings:
    """A resolved ``model.lora`` section with LoRA on.

    Attributes:
        key: the section's dotted key (``actor_rollout_ref.model.lora``), named by errors.
        rank: ``rank`` (> 0): the inner dimension of every adapter.
        alpha: ``alpha``; an adapter adds ``alpha / rank · B·A·x`` to its layer's output.
        dropout: ``dropout``: the probability of the adapter's dropout (training only).
        dropout_position: ``pre`` (on the adapter's input) or ``post`` (on its output).
        target_modules: module names (``linear_qkv``) or ``fnmatch`` patterns of whole module names with global
            layer and expert numbers (``decoder.layers.0.*.linear_qkv``).
        exclude_modules: names or patterns of the modules left without an adapter.
        a_init: ``lora_A_init_method``: ``xavier`` (Xavier-uniform) or ``kaiming`` (Kaiming-uniform, ``a=√5``).
        merge: verl's ``merge`` (the rollout gets merged weights either way; see the README).
    """

    key: str
    rank: int
    alpha: float
    dropout: float
    dropout_position: str
    target_modules: tuple[str, ...]
    exclude_modules: tuple[str, ...]
    a_init: str
    merge: bool

    @property
    def scaling(self) -> float:
        """The factor of the adapters' output: ``alpha / rank``."""
        return self.alpha / self.rank

    def adapts(self, module_name: str) -> bool:
        """Whether the layer with global name ``module_name`` gets an adapter: its last part is a
        :data:`TARGET_LAYERS` name, a target matches it and no exclusion does."""
        if module_name.rpartition(".")[2] not in TARGET_LAYERS:
            return False
        return _matches(module_name, self.target_modules) and not _matches(module_name, self.exclude_modules)


def _matches(module_name: str, patterns: tuple[str, ...]) -> bool:
    """Whether a pattern is the module's last name or matches its whole name (``fnmatch``)."""
    last = module_name.rpartition(".")[2]
    return any(pattern == last or fnmatch.fnmatchcase(module_name, pattern) for pattern in patterns)


def _names(value: Any, key: str) -> tuple[str, ...]:
    """A list of non-empty strings (a single string counts as one); errors name ``key``."""
    if isinstance(value, (ListConfig, DictConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        value = [value]
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(name, str) and name for name in value):
        raise RLCoreError(f"{key} must be a list of module names or patterns, got {value!r}")
    return tuple(value)


def _only(resolved: Mapping[str, Any], key: str, name: str, allowed: tuple[Any, ...], why: str) -> None:
    """An error naming ``key.name`` unless its value is one of ``allowed``."""
    value = resolved[name]
    if value not in allowed or type(value) not in {type(a) for a in allowed}:
        raise RLCoreError(f"{key}.{name}={value!r} is not supported: {why}")


def resolve_lora(section: Mapping[str, Any] | None, key: str) -> LoraSettings | None:
    """The ``model.lora`` section at ``key`` merged over :data:`LORA_DEFAULTS` and checked; None when ``rank``
    is 0 (LoRA off).

    Rejected, each with an error naming the key: unknown keys, another ``type`` than ``lora``, a target that is
    not one of :data:`TARGET_LAYERS`, a ``lora_B_init_method`` other than ``zero``, ``a2a_experimental``, an
    adapter ``dtype`` other than float32, ``adapter_path`` and ``freeze_*`` set to false.
    """
    resolved = dict(LORA_DEFAULTS)
    for name, value in (section or {}).items():
        if name not in LORA_DEFAULTS:
            raise RLCoreError(f"unknown key {key}.{name}; known keys: {', '.join(LORA_DEFAULTS)}")
        resolved[name] = value
    rank = resolved["rank"]
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise RLCoreError(f"{key}.rank must be a non-negative integer (0 = no LoRA), got {rank!r}")
    if rank == 0:
        return None
    alpha = resolved["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise RLCoreError(f"{key}.alpha must be a positive number, got {alpha!r}")
    dropout = resolved["dropout"]
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise RLCoreError(f"{key}.dropout must be a number in [0, 1), got {dropout!r}")
    _only(
        resolved, key, "type", ("lora",), "rlcore's Megatron engine has plain LoRA adapters (no canonical_lora or DoRA)"
    )
    _only(resolved, key, "dropout_position", DROPOUT_POSITIONS, "choose pre (the adapter's input) or post (its output)")
    _only(resolved, key, "lora_A_init_method", A_INIT_METHODS, "choose xavier or kaiming")
    _only(
        resolved, key, "lora_B_init_method", ("zero",), "B starts at zero so that the first policy is the base model's"
    )
    _only(
        resolved,
        key,
        "a2a_experimental",
        (False,),
        "Megatron-Bridge's experimental all-to-all for expert adapters; rlcore's expert adapters live on their "
        "expert's rank and need no communication",
    )
    _only(resolved, key, "dtype", (None, "float32", "fp32"), "the engine trains in float32; leave it null")
    _only(
        resolved,
        key,
        "adapter_path",
        (None,),
        "loading a Megatron-Bridge adapter is not implemented; resume from an rlcore checkpoint instead",
    )
    _only(resolved, key, "freeze_language_model", (True,), "LoRA trains the adapters only; the base model stays frozen")
    for name in ("freeze_vision_model", "freeze_vision_projection"):
        _only(
            resolved,
            key,
            name,
            (True,),
            "the Megatron engine builds text-only models: there is no vision part to train",
        )
    if not isinstance(resolved["merge"], bool):
        raise RLCoreError(f"{key}.merge must be true or false, got {resolved['merge']!r}")
    targets = _names(resolved["target_modules"], f"{key}.target_modules")
    if not targets:
        raise RLCoreError(f"{key}.target_modules is empty: name at least one of {', '.join(TARGET_LAYERS)}")
    for target in targets:
        if target.rpartition(".")[2] not in TARGET_LAYERS:
            raise RLCoreError(
                f"{key}.target_modules: {target!r} is not a layer LoRA can adapt on the Megatron engine; name one of "
                f"{', '.join(TARGET_LAYERS)} (or a pattern ending with one)"
            )
    return LoraSettings(
        key=key,
        rank=rank,
        alpha=float(alpha),
        dropout=float(dropout),
        dropout_position=str(resolved["dropout_position"]),
        target_modules=targets,
        exclude_modules=_names(resolved["exclude_modules"], f"{key}.exclude_modules"),
        a_init=str(resolved["lora_A_init_method"]),
        merge=resolved["merge"],
    )
