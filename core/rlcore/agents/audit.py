"""The mask audit: check that a multi-turn rollout supervises exactly the tokens the policy generated.

It reads the rollout Batch only (not the agent loop's bookkeeping) and checks each row against the chat
template's structure: every run of ``response_mask == 1`` tokens starts right after the template's
assistant generation prompt and ends with the end-of-turn token (only the last run may be cut short);
no end-of-turn token occurs inside a run; between two runs the template opens exactly one assistant turn and
after the last run none; ``rollout_log_probs`` is 0 outside the runs; nothing after the valid length is masked in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlcore.errors import RLCoreError

__all__ = ["MaskAuditError", "audit_batch", "generation_prompt"]


class MaskAuditError(RLCoreError):
    """A trajectory's ``response_mask`` does not cover exactly the assistant's generated tokens."""


def generation_prompt(tokenizer: Any, **template_kwargs: Any) -> str:
    """The text the chat template writes to open an assistant turn (``"<|im_start|>assistant\\n"`` for ChatML)."""
    messages = [{"role": "user", "content": "?"}]
    with_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **template_kwargs)
    without = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False, **template_kwargs)
    if not with_prompt.startswith(without) or with_prompt == without:
        raise MaskAuditError("the chat template's generation prompt is not a suffix of the rendered conversation")
    return with_prompt[len(without) :]


def mask_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of ones in ``mask`` (the spans a loss or response mask trains)."""
    runs: list[tuple[int, int]] = []
    start = None
    for i, value in enumerate([*mask, 0]):
        if value and start is None:
            start = i
        elif not value and start is not None:
            runs.append((start, i))
            start = None
    return runs


def audit_batch(batch: Any, tokenizer: Any, **template_kwargs: Any) -> int:
    """Check every row of a rollout ``batch``; returns the number of assistant turns checked.

    Raises :class:`MaskAuditError` naming the row, the turn and the tokens at fault.
    """
    auditor = _RowAuditor(tokenizer, generation_prompt(tokenizer, **template_kwargs))
    width = batch["responses"].shape[1]
    checked = 0
    for row in range(len(batch)):
        prompt = batch["prompts"][row][batch["attention_mask"][row, :-width].bool()].tolist()
        valid = int(batch["attention_mask"][row, -width:].sum())
        mask = batch["response_mask"][row].tolist()
        checked += auditor.check(row, prompt, batch["responses"][row, :valid].tolist(), mask)
        if "rollout_log_probs" in batch:
            log_probs = batch["rollout_log_probs"][row]
            if bool(log_probs[log_probs.new_tensor(mask) == 0].abs().gt(0).any()):
                raise MaskAuditError(f"row {row}: rollout_log_probs is non-zero on a token the policy did not generate")
    return checked


class _RowAuditor:
    """The structural checks of one row (see the module docstring)."""

    def __init__(self, tokenizer: Any, header: str) -> None:
        self.tokenizer = tokenizer
        self.header = header
        self.eos = str(tokenizer.eos_token)
        self.eos_id = int(tokenizer.convert_tokens_to_ids(self.eos))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def check(self, row: int, prompt: list[int], response: list[int], mask: list[int]) -> int:
        """Audit one row; returns its number of assistant turns."""

        def fail(problem: str, start: int = 0, end: int = 0) -> MaskAuditError:
            text = self.decode(response[start:end]) if end > start else ""
            return MaskAuditError(f"row {row}: {problem}" + (f": {text!r}" if text else ""))

        valid = len(response)
        if any(mask[valid:]):
            raise fail("response_mask is 1 after the valid response tokens")
        runs = mask_spans(mask[:valid])
        for turn, (start, end) in enumerate(runs):
            if not self.decode(prompt + response[:start]).endswith(self.header):
                raise fail(f"assistant turn {turn} does not start right after {self.header!r}", start, end)
            if self.eos_id in response[start : end - 1]:
                raise fail(f"assistant turn {turn} runs past its end-of-turn token {self.eos!r}", start, end)
            if response[end - 1] != self.eos_id and turn != len(runs) - 1:
                raise fail(f"assistant turn {turn} does not end with {self.eos!r}", start, end)
        gaps = [(runs[k - 1][1], runs[k][0]) for k in range(1, len(runs))] + [(runs[-1][1] if runs else 0, valid)]
        for k, (start, end) in enumerate(gaps):
            found = self.decode(response[start:end]).count(self.header)
            wanted = 1 if k < len(gaps) - 1 else 0
            if found != wanted:
                raise fail(
                    f"{found} assistant generation prompts between masked-in turns (expected {wanted})", start, end
                )
        return len(runs)
