"""The Hermes tool-call parser (kind ``tool_parser``, ``multi_turn.format=hermes``, the default).

A call whose JSON is malformed is returned as a :class:`~rlcore.api.ToolCall` with ``error`` set, so the loop
can answer it with an error message (the metric ``tool/malformed`` counts it) instead of dropping it.
"""

from __future__ import annotations

import json
import re

from rlcore.api import ToolCall

__all__ = ["HermesToolParser"]


class HermesToolParser:
    """The Hermes / Qwen format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one per block."""

    _BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str) -> list[ToolCall]:
        """Each ``<tool_call>`` block as a :class:`ToolCall`; an unclosed block is a malformed call."""
        calls = [self._call(block.strip()) for block in self._BLOCK.findall(text)]
        tail = text[text.rfind("</tool_call>") + len("</tool_call>") :] if "</tool_call>" in text else text
        if "<tool_call>" in tail:
            calls.append(ToolCall("", error="a <tool_call> block is not closed with </tool_call>"))
        return calls

    @staticmethod
    def _call(block: str) -> ToolCall:
        try:
            payload = json.loads(block)
        except json.JSONDecodeError as exc:
            return ToolCall("", error=f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})")
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return ToolCall("", error='a tool call must be a JSON object with a string "name"')
        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):  # some models emit the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return ToolCall(payload["name"], error='"arguments" is a string that is not a JSON object')
        if not isinstance(arguments, dict):
            return ToolCall(payload["name"], error='"arguments" must be a JSON object')
        return ToolCall(payload["name"], arguments)
