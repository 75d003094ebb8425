"""Partial rollout: the state of resumable generation, shared by every engine with the ability
(:class:`rlcore.api.rollout.SupportsPartialRollout`).

A call of ``generate_partial(batch, max_new_tokens)`` reads each row's progress with :func:`read_partial` —
fresh prompts (no ``responses`` yet) or the previous call's output passed back — decodes at most
``max_new_tokens`` more tokens for every row not yet ``finished`` (never beyond ``rollout.response_length``
in total), appends them with :meth:`PartialRows.extend` and lays the rows out with :meth:`PartialRows.output`:
the layout of ``generate`` plus :data:`ROLLOUT_VERSIONS`, :data:`FINISHED` and :data:`ROW_SEEDS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.rollout.outputs import check_left_padded, rollout_output, row_token_caps
from rlcore.rollout.padding import left_pad
from rlcore.rollout.sampling import request_seeds

__all__ = ["FINISHED", "ROLLOUT_VERSIONS", "ROW_SEEDS", "PartialRows", "continuation_seed", "read_partial"]

#: int64 ``[B, R]``: the weight version that sampled each response token (0 on padding)
ROLLOUT_VERSIONS = "rollout_versions"
#: bool ``[B]``: the row emitted its end-of-sequence token or reached ``response_length``
FINISHED = "finished"
#: int64 ``[B]``: the row's sampling seed, kept across calls (-1: none drawn yet; greedy rows never draw one)
ROW_SEEDS = "row_seeds"

_MASK64 = (1 << 64) - 1


def continuation_seed(seed: int, offset: int) -> int:
    """The request seed in ``[0, 2**63)`` of a row of seed ``seed`` continued after ``offset`` tokens, for
    engines that seed whole requests (vLLM, SGLang): ``seed`` itself at offset 0 (a first chunk samples as
    ``generate`` does), else a splitmix64 mix of both, so each continuation draws a fresh, reproducible stream."""
    if offset == 0:
        return seed
    z = (seed + (offset + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


@dataclass
class PartialRows:
    """The progress of every row of a partial-rollout call (CPU tensors, updated in place by :meth:`extend`).

    ``prompts``/``prompt_mask`` ``[B, P]`` (left-padded), ``responses`` ``[B, R]`` (right-padded with the pad
    token), ``response_mask`` bool ``[B, R]`` (a prefix of ones), ``log_probs`` float32 ``[B, R]`` or None,
    ``versions`` int64 ``[B, R]``, ``finished`` bool ``[B]``, ``row_seeds`` int64 ``[B]``, ``limits`` int64 ``[B]``
    (each row's cap on response tokens: ``R``, or the row's ``extra_info["max_new_tokens"]``,
    :func:`~rlcore.rollout.outputs.row_token_caps`).
    """

    prompts: torch.Tensor
    prompt_mask: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    log_probs: torch.Tensor | None
    versions: torch.Tensor
    finished: torch.Tensor
    row_seeds: torch.Tensor
    limits: torch.Tensor

    @property
    def lengths(self) -> list[int]:
        """Each row's response tokens so far."""
        return [int(n) for n in self.response_mask.sum(dim=1)]

    def active(self) -> list[int]:
        """The rows not yet finished."""
        return [int(row) for row in torch.nonzero(~self.finished).flatten()]

    def seed_fresh_rows(self, seed: int, call_index: int, greedy: bool) -> bool:
        """Give the rows that have no seed yet (``-1``) their seed of a generate call, ``request_seeds(seed,
        call_index, rows)``, as :meth:`generate` would; greedy sampling draws none. Returns whether the call
        index was used (the engine then counts one more call)."""
        fresh = self.row_seeds < 0
        if greedy or not bool(fresh.any()):
            return False
        seeds = torch.tensor(request_seeds(seed, call_index, len(self.row_seeds)), dtype=torch.int64)
        self.row_seeds[fresh] = seeds[fresh]
        return True

    def continuation_tokens(self, rows: Sequence[int]) -> list[list[int]]:
        """Each of ``rows``' prompt (without its padding) followed by its response tokens so far."""
        lengths = self.lengths
        return [
            self.prompts[row][self.prompt_mask[row].bool()].tolist() + self.responses[row, : lengths[row]].tolist()
            for row in rows
        ]

    def continuation_prompts(
        self, rows: Sequence[int], pad_token_id: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask, position_ids)`` of :meth:`continuation_tokens`, left-padded: what an
        engine prefills to continue ``rows`` (the KV cache rebuilt from the prompt and the kept tokens)."""
        ids, mask = left_pad(self.continuation_tokens(rows), pad_token_id)
        return ids, mask, (mask.cumsum(-1) - 1).clamp_(min=0)

    def extend(
        self,
        rows: Sequence[int],
        new_tokens: Sequence[Sequence[int]],
        new_log_probs: Sequence[Sequence[float] | None],
        *,
        max_new_tokens: int,
        version: int,
        eos_token_ids: Sequence[int],
        stop_on_eos: bool,
    ) -> int:
        """Append each of ``rows``' ``new_tokens`` (and their log-probs), cut to ``max_new_tokens``, to the room
        left in the row's limit (``response_length`` or its cap) and after the first end-of-sequence token (with
        ``stop_on_eos``); tag them with ``version``. A row is finished when it ends with an EOS token or fills its
        limit. Returns the number of tokens appended."""
        eos = set(eos_token_ids)
        added = 0
        for row, tokens, log_probs in zip(rows, new_tokens, new_log_probs):
            start = int(self.response_mask[row].sum())
            length = int(self.limits[row])
            kept = list(tokens[: min(max_new_tokens, length - start)])
            ended = False
            if stop_on_eos:
                hit = next((i for i, token in enumerate(kept) if token in eos), None)
                if hit is not None:
                    kept, ended = kept[: hit + 1], True
            stop = start + len(kept)
            self.responses[row, start:stop] = torch.tensor(kept, dtype=torch.long)
            self.response_mask[row, start:stop] = True
            self.versions[row, start:stop] = version
            if self.log_probs is not None and log_probs is not None:
                self.log_probs[row, start:stop] = torch.tensor(list(log_probs[: len(kept)]), dtype=torch.float32)
            self.finished[row] = ended or stop == length
            added += len(kept)
        return added

    def output(self, batch: Batch, new_tokens: int) -> Batch:
        """The rows as ``generate`` lays them out (:func:`~rlcore.rollout.outputs.rollout_output`, over
        ``batch``'s non-tensors and meta) plus ``rollout_versions``, ``finished`` and ``row_seeds``;
        ``meta["metrics"]["rollout/gen_tokens"]`` counts the tokens this call added."""
        prompt_batch = Batch(
            {"input_ids": self.prompts, "attention_mask": self.prompt_mask}, batch.non_tensors, batch.meta
        )
        out = rollout_output(prompt_batch, self.responses, self.response_mask, self.log_probs)
        out[ROLLOUT_VERSIONS] = self.versions
        out[FINISHED] = self.finished
        out[ROW_SEEDS] = self.row_seeds
        out.meta["metrics"]["rollout/gen_tokens"] = new_tokens
        return out


def read_partial(batch: Batch, response_length: int, pad_token_id: int, with_log_probs: bool) -> PartialRows:
    """The rows' progress: fresh left-padded prompts when ``batch`` has no ``responses`` (no tokens, no
    seeds, nothing finished), else the previous ``generate_partial`` output passed back (its ``prompts``,
    the prompt part of its ``attention_mask``, ``responses``, ``response_mask``, ``rollout_log_probs`` when
    ``with_log_probs``, ``rollout_versions``, ``finished`` and ``row_seeds``); each row's limit from its
    ``extra_info["max_new_tokens"]`` (:func:`~rlcore.rollout.outputs.row_token_caps`). Copies: the input is never
    modified. Raises :class:`RLCoreError` naming a missing key or a ``responses`` width other than
    ``response_length``."""
    caps = row_token_caps(batch, response_length)
    if "responses" not in batch:
        prompts, prompt_mask, _ = check_left_padded(batch)
        rows = prompts.shape[0]
        size = (rows, response_length)
        return PartialRows(
            prompts=prompts.cpu(),
            prompt_mask=prompt_mask.cpu(),
            responses=torch.full(size, pad_token_id, dtype=torch.long),
            response_mask=torch.zeros(size, dtype=torch.bool),
            log_probs=torch.zeros(size, dtype=torch.float32) if with_log_probs else None,
            versions=torch.zeros(size, dtype=torch.int64),
            finished=torch.zeros(rows, dtype=torch.bool),
            row_seeds=torch.full((rows,), -1, dtype=torch.int64),
            limits=torch.full((rows,), response_length, dtype=torch.int64) if caps is None else caps,
        )
    needed = ["prompts", "attention_mask", "response_mask", ROLLOUT_VERSIONS, FINISHED, ROW_SEEDS]
    if with_log_probs:
        needed.append("rollout_log_probs")
    missing = [key for key in needed if key not in batch]
    if missing:
        raise RLCoreError(
            f"generate_partial: a batch that continues responses must hold the previous call's {', '.join(missing)}"
        )
    responses = batch["responses"]
    if responses.shape[1] != response_length:
        raise RLCoreError(
            f"generate_partial: responses have {responses.shape[1]} columns but rollout.response_length is "
            f"{response_length}"
        )
    prompts = batch["prompts"]
    return PartialRows(
        prompts=prompts.cpu().clone(),
        prompt_mask=batch["attention_mask"][:, : prompts.shape[1]].cpu().clone(),
        responses=responses.cpu().long().clone(),
        response_mask=batch["response_mask"].cpu().bool().clone(),
        log_probs=batch["rollout_log_probs"].cpu().float().clone() if with_log_probs else None,
        versions=batch[ROLLOUT_VERSIONS].cpu().long().clone(),
        finished=batch[FINISHED].cpu().bool().clone(),
        row_seeds=batch[ROW_SEEDS].cpu().long().clone(),
        limits=torch.full((len(prompts),), response_length, dtype=torch.int64) if caps is None else caps,
    )
