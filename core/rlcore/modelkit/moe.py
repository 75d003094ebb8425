"""The routers of Hugging Face mixture-of-experts models in the training forward: the load-balancing loss,
the expert-load statistics, and routing record and replay (``router_replay.mode`` R2/R3).

A :class:`MoeRouting` hooks every router of one model once (a forward hook that may replace the router's
``(logits, weights, experts)``). Before each forward pass the caller opens a :class:`RoutingPass` with
:meth:`MoeRouting.begin`, telling it which tokens are valid (padding never counts) and, to replay, which
experts each token must use; the hooks fill the pass layer by layer. A pass with gradients stays current
until :meth:`MoeRouting.end` (after its backward), so that a backward that recomputes checkpointed layers
routes them the same way; a pass without gradients ends with :meth:`MoeRouting.finish`.

Only routers whose semantics are known are accepted (:data:`SOFTMAX_TOP_K_ROUTERS`: a softmax over the
router logits, the top-k of those probabilities, renormalised with ``norm_topk_prob``); any other
mixture-of-experts model is an error naming its ``model_type``, never silently wrong numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from rlcore.api.batch import Batch
from rlcore.api.training import ROUTED_EXPERTS, ModelOutput
from rlcore.config.keys import select
from rlcore.config.router_replay import REPLAY_MODES, is_moe_fields, replay_mode
from rlcore.errors import RLCoreError
from rlcore.modelkit.sequence_parallel import SequenceParallel, attended_slice, gather_sequence, padded_length

#: router classes of transformers whose ``forward(hidden) -> (logits, weights, experts)`` is: softmax over the
#: ``[N, E]`` logits, top-k of the probabilities, divided by their sum when ``norm_topk_prob`` (the same code in
#: every one of these families)
SOFTMAX_TOP_K_ROUTERS: tuple[str, ...] = (
    "Qwen2MoeTopKRouter",
    "Qwen3MoeTopKRouter",
    "Qwen3NextTopKRouter",
    "OlmoeTopKRouter",
    "FlexOlmoTopKRouter",
)


#: the mixture-of-experts ``model_type``s whose forward takes the mask mapping of rlcore's Ulysses attention
#: (:mod:`rlcore.modelkit.sequence_parallel`); Qwen3-MoE's builds its mask from a tensor only
ULYSSES_MOE_TYPES: tuple[str, ...] = ("qwen2_moe",)


def _base(model: nn.Module) -> Any:
    """The transformers model of ``model``, looking through a peft wrapper."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def load_balancing_loss(counts: torch.Tensor, prob_sums: torch.Tensor, tokens: torch.Tensor | float) -> torch.Tensor:
    """The load-balancing loss as transformers' ``load_balancing_loss_func`` defines it for the softmax top-k
    families, pooled over layers: ``E · Σ_e f_e · P_e`` with ``f_e = counts[e] / tokens`` (the share of routed
    (token, layer) entries that chose expert ``e``, ``k`` entries per token) and ``P_e = prob_sums[e] / tokens``
    (the mean router probability of ``e``). ``counts`` and ``prob_sums`` (``[E]``) are summed over the valid
    tokens of every layer and ``tokens`` is valid tokens × layers; the value is ``k`` when the load is perfectly
    even. Every engine logs ``moe_aux_loss`` with this one definition; the gradient flows through
    ``prob_sums``."""
    return (counts / tokens * (prob_sums / tokens)).sum() * counts.shape[-1]


def sparse_routers(model: nn.Module) -> list[Any]:
    """The router of every sparse layer of ``model``, in layer order: the modules whose class is a known
    softmax top-k router (:data:`SOFTMAX_TOP_K_ROUTERS`); empty for a dense model. The training forward and
    the rollout's recorder (:mod:`rlcore_plugin_hf.routing`) hook these."""
    return [module for module in model.modules() if type(module).__name__ in SOFTMAX_TOP_K_ROUTERS]


def _unknown_routers(model: nn.Module) -> list[str]:
    """Class names of ``model``'s modules that look like routers but are not known ones (for the error)."""
    names = {type(m).__name__ for m in model.modules() if "router" in type(m).__name__.lower()}
    return sorted(names - set(SOFTMAX_TOP_K_ROUTERS))


@dataclass
class RoutingPass:
    """What the routers did in one forward pass of one micro-batch.

    Attributes:
        valid: ``[N]`` bool, the flattened tokens that count (inside the attention mask; packed tokens all do).
        replay: ``[N, L, k]`` long, the experts each token must use (``-1``: recompute), or None.
        record: whether to keep the experts each token used (``ModelOutput.routed_experts``, :meth:`MoeRouting.finish`).
        used: per layer, the ``[N, k]`` experts the layer used.
        counts: per layer, ``[E]`` float: how many valid tokens chose each expert (no gradient).
        prob_sums: per layer, ``[E]`` float: the valid tokens' summed router probabilities (with gradient).
        agreed: per layer, ``(agreeing, replayed)`` counts of valid replayed entries whose recomputed top-k set
            equals the replayed set.
    """

    valid: torch.Tensor
    replay: torch.Tensor | None
    record: bool
    used: dict[int, torch.Tensor] = field(default_factory=dict)
    counts: dict[int, torch.Tensor] = field(default_factory=dict)
    prob_sums: dict[int, torch.Tensor] = field(default_factory=dict)
    agreed: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def route(self, layer: int, router: nn.Module, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Layer ``layer``'s router output, replayed where asked, with its statistics recorded."""
        logits, weights, chosen = output[0], output[1], output[2]
        probs = torch.softmax(logits.float(), dim=-1)
        experts = chosen
        if self.replay is not None:
            wanted = self.replay[:, layer].to(device=chosen.device, dtype=chosen.dtype)
            replayed = (wanted >= 0).all(-1)
            experts = torch.where(replayed[:, None], wanted, chosen)
            same = (chosen.sort(-1).values == wanted.sort(-1).values).all(-1)
            counted = replayed & self.valid
            self.agreed[layer] = ((same & counted).sum(), counted.sum())
            weights = probs.gather(-1, experts)
            if router.norm_topk_prob:
                weights = weights / weights.sum(-1, keepdim=True)
            weights = weights.to(logits.dtype)
        mask = self.valid.to(probs.dtype)
        counts = torch.zeros(probs.shape[-1], dtype=probs.dtype, device=probs.device)
        counts.scatter_add_(0, experts.reshape(-1), mask.repeat_interleave(experts.shape[-1]))
        self.counts[layer] = counts.detach()
        self.prob_sums[layer] = (probs * mask[:, None]).sum(0)
        if self.record:
            self.used[layer] = experts.detach()
        return (logits, weights, experts, *output[3:])

    def tokens(self) -> torch.Tensor:
        """The number of valid tokens (as a float tensor)."""
        return self.valid.sum().float()

    def aux_loss(self) -> torch.Tensor:
        """The load-balancing loss of this pass (:func:`load_balancing_loss` over the valid tokens of every
        layer). The experts are those the layers used (replayed ones under replay)."""
        layers = sorted(self.prob_sums)
        counts = torch.stack([self.counts[layer] for layer in layers]).sum(0)
        prob_sums = torch.stack([self.prob_sums[layer] for layer in layers]).sum(0)
        return load_balancing_loss(counts, prob_sums, self.tokens().clamp_min(1.0) * len(layers))

    def load_max_over_mean(self) -> float:
        """Per layer, the busiest expert's count of valid tokens over the mean count; averaged over the layers
        (1.0 is a perfectly even load; ``E / k`` is every token on the same experts)."""
        ratios = [counts.max() / counts.mean().clamp_min(1e-12) for counts in self.counts.values()]
        return float(torch.stack(ratios).mean())

    def agreement(self) -> float | None:
        """The fraction of valid replayed (token, layer) entries whose recomputed top-k set equals the replayed
        one; None when nothing was replayed."""
        if not self.agreed:
            return None
        agreeing = sum(float(pair[0]) for pair in self.agreed.values())
        replayed = sum(float(pair[1]) for pair in self.agreed.values())
        return agreeing / replayed if replayed else None


class MoeRouting:
    """The hooked routers of one mixture-of-experts model (see the module docstring)."""

    def __init__(self, routers: list[Any], aux_loss_coef: float) -> None:
        """Hook each of ``routers`` (in layer order); ``aux_loss_coef`` weighs the load-balancing loss."""
        self.num_layers = len(routers)
        self.top_k = int(routers[0].top_k)
        self.num_experts = int(routers[0].num_experts)
        self.aux_loss_coef = aux_loss_coef
        self.current: RoutingPass | None = None
        for layer, router in enumerate(routers):
            router.register_forward_hook(self._hook(layer))

    def _hook(self, layer: int) -> Any:
        """The forward hook of the router of layer ``layer``: routes through the current pass, if any."""

        def hook(router: nn.Module, _inputs: Any, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            if self.current is None:
                return output
            return self.current.route(layer, router, output)

        return hook

    def begin(self, valid: torch.Tensor, replay: torch.Tensor | None, *, record: bool) -> RoutingPass:
        """Open the pass of the next forward: ``valid`` ``[N]`` marks the flattened tokens that count,
        ``replay`` ``[N, L, k]`` the experts to use (``-1``: recompute) or None, ``record`` keeps the routing."""
        if replay is not None and tuple(replay.shape[1:]) != (self.num_layers, self.top_k):
            raise RLCoreError(
                f"the batch's {ROUTED_EXPERTS} has {tuple(replay.shape[1:])} (layers, experts per token) per token, "
                f"but this model routes {self.num_layers} layers to {self.top_k} experts each: it was recorded "
                "with another model"
            )
        if replay is not None and replay.numel() and int(replay.max()) >= self.num_experts:
            raise RLCoreError(
                f"the batch's {ROUTED_EXPERTS} names expert {int(replay.max())}, but this model has "
                f"{self.num_experts} experts: it was recorded with another model"
            )
        self.current = RoutingPass(valid=valid.bool().reshape(-1), replay=replay, record=record)
        return self.current

    def finish(
        self, routing: RoutingPass, output: ModelOutput, layout: Callable[[torch.Tensor], torch.Tensor] | None
    ) -> None:
        """Fill ``output.stats`` (``moe_aux_loss``, ``moe_load_max_over_mean`` and, when replayed,
        ``router_replay_agreement``) and, when recorded, ``output.routed_experts`` laid out by ``layout``
        (a callable that puts ``[N, L, k]`` back into ``[B, T, L, k]`` with ``-1`` outside the mask)."""
        if len(routing.prob_sums) != self.num_layers:
            raise RLCoreError(
                f"the forward pass ran {len(routing.prob_sums)} of the model's {self.num_layers} routers: "
                "rlcore cannot account for its mixture-of-experts layers"
            )
        output.stats["moe_aux_loss"] = float(routing.aux_loss().detach())
        output.stats["moe_load_max_over_mean"] = routing.load_max_over_mean()
        agreement = routing.agreement()
        if agreement is not None:
            output.stats["router_replay_agreement"] = agreement
        if routing.record and layout is not None:
            used = torch.stack([routing.used[layer] for layer in range(self.num_layers)], dim=1)
            output.routed_experts = layout(used).cpu()
        if not torch.is_grad_enabled():
            self.current = None  # no backward will recompute these layers

    def end(self) -> None:
        """Close the current pass once its backward has run: later forwards (an export, a probe) route freely."""
        self.current = None

    def add_aux_loss(self, loss: torch.Tensor, micro_batches: int) -> torch.Tensor:
        """``loss`` plus ``aux_loss_coef × aux / micro_batches`` of the pass just run (``loss`` itself when the
        coefficient is 0): averaged over the micro-batches of an optimizer step on each rank, and over the
        ranks by the engine's gradient averaging, the aux term is the mean over every micro-batch of the step."""
        if self.aux_loss_coef <= 0 or self.current is None:
            return loss
        return loss + self.current.aux_loss() * (self.aux_loss_coef / micro_batches)


def attach(model: nn.Module, model_key: str) -> MoeRouting | None:
    """Hook the routers of ``model`` when it is a mixture of experts (None for a dense model); a model hooked
    before (a reference engine sharing the actor's model) keeps its one set of hooks.

    ``router_aux_loss_coef`` comes from the model's config (``{model_key}.override_config`` has already been
    applied). A mixture-of-experts model whose routers are not known softmax top-k routers is an error naming
    ``{model_key}.path``'s ``model_type``.
    """
    base = _base(model)
    hooked = getattr(base, "_rlcore_moe_routing", None)
    if isinstance(hooked, MoeRouting):
        return hooked
    text = base.config.get_text_config()
    if not is_moe_fields(text.to_dict()):
        return None
    routers = sparse_routers(base)
    if not routers:
        others = _unknown_routers(base)
        found = f" (its routers: {', '.join(others)})" if others else ""
        raise RLCoreError(
            f"{model_key}.path: model_type {text.model_type!r} is a mixture of experts whose routers rlcore "
            f"cannot train{found}; supported routers: {', '.join(SOFTMAX_TOP_K_ROUTERS)}"
        )
    coef = float(getattr(text, "router_aux_loss_coef", 0.0) or 0.0)
    routing = MoeRouting(routers, coef)
    base._rlcore_moe_routing = routing
    return routing


@dataclass(frozen=True)
class EngineRouting:
    """What a training engine does with its mixture-of-experts model's routing.

    Attributes:
        routing: the hooked routers.
        mode: ``router_replay.mode`` of the engine's section (the reference's is always ``disabled``).
    """

    routing: MoeRouting
    mode: str

    def forward_kwargs(self, *, training: bool) -> dict[str, Any]:
        """The routing keywords of :func:`rlcore.modelkit.hf_models.response_outputs`: a pass without
        gradients (the log-prob pass) records with R2 and replays with R3; a training pass replays with either."""
        replay = self.mode == "R3" or (training and self.mode == "R2")
        return {"moe": self.routing, "record_routing": not training and self.mode == "R2", "replay_routing": replay}


def engine_routing(
    model: nn.Module, config: DictConfig, role: str, section: str, model_key: str
) -> EngineRouting | None:
    """The routing of the ``actor`` or ``ref`` engine's ``model`` (None for other roles and dense models);
    ``{section}.router_replay.mode`` must be a known mode, and replay needs a mixture-of-experts model."""
    if role not in ("actor", "ref"):
        return None
    mode = replay_mode(config, section) if role == "actor" else "disabled"
    if mode not in REPLAY_MODES:
        raise RLCoreError(f"{section}.router_replay.mode={mode!r} is not a mode: choose {', '.join(REPLAY_MODES)}")
    routing = attach(model, model_key)
    sp_key = f"{section}.ulysses_sequence_parallel_size"
    model_type = _base(model).config.model_type
    sp_size = select(config, sp_key)
    if routing is not None and isinstance(sp_size, int) and sp_size > 1 and model_type not in ULYSSES_MOE_TYPES:
        raise RLCoreError(
            f"{sp_key}={sp_size} is not supported for the mixture-of-experts model_type {model_type!r} of "
            f"{model_key}.path (only {', '.join(ULYSSES_MOE_TYPES)}): its forward does not take the attention mask "
            "of rlcore's Ulysses attention; set the size to 1"
        )
    if routing is None:
        if mode != "disabled":
            raise RLCoreError(
                f"{section}.router_replay.mode={mode} needs a mixture-of-experts model, but {model_key}.path is a "
                f"dense {model_type!r} model; set the mode to disabled"
            )
        return None
    return EngineRouting(routing, mode)


def _replay_tokens(batch: Batch, mask: torch.Tensor | None) -> torch.Tensor | None:
    """The batch's ``routed_experts`` ``[B, T, L, k]`` flattened to the tokens the model sees: ``[B·T, L, k]``
    for the padded layout (``mask`` None), the tokens of ``mask`` in row-major order for the packed one; None
    when the batch has none. A tensor not laid out as ``input_ids`` is an error naming the key."""
    if ROUTED_EXPERTS not in batch:
        return None
    routed = batch[ROUTED_EXPERTS]
    ids = batch["input_ids"]
    if routed.dim() != 4 or tuple(routed.shape[:2]) != tuple(ids.shape):
        raise RLCoreError(
            f"the batch's {ROUTED_EXPERTS} has shape {tuple(routed.shape)}; it must be [B, T, layers, k] laid out "
            f"as input_ids {tuple(ids.shape)}"
        )
    routed = routed.to(ids.device).long()
    return routed.reshape(-1, *routed.shape[2:]) if mask is None else routed[mask.bool()]


def _layout(mask: torch.Tensor, packed: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """A callable that puts per-token ``[N, L, k]`` routing back into ``[B, T, L, k]`` as ``input_ids`` is laid
    out, with ``-1`` outside ``mask`` ``[B, T]`` (``packed``: the first tokens are those of ``mask``, any after
    them the packed row's end padding); int16 (int32 for more than 32,766 experts)."""
    keep = mask.bool()
    attended = int(keep.sum())

    def layout(used: torch.Tensor) -> torch.Tensor:
        small = not used.numel() or int(used.max()) < torch.iinfo(torch.int16).max
        dtype = torch.int16 if small else torch.int32
        full = torch.full((*keep.shape, *used.shape[1:]), -1, dtype=dtype, device=used.device)
        tokens = used[:attended] if packed else used.reshape(*keep.shape, *used.shape[1:])[keep]
        full[keep] = tokens.to(dtype)
        return full

    return layout


def _packed_tokens(mask: torch.Tensor, padding: int) -> torch.Tensor:
    """The tokens of the packed row of a batch with attention ``mask`` and ``padding`` end tokens
    (:func:`rlcore.modelkit.packing.pack_batch`): True at its attended tokens, False at the end padding."""
    attended = int(mask.sum())
    return torch.arange(attended + padding, device=mask.device) < attended


def begin_batch(
    routing: MoeRouting, batch: Batch, *, packed: bool, replay: bool, record: bool, padding: int = 0
) -> tuple[RoutingPass, Callable[[torch.Tensor], torch.Tensor]]:
    """Open ``routing``'s pass for a forward of ``batch`` on one rank, padded (every position of
    ``input_ids`` goes through the model, the attention mask says which count) or ``packed`` (only the
    attended tokens, :func:`rlcore.modelkit.packing.pack_batch`, then ``padding`` end tokens that do not count
    and recompute their routes); with ``replay`` the batch's ``routed_experts`` (if it has them) are replayed.
    Returns the pass and the layout for :meth:`MoeRouting.finish`."""
    mask = batch["attention_mask"]
    valid = _packed_tokens(mask, padding) if packed else mask.reshape(-1).bool()
    wanted = _replay_tokens(batch, mask if packed else None) if replay else None
    if wanted is not None and packed and padding:
        wanted = torch.cat([wanted, wanted.new_full((padding, *wanted.shape[1:]), -1)])
    return routing.begin(valid, wanted, record=record), _layout(mask, packed)


def begin_sharded(
    routing: MoeRouting,
    batch: Batch,
    sp: SequenceParallel,
    *,
    packed: bool,
    replay: bool,
    record: bool,
    padding: int = 0,
) -> tuple[RoutingPass, Callable[[torch.Tensor], torch.Tensor]]:
    """:func:`begin_batch` for a forward under Ulysses sequence parallelism ``sp``, in which this rank's routers
    see its slice of the sequence (a packed row with its ``padding`` end tokens, then padded to a multiple of
    the group size, as :func:`~rlcore.modelkit.sequence_parallel.shard_padded` / ``shard_packed`` pad). With
    ``replay`` each token of the slice gets the batch's ``routed_experts`` (the end padding recomputes); the
    returned layout gathers the slices' routing over the group, so that every rank records the whole
    sequences, laid out as without ``sp``. Every rank of the group must call :meth:`MoeRouting.finish` with it
    (a collective)."""
    mask = batch["attention_mask"]
    sequence = _packed_tokens(mask, padding).to(mask.dtype)[None] if packed else mask
    rows, length = sequence.shape
    real = length - padding if packed else length
    padded = padded_length(length, sp)
    wanted = _replay_tokens(batch, mask if packed else None) if replay else None
    if wanted is not None:
        whole_rows = wanted.reshape(rows, real, *wanted.shape[1:])
        end = whole_rows.new_full((rows, padded - real, *wanted.shape[1:]), -1)
        wanted = torch.cat([whole_rows, end], dim=1).chunk(sp.size, dim=1)[sp.rank].reshape(-1, *wanted.shape[1:])
    whole = _layout(mask, packed)

    def layout(used: torch.Tensor) -> torch.Tensor:
        local = used.reshape(rows, padded // sp.size, *used.shape[1:])
        gathered = gather_sequence(local, sp, dim=1)[:, :real]
        return whole(gathered.reshape(-1, *used.shape[1:]))

    return routing.begin(attended_slice(sequence, sp), wanted, record=record), layout
