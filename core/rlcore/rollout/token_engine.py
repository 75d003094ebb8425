"""A base class for rollout engines that serve a model from its path and take prompts as token-id lists.

Inference servers and offline engines (vLLM, SGLang, ...) share everything around the call that samples:
reading the sampling settings, stripping the prompts' left padding, one seed per request, laying the
completions out as rlcore's rollout Batch, checking pushed weights against the model's state dict,
counting weight versions, checkpointing the seed stream and partial rollout (``generate_partial``).
:class:`TokenListEngine` does all of that; a
subclass implements the four engine-specific steps — :meth:`~TokenListEngine._complete`,
:meth:`~TokenListEngine._load_weights`, :meth:`~TokenListEngine.prompt_log_probs` and (when its engine
can release memory) :meth:`~TokenListEngine.sleep`/:meth:`~TokenListEngine.wake`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import torch

from rlcore.api.batch import Batch
from rlcore.config.keys import ROLLOUT_KEY
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.errors import RLCoreError
from rlcore.rollout.outputs import SpecialTokens, check_left_padded, engine_dtype, rollout_output, row_token_caps
from rlcore.rollout.partial import continuation_seed, read_partial
from rlcore.rollout.sampling import RolloutSettings, SamplingParams, request_seeds
from rlcore.rollout.weights import ExpectedState

__all__ = ["Completion", "TokenListEngine"]

#: one sampled response: its token ids and, when asked for, the log-prob of each
Completion = tuple[list[int], list[float] | None]


def _generation_config(model_path: str) -> Any:
    """The model's ``GenerationConfig``, or None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path)
    except (OSError, ValueError):
        return None


class TokenListEngine(ABC):
    """The rollout-engine interface on top of an engine that completes token-id prompts.

    Args:
        model_path: a local model directory or hub name; its config gives the state-dict names and shapes
            that pushed weights are checked against, and the EOS ids of its generation config.
        tokenizer: the policy's tokenizer (EOS and pad ids).
        config: the typed ``actor_rollout_ref.rollout`` section, an instance of :attr:`config_class` (see
            :class:`RolloutSettings`).
        dtype: the served dtype, which pushed weights are cast to (a ``torch.dtype``, its name or alias).
        module: not supported (these engines build their own model); passing one is an error.

    Raises:
        RLCoreError: a module was given, the path is missing, or a sampling setting is invalid.
    """

    #: the engine's ``rollout.name``, used in messages
    engine_name: ClassVar[str] = ""
    #: the typed section the engine is built with (a subclass adds the engine plugin's own keys)
    config_class: ClassVar[type[RolloutConfig]] = RolloutConfig

    def __init__(
        self,
        model_path: str | None,
        tokenizer: Any,
        config: RolloutConfig,
        *,
        dtype: torch.dtype | str,
        module: Any = None,
    ) -> None:
        name = f"{ROLLOUT_KEY}.name={self.engine_name}"
        if module is not None:
            raise RLCoreError(f"{name} loads the model itself from a path; it cannot wrap a module")
        if not model_path:
            raise RLCoreError(f"{name} needs actor_rollout_ref.model.path")
        self.config = config
        self.dtype = engine_dtype(dtype)
        self.settings = RolloutSettings(config)
        self.expected = ExpectedState.from_pretrained(str(model_path))
        special = SpecialTokens(tokenizer, _generation_config(str(model_path)))
        self.eos_token_ids = special.eos_token_ids
        self.pad_token_id = special.pad_token_id
        self._calls = 0
        self._weight_version = 0
        self._sleeping: bool = False

    # ------------------------------------------------------------------ engine-specific steps

    @abstractmethod
    def _complete(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None],
        max_tokens: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Sample one response per prompt of at most ``max_tokens[i]`` tokens (None: ``settings.response_length``
        each), with the request's seed (None: greedy), stopping at ``eos_token_ids`` (kept in the response)
        unless ``settings.ignore_eos``; log-probs (after the temperature) only when ``settings.calculate_log_probs``."""

    def _complete_multimodal(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None],
        data: list[Any],
        max_tokens: Sequence[int] | None = None,
    ) -> list[Completion]:
        """:meth:`_complete` for prompts with images: ``data`` holds each row's ``multi_modal_data``
        (``{"image": [PIL images]}``, or None for a text-only row). Engines that take images override it."""
        raise RLCoreError(
            f"{ROLLOUT_KEY}.name={self.engine_name}: this rollout engine does not take image prompts "
            "(the batch has multi_modal_data); use rollout.name=hf"
        )

    @abstractmethod
    def _load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Make the engine serve ``state``: a complete, checked CPU state dict with Hugging Face names,
        tied aliases included; clear any cache computed with the old weights."""

    @abstractmethod
    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced log-probs of ``token_ids[1:]`` under the served weights: float32 ``[L - 1]``
        (temperature 1), the probe the trainer compares with its own after every weight sync."""

    def sleep(self) -> None:
        """Release the engine's accelerator memory; engines without any to release keep this no-op."""
        return

    def wake(self) -> None:
        """Take back what :meth:`sleep` released (no-op by default)."""
        return

    # ------------------------------------------------------------------ shared behaviour

    @property
    def weight_version(self) -> int:
        """How many successful :meth:`update_weights` calls the engine has served (0 = initial weights)."""
        return self._weight_version

    @property
    def uncounted_names(self) -> frozenset[str]:
        """State-dict names that are aliases of another parameter (a tied ``lm_head.weight``)."""
        return frozenset(self.expected.aliases)

    @property
    def is_sleeping(self) -> bool:
        """Whether :meth:`sleep` released the engine's memory."""
        return self._sleeping

    def max_model_len(self) -> int:
        """``rollout.max_model_len``, else room for the longest prompt and response (``prompt_length +
        response_length``) within the model's ``max_position_embeddings``."""
        if self.config.max_model_len:
            return self.config.max_model_len
        length = self.config.prompt_length + self.settings.response_length
        return min(length, self.expected.max_positions) if self.expected.max_positions else length

    def generate(self, batch: Batch, validate: bool = False) -> Batch:
        """Sample one response per prompt row of ``batch``, in the layout of ``HFRolloutEngine.generate``.

        Each row goes to the engine without its left padding and with its own seed (see
        :func:`~rlcore.rollout.sampling.request_seeds`; greedy requests get none). A row's cap
        (:func:`~rlcore.rollout.outputs.row_token_caps`) is its request's ``max_tokens``, and its completion is cut
        there.
        """
        if self._sleeping:
            raise RLCoreError(f"the {self.engine_name} rollout engine is asleep: call wake() before generate()")
        params = self.settings.params_for(batch, validate)
        prompts, prompt_mask, _ = check_left_padded(batch)
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(prompts.cpu(), prompt_mask.cpu())]
        seeds: list[int | None] = (
            [None] * len(rows) if params.greedy else list(request_seeds(self.settings.seed, self._calls, len(rows)))
        )
        self._calls += 1
        size = (len(rows), self.settings.response_length)
        caps = row_token_caps(batch, size[1])
        images = batch.non_tensors.get("multi_modal_data")
        if images is None or all(entry is None for entry in images):
            completions = self._complete(rows, params, seeds, None if caps is None else caps.tolist())
        else:
            completions = self._complete_multimodal(rows, params, seeds, list(images))

        responses = torch.full(size, self.pad_token_id, dtype=torch.long)
        response_mask = torch.zeros(size, dtype=torch.bool)
        log_probs = torch.zeros(size, dtype=torch.float32) if self.settings.calculate_log_probs else None
        for row, (tokens, token_log_probs) in enumerate(completions):
            tokens = tokens[: size[1] if caps is None else int(caps[row])]
            responses[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            response_mask[row, : len(tokens)] = True
            if log_probs is not None and token_log_probs is not None:
                log_probs[row, : len(tokens)] = torch.tensor(token_log_probs[: len(tokens)], dtype=torch.float32)
        return rollout_output(batch, responses, response_mask, log_probs)

    def generate_partial(self, batch: Batch, max_new_tokens: int, validate: bool = False) -> Batch:
        """Partial rollout (:class:`~rlcore.api.rollout.SupportsPartialRollout`): at most ``max_new_tokens``
        more tokens for every unfinished row, tagged with :attr:`weight_version`.

        A continued row is sent as a new request whose prompt is its prompt followed by the tokens it kept
        (the engine prefills them with the weights served now) and whose ``max_tokens`` is what is left of the
        budget and of ``response_length``. Its seed is :func:`~rlcore.rollout.partial.continuation_seed` of the
        row seed and the tokens kept: the engine's per-request generator restarts from that seed, so chunked
        generation is deterministic (the same calls sample the same tokens) and its first chunk equals the
        start of a ``generate`` call, but a continued row does not sample the tokens an uninterrupted request
        would have (unlike the HF engine, whose noise is keyed by the step). Image prompts are not supported.
        """
        if self._sleeping:
            raise RLCoreError(f"the {self.engine_name} rollout engine is asleep: call wake() before generate_partial()")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise RLCoreError(f"generate_partial: max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        images = batch.non_tensors.get("multi_modal_data")
        if images is not None and any(entry is not None for entry in images):
            raise RLCoreError(
                f"{ROLLOUT_KEY}.name={self.engine_name}: generate_partial does not take image prompts (multi_modal_data)"
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
            seeds: list[int | None] = [
                None if params.greedy else continuation_seed(int(rows.row_seeds[row]), lengths[row]) for row in active
            ]
            budgets = [min(max_new_tokens, int(rows.limits[row]) - lengths[row]) for row in active]
            completions = self._complete(rows.continuation_tokens(active), params, seeds, budgets)
            added = rows.extend(
                active,
                [tokens for tokens, _ in completions],
                [log_probs for _, log_probs in completions],
                max_new_tokens=max_new_tokens,
                version=self._weight_version,
                eos_token_ids=self.eos_token_ids,
                stop_on_eos=not self.settings.ignore_eos,
            )
        return rows.output(batch, added)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], strict: bool = True) -> None:
        """Load ``(name, tensor)`` pairs (Hugging Face state-dict names) into the served model, in memory.

        Names and shapes are checked against the model's state dict first (unknown names, wrong shapes and,
        when ``strict``, parameters not given raise one :class:`RLCoreError` and nothing is sent; see
        :meth:`ExpectedState.collect`); tied aliases may be present or absent. Failures inside the engine
        are raised as :class:`RLCoreError` too, and :attr:`weight_version` only counts successful updates.
        """
        state = self.expected.collect(named_tensors, dtype=self.dtype, strict=strict, engine=self.engine_name)
        try:
            self._load_weights(state)
        except RLCoreError:
            raise
        except Exception as exc:
            raise RLCoreError(f"{self.engine_name} rollout weight update failed inside the engine: {exc}") from exc
        self._weight_version += 1

    def state_dict(self) -> dict[str, Any]:
        """The resumable state: how many generate calls drew seeds, and :attr:`weight_version`."""
        return {"calls": self._calls, "weight_version": self._weight_version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; call it after the trainer's weights are synced."""
        missing = sorted({"calls", "weight_version"} - set(state))
        if missing:
            raise RLCoreError(f"{self.engine_name} rollout engine state is missing {', '.join(missing)}")
        self._calls = int(state["calls"])
        self._weight_version = int(state["weight_version"])
