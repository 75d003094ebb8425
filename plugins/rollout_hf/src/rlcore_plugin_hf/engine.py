"""The default rollout engine (``actor_rollout_ref.rollout.name=hf``): a lean batched KV-cache sampler.

:class:`HFRolloutEngine` owns its own copy of the policy as a Hugging Face ``transformers`` causal LM and
samples with its own loop instead of ``model.generate``: one prefill forward over the left-padded
prompts with an explicit attention mask and position ids, then one forward per new token. Plain
Llama-family models (Qwen2, Qwen3, Llama) decode through :class:`rlcore_plugin_hf.static_decoder.StaticDecoder`
(the same function without the module overhead, against a static KV cache); on CUDA each decoding step of
it, sampling included, is captured once per batch-size bucket as a CUDA graph and replayed
(:mod:`rlcore_plugin_hf.cuda_graphs`; ``rollout.enforce_eager=true`` keeps eager steps). Other models go
through the module's own forward with a ``DynamicCache``.

Sampling (temperature, top-k, top-p, greedy) runs on float32 logits; every row's Gumbel noise is a hash
of its seed (derived from ``rollout.seed``, the call's index and the row), the step and the token
(:mod:`rlcore_plugin_hf.row_noise`), so a row's tokens do not depend on the rest of the batch and a step
costs the same number of kernel launches for any batch. A call is decoded in chunks of rows
(:mod:`rlcore_plugin_hf.chunking`): on CPU bounded by ``rollout.max_num_batched_tokens`` prompt + response
tokens, on CUDA sized from the memory ``rollout.gpu_memory_utilization`` leaves free. The loop stops as
soon as every sequence of a chunk has emitted an end-of-sequence token (checked every step on CPU, every
8 steps on an accelerator: each check is a host sync); after its EOS a sequence is filled with the pad
token.

:meth:`HFRolloutEngine.generate_partial` decodes in resumable chunks (partial rollout,
:class:`rlcore.api.SupportsPartialRollout`): a continued row is prefilled from its prompt and kept tokens and
its noise continues at its step offset, so chunks sample exactly what one :meth:`~HFRolloutEngine.generate`
call samples while the weights stay the same.

The trainer pushes new weights in memory after every update with :meth:`HFRolloutEngine.update_weights`
(the hybrid engine's weight sync), or, when the trainer's parameters live in the same process on the same
device with the same dtype (one CPU rank), hands them over once with :meth:`HFRolloutEngine.share_weights`:
the engine then computes with the trainer's own tensors, so a sync copies nothing and the engine holds no
second copy of the model. :meth:`HFRolloutEngine.weight_checksum` and
:func:`rlcore.rollout.weights.state_checksum` let the caller verify that the engine serves the trainer's weights.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from rlcore.api import (
    MULTI_MODAL_INPUTS,
    ROUTED_EXPERTS,
    Batch,
    EngineTrace,
    ModelShape,
    RLCoreError,
    RolloutConfig,
    RolloutSettings,
    SamplingParams,
    SpecialTokens,
    aligned_length,
    bucket,
    bucket_floor,
    check_left_padded,
    check_weight_names,
    claim_rollout_trace,
    engine_dtype,
    float64_sum,
    load_policy,
    read_partial,
    request_seeds,
    rollout_output,
    rollout_prefill,
    row_bytes,
    row_token_caps,
)
from rlcore_plugin_hf import static_decoder
from rlcore_plugin_hf.chunking import (
    chunk_slices,
    device_memory_rows,
    even_chunks,
    memory_utilization,
    read_length,
    token_budget,
    trim_left_padding,
)
from rlcore_plugin_hf.cuda_graphs import StepGraphs
from rlcore_plugin_hf.decode_state import DecodeState
from rlcore_plugin_hf.routing import RoutingRecorder, place_routing
from rlcore_plugin_hf.row_noise import offset_seed

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["HFRolloutEngine"]


def _sdpa_full_attention_only(config: Any) -> bool:
    """True when the model attends with sdpa and every layer is plain causal (no sliding or chunked)."""
    layer_types = getattr(config, "layer_types", None) or ()
    return (
        getattr(config, "_attn_implementation", None) == "sdpa"
        and getattr(config, "is_causal", True)
        and bool(layer_types)
        and all(kind == "full_attention" for kind in layer_types)
    )


class HFRolloutEngine:
    """Batched sampling from a ``transformers`` causal LM, with in-memory weight updates.

    Args:
        model_path: a local model directory or hub name (a causal LM, or a vision-language model);
            ignored when ``module`` is given.
        tokenizer: the policy's tokenizer; supplies ``pad_token_id`` and ``eos_token_id``.
        config: the typed ``actor_rollout_ref.rollout`` section (``temperature``, ``top_k``, ``top_p``,
            ``do_sample``, ``response_length``, ``val_kwargs``, ``calculate_log_probs``, ``seed``,
            ``ignore_eos``, ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``enforce_eager``);
            ``n`` is not applied here (the controller repeats prompts before calling :meth:`generate`).
        device: where the engine's module runs.
        dtype: the engine's parameter dtype (a ``torch.dtype`` or its name), applied to a given
            ``module`` too.
        module: an already built causal LM to use instead of loading ``model_path``; the engine takes
            ownership of it (it is moved, cast and put in eval mode, not copied).
        bucketed: decode the static decoder's steps with static shapes, each chunk padded to its
            batch-size bucket — on CUDA replayed as CUDA graphs. Default: on CUDA unless
            ``rollout.enforce_eager``; ``True`` on CPU runs the same steps without capture (what the
            tests compare with the eager path). Models without a static decoder never are.

    Raises:
        RLCoreError: an invalid sampling or memory setting, naming its ``actor_rollout_ref.rollout.<key>``.
    """

    #: a discrete rollout trace of a profiled step is written by the engine itself (``rlcore.api.claim_rollout_trace``)
    traces_itself = True
    #: the typed section the engine reads (rlcore's rollout keys: the engine has none of its own)
    config_class = RolloutConfig

    def __init__(
        self,
        model_path: str | None,
        tokenizer: Any,
        config: RolloutConfig,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        module: PreTrainedModel | None = None,
        bucketed: bool | None = None,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.settings = RolloutSettings(config)
        self.token_budget = token_budget(config)
        self.memory_utilization = memory_utilization(config)

        if module is None:
            if model_path is None:
                raise RLCoreError("HFRolloutEngine needs a model_path or a module")
            module = load_policy(model_path, engine_dtype(dtype))
        # nn.Module.to moves in place; typed through it because transformers' wrapper of `to` confuses mypy
        movable: torch.nn.Module = module
        movable.to(device=self.device, dtype=engine_dtype(dtype))
        self.module = module.eval().requires_grad_(False)
        self._accepts_logits_to_keep = "logits_to_keep" in inspect.signature(self.module.forward).parameters
        self._prebuilt_decode_mask = _sdpa_full_attention_only(self.module.config)
        # plain Llama-family models decode through a lean functional forward with a static KV cache
        self._static = static_decoder.build(self.module)
        # on CUDA its steps are captured as graphs per batch-size bucket, unless rollout.enforce_eager
        if bucketed is None:
            bucketed = self.device.type == "cuda" and not config.enforce_eager
        self._bucketed = bool(bucketed) and self._static is not None
        self._graphs = StepGraphs() if self._bucketed and self.device.type == "cuda" else None
        self._states: dict[tuple[Any, ...], DecodeState] = {}
        # R3: the routers of a mixture-of-experts model are hooked while training rollouts decode
        self._routing = RoutingRecorder(self.module) if config.enable_rollout_routing_replay else None

        special = SpecialTokens(tokenizer, getattr(self.module, "generation_config", None))
        self.eos_token_ids: list[int] = special.eos_token_ids
        self.pad_token_id = special.pad_token_id
        self._eos_ids = torch.tensor(self.eos_token_ids, dtype=torch.long, device=self.device)

        self._calls = 0
        self._weight_version = 0
        self._shared = False
        self._asleep = False

    @property
    def weight_version(self) -> int:
        """How many successful :meth:`update_weights` calls the engine has served (0 = initial weights)."""
        return self._weight_version

    @property
    def uncounted_names(self) -> frozenset[str]:
        """State-dict names that :meth:`weight_checksum` does not count: tied aliases and buffers."""
        parameters = {name for name, _ in self.module.named_parameters()}
        return frozenset(name for name in self.module.state_dict(keep_vars=True) if name not in parameters)

    @property
    def pads_to_buckets(self) -> bool:
        """Whether chunks are padded to their batch-size bucket and decoded with static shapes (on CUDA:
        steps replayed as CUDA graphs)."""
        return self._bucketed

    # ------------------------------------------------------------------ generation

    def generate(self, batch: Batch, validate: bool = False) -> Batch:
        """Sample one response per prompt row of ``batch``; returns a new Batch of the same length.

        Reads ``input_ids [B, P]`` (left-padded), ``attention_mask`` and ``position_ids`` (computed from
        the mask when absent), and for a vision-language model the rows' images from
        ``non_tensors["multi_modal_inputs"]`` (:func:`rlcore.modelkit.vlm.rollout_prefill`). Uses
        ``val_kwargs`` when ``validate`` or ``batch.meta["validate"]`` is true; ``batch.meta["do_sample"] =
        False`` forces greedy decoding. The result holds ``prompts``, ``responses [B, R]`` (right-padded
        with the pad token, ``R = response_length``), ``response_mask`` (1 up to and including the EOS
        token), ``input_ids``, ``attention_mask`` and ``position_ids = clip(cumsum(attention_mask) - 1, 0)``
        over ``P + R``, with ``calculate_log_probs`` ``rollout_log_probs [B, R]`` (0 on padding), and with
        ``enable_rollout_routing_replay`` on a mixture-of-experts model, outside validation, the routing of
        every token fed through the model (:data:`~rlcore.api.training.ROUTED_EXPERTS`, :mod:`rlcore_plugin_hf.routing`).
        Non-tensors are copied; ``meta`` is the input's with ``metrics`` replaced by
        ``rollout/gen_tokens``, ``rollout/rows_per_chunk`` (the largest chunk's rows) and
        ``rollout/graph_step_share`` (the share of decoding steps replayed from CUDA graphs).
        """
        if self._asleep:
            raise RLCoreError("the rollout engine is asleep: call wake() before generate()")
        params = self.settings.params_for(batch, validate)
        prompts, prompt_mask, prompt_positions = check_left_padded(batch)
        # greedy calls draw nothing and do not advance the seed stream (validation does not change training)
        seeds = [] if params.greedy else request_seeds(self.settings.seed, self._calls, len(prompts))
        if not params.greedy:
            self._calls += 1
        validating = validate or bool(batch.meta.get("validate", False))
        recorder = None if validating else self._routing
        images = batch.non_tensors.get(MULTI_MODAL_INPUTS)
        caps = row_token_caps(batch, self.settings.response_length)
        slices, chunks, steps = self._decode_chunks(
            prompts, prompt_mask, prompt_positions, params, seeds, images, recorder, self.settings.response_length, caps
        )
        if self.device.type == "cpu":  # the cache is not kept between calls on CPU (host memory)
            self._release()
        logprob_parts = [logprobs for _, _, logprobs, _ in chunks if logprobs is not None]
        out = rollout_output(
            batch,
            torch.cat([responses for responses, _, _, _ in chunks]),
            torch.cat([response_mask for _, response_mask, _, _ in chunks]),
            torch.cat(logprob_parts) if logprob_parts else None,
        )
        if recorder is not None:
            out[ROUTED_EXPERTS] = self._routing_layout(out, slices, [routing for *_, routing in chunks])
        out.meta["metrics"]["rollout/rows_per_chunk"] = max(rows.stop - rows.start for rows in slices)
        out.meta["metrics"]["rollout/graph_step_share"] = steps[1] / steps[0] if steps[0] else 0.0
        return out

    def _decode_chunks(
        self,
        prompts: torch.Tensor,
        prompt_mask: torch.Tensor,
        prompt_positions: torch.Tensor,
        params: SamplingParams,
        seeds: Sequence[int],
        images: Any,
        recorder: RoutingRecorder | None,
        max_steps: int,
        caps: torch.Tensor | None = None,
    ) -> tuple[list[slice], list[tuple[Any, ...]], list[int]]:
        """Decode the left-padded ``prompts`` chunk by chunk, at most ``max_steps`` tokens per row and at most
        ``caps[row]`` when given (``seeds``: one per row, empty when greedy); returns the chunks' row slices, each chunk's ``(responses,
        response_mask, log-probs, routing)`` and the decoding steps run and replayed from graphs."""
        slices = self._plan_chunks(len(prompts), prompts.shape[1], max_steps)
        steps = [0, 0]  # decoding steps run, and of those replayed from graphs
        chunks: list[tuple[Any, ...]] = []
        request = claim_rollout_trace()  # the discrete rollout stage of a profiled step
        trace = None if request is None else request.engine_trace()
        try:
            for rows in slices:
                input_ids, attention_mask, position_ids = (
                    t.to(self.device)
                    for t in trim_left_padding(prompts[rows], prompt_mask[rows], prompt_positions[rows])
                )
                with recorder if recorder is not None else contextlib.nullcontext():
                    sampled = self._sample(
                        input_ids,
                        attention_mask,
                        position_ids,
                        params,
                        seeds[rows],
                        None if images is None else images[rows],
                        steps,
                        trace,
                        max_steps,
                        None if caps is None else caps[rows].to(self.device),
                    )
                # the routing of the tokens fed through the model, from where the trimmed prompts start
                routing = (
                    None
                    if recorder is None
                    else (prompts.shape[1] - input_ids.shape[1], recorder.collect(len(input_ids)))
                )
                chunks.append((*sampled, routing))
        finally:
            if trace is not None:
                trace.close()
        return slices, chunks, steps

    def generate_partial(self, batch: Batch, max_new_tokens: int, validate: bool = False) -> Batch:
        """Partial rollout (:class:`~rlcore.api.rollout.SupportsPartialRollout`): decode at most
        ``max_new_tokens`` more tokens for every unfinished row of ``batch``, tagged with :attr:`weight_version`.

        A continued row is prefilled from its prompt and the tokens it kept (the KV cache is rebuilt with the
        weights served now) and its noise continues at its step offset: the row seed is shifted by
        :func:`rlcore_plugin_hf.row_noise.offset_seed`, so step ``j`` of this call draws the noise of step
        ``kept + j`` of the row. Calls repeated until every row is finished, with no weight update between
        them, therefore sample exactly the tokens of one :meth:`generate` call (fresh rows draw their seeds
        as ``generate`` does: from ``rollout.seed`` and the call's index). Image prompts and routing replay
        are not supported here (a clear :class:`RLCoreError`).
        """
        if self._asleep:
            raise RLCoreError("the rollout engine is asleep: call wake() before generate_partial()")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise RLCoreError(f"generate_partial: max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if batch.non_tensors.get(MULTI_MODAL_INPUTS) is not None:
            raise RLCoreError("rollout.name=hf: generate_partial does not take image prompts (multi_modal_inputs)")
        validating = validate or bool(batch.meta.get("validate", False))
        if self._routing is not None and not validating:
            raise RLCoreError(
                "rollout.name=hf: generate_partial does not record routing; "
                "turn off actor_rollout_ref.rollout.enable_rollout_routing_replay for partial rollout"
            )
        params = self.settings.params_for(batch, validate)
        length = self.settings.response_length
        rows = read_partial(batch, length, self.pad_token_id, self.settings.calculate_log_probs)
        if rows.seed_fresh_rows(self.settings.seed, self._calls, params.greedy):
            self._calls += 1
        active = rows.active()
        added = 0
        if active:
            lengths = rows.lengths
            offsets = [lengths[row] for row in active]
            seeds = (
                []
                if params.greedy
                else [offset_seed(int(rows.row_seeds[row]), offsets[i]) for i, row in enumerate(active)]
            )
            ids, mask, positions = rows.continuation_prompts(active, self.pad_token_id)
            room = rows.limits[active] - torch.tensor(offsets)  # each row's cap, less what it kept
            max_steps = min(max_new_tokens, int(room.max()))
            _, chunks, _ = self._decode_chunks(ids, mask, positions, params, seeds, None, None, max_steps, room)
            if self.device.type == "cpu":
                self._release()
            responses = torch.cat([part[0] for part in chunks]).cpu()
            response_mask = torch.cat([part[1] for part in chunks]).cpu()
            logprob_parts = [part[2] for part in chunks if part[2] is not None]
            logprobs = torch.cat(logprob_parts).cpu() if logprob_parts else None
            added = rows.extend(
                active,
                [responses[i][response_mask[i]].tolist() for i in range(len(active))],
                [None if logprobs is None else logprobs[i][response_mask[i]].tolist() for i in range(len(active))],
                max_new_tokens=max_new_tokens,
                version=self._weight_version,
                eos_token_ids=self.eos_token_ids,
                stop_on_eos=not self.settings.ignore_eos and bool(self.eos_token_ids),
            )
        return rows.output(batch, added)

    def _routing_layout(
        self, out: Batch, slices: Sequence[slice], recorded: Sequence[tuple[int, torch.Tensor] | None]
    ) -> torch.Tensor:
        """The call's :data:`~rlcore.api.training.ROUTED_EXPERTS` ``[B, P + R, L, k]``: each chunk's record
        (its first column and ``[rows, tokens, L, k]``) placed as ``out``'s ``input_ids``
        (:func:`~rlcore_plugin_hf.routing.place_routing`)."""
        prompt_width = out["prompts"].shape[1]
        mask = out["attention_mask"]
        parts = []
        for rows, record in zip(slices, recorded):
            assert record is not None
            first_column, routing = record
            parts.append(place_routing(routing, first_column, prompt_width, mask[rows]))
        return torch.cat(parts)

    def _plan_chunks(self, rows: int, prompt_len: int, length: int) -> list[slice]:
        """The chunks of a call of ``rows`` prompts of width ``prompt_len`` decoding at most ``length`` tokens;
        loads the static decoder's weights and reserves its cache for the largest chunk (padded to its bucket
        with graphs).

        On CUDA the rows per chunk come from the free memory (:func:`~rlcore_plugin_hf.chunking.memory_rows`),
        measured once the decoder's weights are in place; elsewhere from ``rollout.max_num_batched_tokens``.
        """
        static = self._static
        if static is not None and rows:
            static.load_weights()
        if self.config.full_determinism:  # a row of its own per chunk: its numbers never depend on the others
            slices = [slice(row, row + 1) for row in range(rows)]
            cache_len = aligned_length(prompt_len + length) if self.device.type == "cuda" else prompt_len + length
        elif self.device.type != "cuda":
            slices = chunk_slices(rows, prompt_len + length, self.token_budget)
            cache_len = prompt_len + length
        else:
            cache_len = aligned_length(prompt_len + length)
            shape = ModelShape.of(self.module.config)
            per_row = row_bytes(shape, prompt_len, cache_len, self.module.dtype.itemsize)
            reusable = static.cache_bytes() if static is not None else 0
            capacity = device_memory_rows(self.device, self.memory_utilization, per_row, reusable)
            slices = even_chunks(rows, bucket_floor(capacity) if self.pads_to_buckets else capacity)
        if static is not None and rows:
            largest = max(part.stop - part.start for part in slices)
            static.reserve(bucket(largest) if self.pads_to_buckets else largest, cache_len)
        return slices

    def _state(self, rows: int, params: SamplingParams, cache_len: int | None) -> DecodeState:
        """A decode state for ``rows`` rows and ``params``; when bucketed one per shape, kept (CUDA graphs
        read its tensors) and reused for every chunk of that shape until the cache is released."""
        key = (rows, params, cache_len)
        state = self._states.get(key)
        if state is None:
            state = DecodeState(
                rows,
                self.settings.response_length,
                self.module.get_output_embeddings().weight.shape[0],
                params,
                cache_len=cache_len,
                eos_ids=self._eos_ids,
                stop_on_eos=not self.settings.ignore_eos and bool(self.eos_token_ids),
                with_logprobs=self.settings.calculate_log_probs,
                graphed=self.pads_to_buckets,
                device=self.device,
            )
            if self.pads_to_buckets:
                self._states[key] = state
        return state

    @torch.no_grad()
    def _sample(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        params: SamplingParams,
        seeds: Sequence[int],
        images: Iterable[Any] | None,
        steps: list[int],
        trace: EngineTrace | None,
        max_steps: int,
        caps: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The decoding loop over one chunk of rows (``seeds``: one per row), at most ``max_steps`` tokens
        per row and at most ``caps[row]`` when given (:func:`~rlcore.api.row_token_caps`; the loop stops at the
        chunk's largest cap); returns ``responses [rows, response_length]``, a boolean ``response_mask`` and the log-probs
        or None. Adds the decoding steps it ran, and those replayed from a graph, to ``steps``; tells
        ``trace`` (a profiled rollout) which response token each model call produces."""
        batch_size, prompt_len = input_ids.shape
        length = self.settings.response_length
        if batch_size == 0:
            logprobs = torch.zeros((0, length), device=self.device) if self.settings.calculate_log_probs else None
            empty = torch.zeros((0, length), dtype=torch.long, device=self.device)
            return empty, empty.bool(), logprobs
        static = self._static
        prefill: dict[str, Any] = {"position_ids": position_ids}
        next_position = position_ids[:, -1] + 1
        if images is not None:  # the rows' multi_modal_inputs: images and mrope positions for the prefill
            prefill, first = rollout_prefill(self.module, input_ids, attention_mask, images)
            next_position = first[:, 0]
        rows = bucket(batch_size) if self.pads_to_buckets else batch_size
        cache_len = None if static is None else static.length
        state = self._state(rows, params, cache_len)
        state.start(seeds, attention_mask, next_position.long())
        if trace is not None:
            trace.token(0)
        read = [0]  # the read-length bucket of the next decoding step (graphed: one graph per bucket)
        if static is not None:
            state.take(static.prefill(input_ids, attention_mask, position_ids))

            def decode() -> None:
                state.decode_with(static, read[0] if self.pads_to_buckets else None)

        else:
            decode = self._module_decoder(input_ids, attention_mask, prefill, state)
        # on an accelerator every `.any()` is a host sync: test for "all finished" less often there
        check_every = 1 if self.device.type == "cpu" else 8
        # a row that emitted EOS keeps decoding its own samples (no other row sees them); the response
        # mask and padding after each row's EOS are applied once, after the loop
        taken = 1  # tokens sampled per row so far
        limit = max_steps if caps is None else min(max_steps, int(caps.max()))
        while taken < limit and not (
            state.stop_on_eos and taken % check_every == 0 and not bool(state.unfinished[:batch_size].any())
        ):
            if trace is not None:
                trace.token(taken)
            if cache_len is not None:  # the step writes slot P + taken - 1: P + taken positions are filled
                read[0] = read_length(prompt_len + taken, cache_len)
            if self._graphs is not None and static is not None:
                steps[1] += int(self._graphs.run((rows, params, cache_len, read[0]), static.version, decode))
            else:
                decode()
            steps[0] += 1
            taken += 1
        if trace is not None:
            trace.end_chunk()
        return self._finish(state, batch_size, taken, caps)

    def _module_decoder(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefill: dict[str, Any], state: DecodeState
    ) -> Callable[[], None]:
        """Prefill the prompts through the module's own forward (a ``DynamicCache``), sample the first
        tokens into ``state``, and return the step of the following tokens (forward, then sample)."""
        from transformers import DynamicCache

        batch_size, prompt_len = input_ids.shape
        full_mask = torch.ones(
            (batch_size, prompt_len + self.settings.response_length), dtype=torch.long, device=self.device
        )
        full_mask[:, :prompt_len] = attention_mask
        # decode steps: a [B, 1, 1, L] boolean key mask is exactly what sdpa needs for one causal query,
        # and passing it skips transformers' per-step mask construction
        decode_mask = full_mask.bool()[:, None, None, :] if self._prebuilt_decode_mask else full_mask
        cache = DynamicCache(config=self.module.config)
        extra = {"logits_to_keep": 1} if self._accepts_logits_to_keep else {}
        output = self.module(
            input_ids=input_ids,
            attention_mask=full_mask[:, :prompt_len],
            past_key_values=cache,
            use_cache=True,
            **prefill,
            **extra,
        )
        state.take(output.logits[:, -1, :])
        width = [prompt_len + 1]

        def step() -> None:
            output = self.module(
                input_ids=state.tokens[:, None],
                attention_mask=decode_mask[..., : width[0]],
                position_ids=state.positions[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            state.positions.add_(1)
            width[0] += 1
            state.take(output.logits[:, -1, :])

        return step

    def _finish(
        self, state: DecodeState, batch_size: int, steps: int, caps: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The chunk's ``responses``, boolean ``response_mask`` and log-probs (or None) from ``state``'s
        first ``batch_size`` rows and first ``steps`` tokens: a token is in the response when no EOS came before
        it and it is within the row's cap (``caps``); the rest is padding (pad token, log-prob 0)."""
        length = self.settings.response_length
        responses = torch.full((batch_size, length), self.pad_token_id, dtype=torch.long, device=self.device)
        responses[:, :steps] = state.responses[:batch_size, :steps]
        response_mask = torch.zeros((batch_size, length), dtype=torch.bool, device=self.device)
        if state.stop_on_eos:
            hits = (responses[:, :steps, None] == self._eos_ids).any(dim=-1).int()
            response_mask[:, :steps] = hits.cumsum(dim=1) == hits
        else:
            response_mask[:, :steps] = True
        if caps is not None:
            response_mask &= torch.arange(length, device=self.device) < caps[:, None]
        responses.masked_fill_(~response_mask, self.pad_token_id)
        logprobs = None
        if state.logprobs is not None:
            logprobs = torch.zeros((batch_size, length), dtype=torch.float32, device=self.device)
            logprobs[:, :steps] = state.logprobs[:batch_size, :steps]
            logprobs.masked_fill_(~response_mask, 0.0)
        return responses, response_mask, logprobs

    def _release(self) -> None:
        """Free the decode states, graphs and the static decoder's cache and weight copies."""
        self._states.clear()
        if self._graphs is not None:
            self._graphs.clear()
        if self._static is not None:
            self._static.release()

    # ------------------------------------------------------------------ weights

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], strict: bool = True) -> None:
        """Copy ``(name, tensor)`` pairs into the engine's module by state-dict name (cast and moved).

        A tied alias (``lm_head.weight`` when tied to the input embeddings) may be present or absent.
        Tensors are streamed: each is copied as it arrives, so a generator of gathered tensors never has
        to be held in full. Raises :class:`RLCoreError` naming the unknown names, the names with a wrong
        shape and, when ``strict``, the parameters that were not given; in that case the module may
        have been partly updated and :attr:`weight_version` is not incremented.
        """
        if self._shared:  # never write into the trainer's own tensors: take private copies first
            for param in self.module.parameters():
                param.data = param.data.clone()
            self._shared = False
        targets: Mapping[str, torch.Tensor] = self.module.state_dict(keep_vars=True)
        written: set[int] = set()
        unexpected: list[str] = []
        mismatched: list[str] = []
        with torch.no_grad():
            for name, tensor in named_tensors:
                target = targets.get(name)
                if target is None:
                    unexpected.append(name)
                    continue
                if tuple(target.shape) != tuple(tensor.shape):
                    mismatched.append(f"{name} (engine {tuple(target.shape)}, given {tuple(tensor.shape)})")
                    continue
                target.copy_(tensor)
                written.add(id(target))
        missing = [name for name, param in self.module.named_parameters() if id(param) not in written] if strict else []
        check_weight_names("hf", unexpected, mismatched, missing)
        self._weight_version += 1

    def share_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> bool:
        """Serve the given tensors themselves: every parameter of the engine's module becomes the tensor of
        its state-dict name (its storage is shared, nothing is copied, the engine's own copy is freed).

        For a trainer in the same process whose parameters are updated in place (one CPU rank): after
        every update the engine already serves the new weights, and the caller calls this again as its
        weight sync (then it only checks the tensors are the same ones). The engine never writes into
        shared tensors (:meth:`update_weights` takes private copies first). Returns False and changes
        nothing when a name is unknown, a parameter is not given, or a tensor's shape, dtype or device
        differs from the engine's (the caller then copies with :meth:`update_weights`); True counts as a
        weight update (:attr:`weight_version`).
        """
        given = dict(named_tensors)
        targets = self.module.state_dict(keep_vars=True)
        params = dict(self.module.named_parameters())
        if any(name not in targets for name in given):
            return False
        for name, param in params.items():
            tensor = given.get(name)
            if tensor is None or (tensor.shape, tensor.dtype, tensor.device) != (
                param.shape,
                param.dtype,
                param.device,
            ):
                return False
        with torch.no_grad():
            for name, param in params.items():
                if param.data_ptr() != given[name].data_ptr():
                    param.data = given[name].detach()
        self._shared = True
        self._weight_version += 1
        return True

    @torch.no_grad()
    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced log-probs of ``token_ids[1:]`` given their prefixes: float32 ``[L - 1]`` on the CPU.

        Taken at temperature 1 from the served weights; the trainer compares them with its own after a
        weight sync (the log-prob parity check that every engine supports).
        """
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
        logits = self.module(input_ids=ids, use_cache=False).logits[0, :-1].float()
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1).cpu()

    def weight_checksum(self) -> float:
        """The float64 sum of every parameter value (tied weights counted once); see
        :func:`rlcore.rollout.weights.state_checksum`."""
        return float64_sum(param for _, param in self.module.named_parameters())

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The engine's resumable state: how many generate calls drew seeds, and :attr:`weight_version`.

        A checkpoint stores it so that generation after a resume draws the same random numbers as the
        uninterrupted run (every row's seed derives from ``rollout.seed``, the call index and the row; the
        weights themselves come from the trainer's checkpoint).
        """
        return {"calls": self._calls, "weight_version": self._weight_version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; call it after the trainer's weights are synced."""
        missing = sorted({"calls", "weight_version"} - set(state))
        if missing:
            raise RLCoreError(f"rollout engine state is missing {', '.join(missing)}")
        self._calls = int(state["calls"])
        self._weight_version = int(state["weight_version"])

    # ------------------------------------------------------------------ memory

    def sleep(self) -> None:
        """Free accelerator memory between rollouts: on CUDA drop the KV cache, the decode states and the
        CUDA graphs, and move the module to the CPU; no-op on CPU."""
        if self.device.type == "cuda" and not self._asleep:
            self._release()
            self.module.to("cpu")
            torch.cuda.empty_cache()
            self._asleep = True

    def wake(self) -> None:
        """Undo :meth:`sleep`: move the module back to its device."""
        if self._asleep:
            self.module.to(self.device)
            self._asleep = False
