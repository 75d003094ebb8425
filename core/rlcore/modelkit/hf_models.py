"""The Hugging Face models that training engines train: loading, activation checkpointing, the value model,
and the teacher-forced log-probs and values of a micro-batch's response tokens (padded or packed, on one
rank or split over a Ulysses sequence-parallel group, :mod:`rlcore.modelkit.sequence_parallel`).

Shared by the engines of every backend that trains transformers models directly (FSDP, DeepSpeed), so
that they compute the same numbers the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlcore.algos import entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits
from rlcore.api.batch import Batch
from rlcore.api.training import GATHER_IDS, ModelOutput
from rlcore.errors import RLCoreError
from rlcore.modelkit.fused_logprobs import fused_head
from rlcore.modelkit.moe import MoeRouting, begin_batch, begin_sharded
from rlcore.modelkit.packed_attention import packed_forward, packed_sequences
from rlcore.modelkit.packing import PackedBatch, pack_batch
from rlcore.modelkit.prefix_grouper import grouped_logits
from rlcore.modelkit.sequence_parallel import (
    SequenceParallel,
    ShardedInput,
    gather_sequence,
    padded_length,
    shard_packed,
    shard_padded,
)
from rlcore.modelkit.token_ids import add_id_outputs
from rlcore.modelkit.vlm import policy_loader, rope_owner, vision_language_kwargs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from rlcore.config.sections.actor_rollout_ref import ModelConfig


def config_overrides(model: ModelConfig, key: str) -> dict[str, Any]:
    """``{key}.override_config`` of the typed model section ``model`` as a plain dict of Hugging Face config
    attributes (empty when null); a value that is not a mapping is an error naming the key."""
    overrides = {} if model.override_config is None else model.override_config
    if not isinstance(overrides, Mapping):
        raise RLCoreError(f"{key}.override_config must be a mapping of config attributes, got {overrides!r}")
    return {str(name): value for name, value in overrides.items()}


def load_pretrained(loader: Any, model: ModelConfig, key: str, dtype: torch.dtype) -> nn.Module:
    """``loader.from_pretrained`` for the typed model section ``model`` at ``key`` (``path``,
    ``override_config``, ``trust_remote_code``); a missing or unloadable path is an error naming ``key.path``.
    ``loader=None`` loads a policy with its language-modelling head, vision-language or not
    (:func:`rlcore.modelkit.vlm.policy_loader`)."""
    from transformers import AutoConfig

    path = model.path
    if not path:
        raise RLCoreError(f"{key}.path is not set: give a Hugging Face model directory or hub name")
    trust = bool(model.trust_remote_code)
    try:
        hf_config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        for name, value in config_overrides(model, key).items():
            setattr(hf_config, name, value)
        loader = policy_loader(hf_config) if loader is None else loader
        return loader.from_pretrained(path, config=hf_config, dtype=dtype, trust_remote_code=trust)
    except (OSError, ValueError) as exc:
        raise RLCoreError(f"{key}.path={path!r} cannot be loaded: {exc}") from exc


def hf_model(module: nn.Module) -> PreTrainedModel:
    """The Hugging Face model of an engine's ``module``, looking through a peft wrapper (for
    ``save_pretrained``); a module that is none (a value model) is an error naming its class."""
    from transformers import PreTrainedModel

    get_base_model = getattr(module, "get_base_model", None)
    model = get_base_model() if callable(get_base_model) else module
    if not isinstance(model, PreTrainedModel):
        raise RLCoreError(f"{type(model).__name__} is not a Hugging Face model: it has no Hugging Face export")
    return model


def enable_activation_checkpointing(model: Any) -> None:
    """Non-reentrant activation (gradient) checkpointing through the transformers API of this version."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether ``model.forward`` can project only some positions to the vocabulary (``logits_to_keep``); a
    wrapper that keeps the model as ``.module`` (a DeepSpeed engine) or a peft model is looked through."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base = getattr(base, "module", base)
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _sharded(
    model: nn.Module, batch: Batch, remove_padding: bool, key: str, sp: SequenceParallel, pad_multiple: int
) -> tuple[ShardedInput, PackedBatch | None]:
    """This rank's slice of ``batch`` (packed first with ``remove_padding``, its row padded to a multiple of
    ``pad_multiple`` rounded up to a multiple of the group size) and the packing, if any; a padded batch's mask
    in the dtype of ``model``'s parameters."""
    if remove_padding:
        packed = pack_batch(batch, key, padded_length(pad_multiple, sp) if pad_multiple > 1 else 1)
        return shard_packed(packed, sp), packed
    return shard_padded(batch, sp, next(model.parameters()).dtype), None


def _packed(model: nn.Module, packed: PackedBatch) -> AbstractContextManager[None]:
    """The block in which ``model`` runs the row of ``packed`` without an ``nnz × nnz`` mask
    (:func:`rlcore.modelkit.packed_attention.packed_forward`)."""
    return packed_forward(model, packed_sequences(packed.lengths, packed.input_ids.device))


def _responses(whole: torch.Tensor, batch: Batch, packed: PackedBatch | None) -> torch.Tensor:
    """``[B, R]`` from per-position results ``whole`` ``[B, T']`` (or ``[1, nnz']`` packed): the outputs
    at positions ``P−1 … P+R−2``, which predict the response tokens."""
    if packed is not None:
        return packed.unpack(whole[0, packed.keep_index])
    total, length = batch["input_ids"].shape[1], batch["responses"].shape[1]
    return whole[:, total - length - 1 : total - 1]


def _from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    restore: Callable[[torch.Tensor], torch.Tensor],
    *,
    with_entropy: bool,
    with_sum_pi_squared: bool,
) -> ModelOutput:
    """The per-token outputs of tempered ``logits`` ``[..., V]`` that predict ``labels``, each brought to
    ``[B, R]`` by ``restore``."""
    return ModelOutput(
        log_probs=restore(logprobs_from_logits(logits, labels)),
        entropy=restore(entropy_from_logits(logits)) if with_entropy else None,
        sum_pi_squared=restore(sum_pi_squared_from_logits(logits)) if with_sum_pi_squared else None,
    )


def _head(
    model: nn.Module, fused: str | None, temperature: float, labels: Callable[[], torch.Tensor]
) -> AbstractContextManager[None]:
    """With ``fused`` (a ``fused_kernel_options.impl_backend``), ``model``'s LM head returns fused per-token
    results for ``labels()`` (:func:`rlcore.modelkit.fused_logprobs.fused_head`); otherwise nothing changes."""
    return nullcontext() if fused is None else fused_head(model, labels(), temperature, fused)


@dataclass(frozen=True)
class _IdRequest:
    """The outputs read at several vocabulary ids a forward is asked for: the micro-batch's gather ids (laid
    out as the labels of the projected positions) and ``top_k``."""

    gather_ids: torch.Tensor | None = None
    top_k: int = 0

    @property
    def asked(self) -> bool:
        """Whether any such output is asked for."""
        return self.gather_ids is not None or self.top_k > 0


def _outputs(
    head_out: torch.Tensor,
    labels: torch.Tensor,
    restore: Callable[[torch.Tensor], torch.Tensor],
    temperature: float,
    fused: str | None,
    ids: _IdRequest,
    *,
    with_entropy: bool,
    with_sum_pi_squared: bool,
) -> ModelOutput:
    """The per-token outputs from what the LM head returned at the response positions: logits (tempered
    here) or, ``fused``, the ``[..., 3]`` log-probs, entropies and ``Σπ²`` already computed for ``labels``;
    ``ids`` (the gather ids laid out as ``labels``, and ``top_k``) adds the outputs read at several ids."""
    if fused is None:
        logits = head_out.float() / temperature
        output = _from_logits(
            logits, labels, restore, with_entropy=with_entropy, with_sum_pi_squared=with_sum_pi_squared
        )
        return add_id_outputs(output, logits, ids.gather_ids, ids.top_k, restore)
    return ModelOutput(
        log_probs=restore(head_out[..., 0]),
        entropy=restore(head_out[..., 1]) if with_entropy else None,
        sum_pi_squared=restore(head_out[..., 2]) if with_sum_pi_squared else None,
    )


def _padded_labels(batch: Batch, keep: bool) -> torch.Tensor:
    """The next token at every position the padded forward projects: ``R + 1`` positions with
    ``logits_to_keep``, else all ``T`` (0 where no response token follows)."""
    responses = batch["responses"]
    total, length = batch["input_ids"].shape[1], responses.shape[1]
    labels = responses.new_zeros((responses.shape[0], length + 1 if keep else total))
    labels[:, labels.shape[1] - length - 1 : labels.shape[1] - 1] = responses
    return labels


def _packed_labels(labels: torch.Tensor, packed: PackedBatch, keep: bool) -> torch.Tensor:
    """``[1, K]`` the response tokens ``labels`` at the positions the packed forward projects: only the
    kept ones with ``logits_to_keep``, else every position of the row (0 where no response token follows)."""
    if keep:
        return labels.unsqueeze(0)
    full = labels.new_zeros((1, packed.input_ids.shape[1]))
    full[0, packed.keep_index] = labels
    return full


def response_outputs(
    model: nn.Module,
    batch: Batch,
    temperature: float,
    *,
    with_entropy: bool,
    with_sum_pi_squared: bool = False,
    top_k: int = 0,
    remove_padding: bool = False,
    remove_padding_key: str = "actor_rollout_ref.model.use_remove_padding",
    sp: SequenceParallel | None = None,
    fused: str | None = None,
    moe: MoeRouting | None = None,
    record_routing: bool = False,
    replay_routing: bool = False,
    prefix_grouper: str | None = None,
    pad_multiple: int = 1,
) -> ModelOutput:
    """Teacher-forced log-probs of ``batch["responses"]`` under ``model`` and, when asked, the entropy and
    ``Σπ²`` of each next-token distribution, all ``[B, R]`` float32.

    The logits at positions ``P−1 … P+R−2`` predict the ``R`` response tokens; they are divided by
    ``temperature`` before the softmax so that they describe the distribution the rollout sampled from.
    Only those positions are projected to the vocabulary when the model supports ``logits_to_keep``.

    With ``remove_padding`` the batch runs packed into one row without padding
    (:func:`rlcore.modelkit.packing.pack_batch`), each layer attending within each sequence without an
    ``nnz × nnz`` mask (:mod:`rlcore.modelkit.packed_attention`); response positions that are not attended
    then get 0; ``pad_multiple`` (verl's ``pad_to_length_bucket``, 1 for none) pads the packed row at its end up to a
    multiple of that many tokens (rounded up to a multiple of the ``sp`` group size), a sequence of its own
    whose outputs are dropped, so that kernels see few shapes and the numbers are the same.
    Without it they hold whatever the padded forward gives. Either way only positions inside the
    attention mask are meaningful. A vision-language model also gets the rows' images and mrope position
    ids (:func:`rlcore.modelkit.vlm.vision_language_kwargs`). With ``sp`` the model (switched to Ulysses
    attention by :func:`rlcore.modelkit.sequence_parallel.install`) runs on this rank's slice of the sequence: each rank
    projects only its slice to the vocabulary and the per-token results are gathered over the group.
    With ``fused`` (``model.use_fused_kernels``: the ``fused_kernel_options.impl_backend``) the LM head
    computes the per-token results from the hidden states in chunks, without materialising the logits
    (:mod:`rlcore.modelkit.fused_logprobs`); the numbers are the same.

    ``moe`` (a mixture-of-experts model's hooked routers, :mod:`rlcore.modelkit.moe`) fills ``stats`` with the
    load-balancing loss and the expert load of the valid tokens; ``record_routing`` also fills
    ``routed_experts``, and ``replay_routing`` routes each token to the batch's ``routed_experts`` (when it
    has them). With ``sp`` each rank routes its slice of the sequence: the replayed routes are sliced the same
    way and the recorded ones gathered over the group (:func:`rlcore.modelkit.moe.begin_sharded`).

    ``prefix_grouper`` (the key of the setting, ``actor.use_prefix_grouper``) runs each group of adjacent rows
    that share their prompt as one row in which the prompt is computed once
    (:mod:`rlcore.modelkit.prefix_grouper`); the numbers are the same. It is refused, naming the setting,
    with packing, ``sp``, fused kernels, a mixture-of-experts or vision-language model, and log-probs at given
    token ids.

    ``top_k`` > 0 also fills ``top_k_ids`` and ``top_k_log_probs``, and a batch with
    :data:`~rlcore.api.training.GATHER_IDS` ``[B, R, k]`` also gets ``gathered_log_probs`` (gradients flow
    through them); neither with ``sp`` nor ``fused``, which never hold a position's whole logits.
    """
    wanted = {"with_entropy": with_entropy, "with_sum_pi_squared": with_sum_pi_squared}
    ids = _IdRequest(batch[GATHER_IDS] if GATHER_IDS in batch else None, top_k)
    if ids.asked and (sp is not None or fused is not None):
        raise RLCoreError(
            "log-probs at given token ids (top_k or the batch's gather_ids) need each position's whole logits: "
            "not with Ulysses sequence parallelism or fused kernels (model.use_fused_kernels)"
        )
    if prefix_grouper is not None:
        _check_groupable(model, prefix_grouper, remove_padding, sp, fused, moe, ids.asked)
        logits = grouped_logits(model, batch, accepts_logits_to_keep(model), prefix_grouper)
        return _from_logits(logits.float() / temperature, batch["responses"], lambda t: t, **wanted)
    if sp is not None:
        inputs, packed = _sharded(model, batch, remove_padding, remove_padding_key, sp, pad_multiple)
        routing, layout = (
            begin_sharded(
                moe,
                batch,
                sp,
                packed=packed is not None,
                replay=replay_routing,
                record=record_routing,
                padding=packed.padding if packed is not None else 0,
            )
            if moe is not None
            else (None, None)
        )
        with _head(model, fused, temperature, lambda: inputs.labels):
            logits = model(**inputs.model_kwargs(), use_cache=False).logits
        output = _outputs(
            logits,
            inputs.labels,
            lambda t: _responses(gather_sequence(t, sp, dim=1), batch, packed),
            temperature,
            fused,
            ids,
            **wanted,
        )
        if moe is not None and routing is not None:
            moe.finish(routing, output, layout)
        return output
    keep = accepts_logits_to_keep(model)
    packed = pack_batch(batch, remove_padding_key, pad_multiple) if remove_padding else None
    routing, layout = (
        begin_batch(
            moe,
            batch,
            packed=remove_padding,
            replay=replay_routing,
            record=record_routing,
            padding=packed.padding if packed is not None else 0,
        )
        if moe is not None
        else (None, None)
    )
    output = _unsharded_outputs(model, batch, temperature, packed, keep, fused, ids, wanted)
    if moe is not None and routing is not None:
        moe.finish(routing, output, layout)
    return output


def _check_groupable(
    model: nn.Module,
    key: str,
    remove_padding: bool,
    sp: SequenceParallel | None,
    fused: str | None,
    moe: MoeRouting | None,
    ids_asked: bool,
) -> None:
    """Refuse, naming ``key``, what the shared-prompt forward does not combine with (verl refuses the same)."""
    refused = [
        (ids_asked, "log-probs at given token ids (distillation's forward_kl_topk)"),
        (remove_padding, "model.use_remove_padding=true (packed sequences)"),
        (sp is not None, "ulysses_sequence_parallel_size > 1"),
        (fused is not None, "model.use_fused_kernels=true (a fused head takes one label per position)"),
        (moe is not None, "a mixture-of-experts model (its routing statistics and replay are per row)"),
        (rope_owner(model) is not None, "a vision-language model"),
    ]
    named = [what for hit, what in refused if hit]
    if named:
        raise RLCoreError(f"{key}=true cannot run with {', '.join(named)}")


def _unsharded_outputs(
    model: nn.Module,
    batch: Batch,
    temperature: float,
    packed: PackedBatch | None,
    keep: bool,
    fused: str | None,
    ids: _IdRequest,
    wanted: dict[str, bool],
) -> ModelOutput:
    """:func:`response_outputs` of a micro-batch that one rank runs whole, as its ``packed`` row or padded
    (``packed`` None)."""
    if packed is not None:
        kwargs: dict[str, Any] = {"input_ids": packed.input_ids, "position_ids": packed.position_ids}
        kwargs.update(vision_language_kwargs(model, batch, packed))
        if keep:
            kwargs["logits_to_keep"] = packed.keep_index
        labels = batch["responses"][packed.rows, packed.cols]
        with _head(model, fused, temperature, lambda: _packed_labels(labels, packed, keep)), _packed(model, packed):
            logits = model(**kwargs, use_cache=False).logits
        logits = logits[0] if keep else logits[0, packed.keep_index]
        if ids.gather_ids is not None:
            ids = _IdRequest(ids.gather_ids[packed.rows, packed.cols], ids.top_k)
        return _outputs(logits, labels, packed.unpack, temperature, fused, ids, **wanted)
    length = batch["responses"].shape[1]
    kwargs = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "position_ids": batch["position_ids"],
        "use_cache": False,
        **vision_language_kwargs(model, batch, None),
    }
    if keep:
        kwargs["logits_to_keep"] = length + 1
    with _head(model, fused, temperature, lambda: _padded_labels(batch, keep)):
        logits = model(**kwargs).logits
    logits = logits[:, :-1] if keep else logits[:, -length - 1 : -1]
    return _outputs(logits, batch["responses"], lambda t: t, temperature, fused, ids, **wanted)


class ValueModel(nn.Module):
    """A transformer backbone (``AutoModel``, no LM head) with a zero-initialised ``Linear(hidden, 1)`` head.

    Works for any decoder ``AutoModel`` loads (unlike ``AutoModelForTokenClassification``, which not every
    architecture has); the zero head makes every initial value 0.
    """

    def __init__(self, backbone: Any) -> None:
        """Wrap ``backbone`` (a transformers model) and add the value head in the backbone's dtype."""
        super().__init__()
        self.backbone = backbone
        self.config: Any = backbone.config
        hidden = self.config.get_text_config().hidden_size
        dtype = next(backbone.parameters()).dtype
        self.value_head = nn.Linear(hidden, 1, dtype=dtype)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | dict[str, torch.Tensor] | None,
        position_ids: torch.Tensor,
        keep_last: int = 0,
        keep_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Values ``[B, T, 1]`` of every position, of the last ``keep_last`` positions when it is > 0, or
        of the positions ``keep_index`` (along the sequence) when it is given.

        ``attention_mask`` is None for a packed row (:mod:`rlcore.modelkit.packing`) and a ready mask
        mapping under sequence parallelism. A module wrapped by FSDP2 must not return a view, so the
        trailing dimension is kept (no ``squeeze``) and the bias is added out of place (``Linear`` on a
        contiguous 3-D input returns a view of its matmul).
        """
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        if keep_index is not None:
            hidden = hidden[:, keep_index]
        elif keep_last:
            hidden = hidden[:, -keep_last:]
        return nn.functional.linear(hidden, self.value_head.weight) + self.value_head.bias


def response_values(
    model: nn.Module,
    batch: Batch,
    *,
    remove_padding: bool = False,
    remove_padding_key: str = "critic.model.use_remove_padding",
    sp: SequenceParallel | None = None,
    pad_multiple: int = 1,
) -> torch.Tensor:
    """Float32 values ``[B, R]`` at positions ``P−1 … P+R−2`` (the states before each response token).

    With ``remove_padding`` the batch runs packed into one row (:func:`rlcore.modelkit.packing.pack_batch`,
    attention as in :func:`response_outputs`, its end padded to a multiple of ``pad_multiple`` tokens) and response
    positions outside the attention mask get 0. With ``sp`` each rank of the group computes
    the values of its slice of the sequence and they are gathered.
    """
    if sp is not None:
        inputs, packed = _sharded(model, batch, remove_padding, remove_padding_key, sp, pad_multiple)
        kwargs = inputs.model_kwargs()
        local = model(kwargs["input_ids"], kwargs["attention_mask"], kwargs["position_ids"])[..., 0].float()
        return _responses(gather_sequence(local, sp, dim=1), batch, packed)
    if remove_padding:
        packed = pack_batch(batch, remove_padding_key, pad_multiple)
        with _packed(model, packed):
            values = model(packed.input_ids, None, packed.position_ids, keep_index=packed.keep_index)
        return packed.unpack(values[0, :, 0].float())
    length = batch["responses"].shape[1]
    values = model(batch["input_ids"], batch["attention_mask"], batch["position_ids"], keep_last=length + 1)
    return values[:, :-1, 0].float()
