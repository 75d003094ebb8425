"""Contract suites for the multi-turn kinds: ``tool``, ``agent_loop``, ``interaction``, ``tool_parser`` and
``retriever``.

::

    from rlcore_testkit.contracts import AgentLoopContract, ToolContract

    class TestMyTool(ToolContract):
        component_name = "search"
        example_arguments = {"query": "rlcore"}

    class TestMyLoop(AgentLoopContract):
        component_name = "reflect"

``AgentLoopContract`` runs the loop on rlcore's HF engine with a tiny model warm-started on calculator
conversations in the Qwen2.5 chat template (:mod:`rlcore_testkit.contracts.chat_templates`), with the
calculator tool, and checks every trajectory with the mask audit. The samples carry no ``raw_prompt`` (the
tool schemas would make the prompts longer than the contract's 96 tokens), so loops start from the prompt ids.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from rlcore_plugin_agents.tools import ToolExecutor

from rlcore import load_plugins
from rlcore.api import InteractionTurn, RetrievedDocument, Tool, ToolCall, ToolResult, audit_batch

__all__ = ["AgentLoopContract", "InteractionContract", "ToolContract", "ToolParserContract"]


class ToolContract:
    """Behaviour every ``tool`` must have: a valid schema, a full create → execute → release cycle that returns
    text, and bad arguments answered with a message rather than an exception."""

    component_name: ClassVar[str]
    #: arguments of a call that succeeds
    example_arguments: ClassVar[dict[str, Any]] = {}
    #: ``create_kwargs`` for each instance (e.g. the sample's ground truth)
    create_kwargs: ClassVar[dict[str, Any]] = {}
    #: the tool's ``config`` and ``tool_schema`` (None: the class's ``default_schema``)
    tool_config: ClassVar[dict[str, Any]] = {}
    tool_schema: ClassVar[dict[str, Any] | None] = None

    @pytest.fixture
    def tool(self) -> Tool:
        """A tool instance built as the tool YAML would build it."""
        cls = load_plugins().registry.load("tool", self.component_name)
        assert issubclass(cls, Tool), f"{cls!r} is not a subclass of rlcore.agents.Tool"
        return cls(dict(self.tool_config), self.tool_schema)

    def test_schema_is_an_openai_function(self, tool: Tool) -> None:
        schema = tool.openai_schema()
        assert schema["type"] == "function"
        assert isinstance(schema["function"]["name"], str) and schema["function"]["name"] == tool.name
        assert schema["function"].get("parameters", {"type": "object"})["type"] == "object"

    def test_lifecycle_returns_text(self, tool: Tool) -> None:
        async def cycle() -> Any:
            await tool.create("contract-0", **self.create_kwargs)
            try:
                return await tool.execute("contract-0", dict(self.example_arguments))
            finally:
                await tool.release("contract-0")

        result = asyncio.run(cycle())
        assert isinstance(result, (str, ToolResult))
        text = result if isinstance(result, str) else result.text
        assert isinstance(text, str) and text and not text.startswith("Error")

    def test_bad_arguments_are_answered_not_raised(self, tool: Tool) -> None:
        executor = ToolExecutor({tool.name: tool}, 1, 256, "middle")
        metrics: dict[str, float] = {}

        async def bad_call() -> ToolResult:
            await executor.create("contract-1", {tool.name: {"create_kwargs": dict(self.create_kwargs)}}, metrics)
            try:
                return await executor.call("contract-1", ToolCall(tool.name, {"unexpected": object()}), metrics)
            finally:
                await executor.release("contract-1")

        result = asyncio.run(bad_call())
        assert isinstance(result.text, str) and result.text
        assert metrics.get("tool/errors", 0.0) == 0.0, f"the tool raised on bad arguments: {result.text}"


class ToolParserContract:
    """Behaviour every ``tool_parser`` must have: it finds calls, ignores plain text and never raises."""

    component_name: ClassVar[str]
    #: an assistant turn with exactly one call to ``calculator`` with ``{"expression": "1+2"}``
    example_text: ClassVar[str]

    @pytest.fixture
    def parser(self) -> Any:
        """The parser instance."""
        return load_plugins().registry.load("tool_parser", self.component_name)()

    def test_parses_the_example(self, parser: Any) -> None:
        assert parser.parse(self.example_text) == [ToolCall("calculator", {"expression": "1+2"})]

    def test_plain_text_has_no_calls(self, parser: Any) -> None:
        assert parser.parse("The answer is 3.") == []

    @pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
    def test_truncated_calls_never_raise(self, parser: Any, cut: float) -> None:
        calls = parser.parse(self.example_text[: int(len(self.example_text) * cut)])
        assert all(isinstance(call, ToolCall) for call in calls)


class InteractionContract:
    """Behaviour every ``interaction`` must have: start → respond → finish, replies as :class:`InteractionTurn`."""

    component_name: ClassVar[str]
    #: the sample's ``extra_info.interaction_kwargs``
    interaction_kwargs: ClassVar[dict[str, Any]] = {}
    interaction_config: ClassVar[dict[str, Any]] = {}

    def test_replies_to_an_assistant_turn(self) -> None:
        cls = load_plugins().registry.load("interaction", self.component_name)
        interaction = cls(dict(self.interaction_config))
        messages = [{"role": "user", "content": "What is 1+2?"}, {"role": "assistant", "content": "It is 4."}]

        async def episode() -> InteractionTurn:
            await interaction.start("contract-0", **self.interaction_kwargs)
            try:
                return await interaction.respond("contract-0", messages)
            finally:
                await interaction.finish("contract-0")

        turn = asyncio.run(episode())
        assert isinstance(turn, InteractionTurn)
        assert isinstance(turn.text, str) and isinstance(turn.done, bool)
        assert turn.reward is None or isinstance(turn.reward, float)


class AgentLoopContract:
    """Behaviour every ``agent_loop`` must have: on a real engine and chat template, every trajectory fits the
    rollout layout and passes the mask audit (``response_mask`` is 1 exactly on the policy's tokens)."""

    component_name: ClassVar[str]
    #: extra config overrides (dotted keys)
    config_overrides: ClassVar[list[str]] = []
    response_length: ClassVar[int] = 96

    @pytest.fixture
    def rollout(self, tmp_path: Path) -> Any:
        """Eight samples through the loop: the output Batch."""
        import torch
        from rlcore_plugin_agents.runner import AgentRunner, left_pad
        from rlcore_plugin_hf.engine import HFRolloutEngine

        from rlcore.api import Batch, RolloutConfig, load_config
        from rlcore_testkit.contracts.chat_templates import tool_chat_pair

        tokenizer, model = tool_chat_pair("qwen2.5")
        tools = tmp_path / "tools.yaml"
        tools.write_text("tools:\n  - class_name: calculator\n")
        cfg = load_config(
            overrides=[
                f"actor_rollout_ref.rollout.response_length={self.response_length}",
                "actor_rollout_ref.rollout.calculate_log_probs=true",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
                f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
                f"actor_rollout_ref.rollout.agent.default_agent_loop={self.component_name}",
                *self.config_overrides,
            ]
        )
        messages = [[{"role": "user", "content": f"{a}*{a + 3}="}] for a in range(11, 19)]
        rows = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
        ids, mask = left_pad(
            [tokenizer(r, add_special_tokens=False)["input_ids"] for r in rows], tokenizer.pad_token_id, 96
        )
        batch = Batch(
            {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
            {"extra_info": np.array([{} for _ in messages], dtype=object)},
            {"validate": False},
        )
        engine = HFRolloutEngine(None, tokenizer, RolloutConfig.from_tree(cfg), module=model)
        with torch.no_grad():
            return AgentRunner(cfg, tokenizer, load_plugins().registry).run(batch, engine.generate), tokenizer

    def test_layout(self, rollout: Any) -> None:
        out, _ = rollout
        assert out["responses"].shape == (8, self.response_length)
        assert out["prompts"].shape == (8, 96)
        assert out["input_ids"].shape == (8, 96 + self.response_length)
        assert bool(out["response_mask"].sum(-1).gt(0).all()), "a trajectory without policy tokens"

    def test_mask_audit(self, rollout: Any) -> None:
        out, tokenizer = rollout
        assert audit_batch(out, tokenizer) >= len(out)


class RetrieverContract:
    """Behaviour every ``retriever`` must have: one ranked list per query, in order, at most ``topk`` documents,
    best first, the same answer twice."""

    component_name: ClassVar[str]
    #: the ``retriever_config`` it is built with
    retriever_config: ClassVar[dict[str, Any]] = {}
    #: queries it can answer with at least one document each
    example_queries: ClassVar[tuple[str, ...]] = ("capital of France", "a river in Africa")

    @pytest.fixture
    def retriever(self) -> Any:
        """The retriever instance."""
        return load_plugins().registry.load("retriever", self.component_name)(dict(self.retriever_config))

    def test_one_ranked_list_per_query(self, retriever: Any) -> None:
        results = retriever.retrieve(list(self.example_queries), 2)
        assert isinstance(results, list) and len(results) == len(self.example_queries)
        for found in results:
            assert 1 <= len(found) <= 2, "each example query finds one or two documents at topk=2"
            assert all(isinstance(doc, RetrievedDocument) and isinstance(doc.contents, str) for doc in found)
            scores = [float(doc.score) for doc in found]
            assert all(np.isfinite(scores)) and scores == sorted(scores, reverse=True), "best first"

    def test_topk_bounds_each_list(self, retriever: Any) -> None:
        assert all(len(found) <= 1 for found in retriever.retrieve(list(self.example_queries), 1))

    def test_no_queries_no_results(self, retriever: Any) -> None:
        assert retriever.retrieve([], 3) == []

    def test_the_same_answer_twice(self, retriever: Any) -> None:
        queries = list(self.example_queries)
        assert retriever.retrieve(queries, 2) == retriever.retrieve(queries, 2)
