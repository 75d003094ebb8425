"""Render only the new messages of a conversation through the model's own chat template.

An agent loop appends tool and interaction messages to a trajectory whose earlier turns are token ids the
engine already saw. Re-tokenizing the whole conversation would change those ids for some templates (and
with them which tokens are supervised). :meth:`ChatRenderer.continuation_ids` instead renders a fixed
probe conversation ending in an assistant turn with and without the new messages, and keeps the text the
template writes *after that assistant turn's end-of-turn token*: the delimiters that close the assistant
turn (``"\\n"`` after ``<|im_end|>``), the new messages and the next generation prompt — and tokenizes
only that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlcore.errors import RLCoreError

__all__ = ["ChatRenderer"]

_SENTINEL = "RLCORE_AGENT_TURN_SENTINEL"


class ChatRenderer:
    """Turns messages into token ids for a tokenizer with a chat template.

    Args:
        tokenizer: the policy's tokenizer; its ``chat_template`` must render the roles used.
        end_of_turn: the text that ends an assistant turn (default: the tokenizer's EOS token).
        template_kwargs: extra keyword arguments for ``apply_chat_template`` (e.g. ``enable_thinking``).
    """

    def __init__(self, tokenizer: Any, end_of_turn: str | None = None, template_kwargs: dict[str, Any] | None = None):
        self.tokenizer = tokenizer
        eos = end_of_turn or getattr(tokenizer, "eos_token", None)
        if not eos:
            raise RLCoreError(
                "the tokenizer has no eos_token: multi-turn rollouts cannot find where an assistant turn ends"
            )
        self.end_of_turn = str(eos)
        self.template_kwargs = dict(template_kwargs or {})

    def _render(self, messages: Sequence[dict[str, Any]], *, generation_prompt: bool, tools: Any = None) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                list(messages),
                tools=tools or None,
                add_generation_prompt=generation_prompt,
                tokenize=False,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja raises many types; the user needs to know which messages failed
            roles = ", ".join(str(m.get("role")) for m in messages)
            raise RLCoreError(
                f"the chat template cannot render messages with roles [{roles}]: {type(exc).__name__}: {exc}"
            ) from exc

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without any added special tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> list[int]:
        """The first turn's prompt: ``messages`` (and the tool schemas) with the generation prompt."""
        return self.encode(self._render(messages, generation_prompt=True, tools=tools))

    def continuation_text(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> str:
        """The text that follows an assistant turn's end-of-turn token when ``messages`` come next, up to and
        including the next assistant generation prompt."""
        probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _SENTINEL}]
        text = self._render([*probe, *messages], generation_prompt=True, tools=tools)
        start = text.rfind(_SENTINEL)
        end = text.find(self.end_of_turn, start) if start >= 0 else -1
        if end < 0:
            raise RLCoreError(
                f"the chat template does not end an assistant turn with {self.end_of_turn!r}; multi-turn rollouts "
                "need the end-of-turn token the model generates (the tokenizer's eos_token)"
            )
        return text[end + len(self.end_of_turn) :]

    def continuation_ids(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> list[int]:
        """Token ids of :meth:`continuation_text`: what the trajectory gains after the assistant's turn."""
        return self.encode(self.continuation_text(messages, tools))
