"""Run the agent loops of a rollout batch: batched turns on the engine, concurrent tools, one Batch out.

:class:`AgentRunner` is the :class:`~rlcore.api.MultiTurnRunner` the trainer sends a rollout batch to
instead of the engine when multi-turn is on (or a sample names an agent loop). Every sample's loop runs as an asyncio task; :class:`TurnBatcher` gathers the
turns that are waiting for the engine and sends them as one left-padded Batch through the rollout worker
group's ``generate_sequences`` in a thread, so tool calls of other trajectories keep running meanwhile. The
trajectories are laid out exactly like an engine's output (left-padded ``prompts``, right-padded
``responses``), with ``response_mask`` 1 only on policy tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlcore.api import (
    ROLLOUT_KEY,
    AgentContext,
    AgentSample,
    AgentSettings,
    Batch,
    ChatRenderer,
    Generation,
    RLCoreError,
    RolloutConfig,
    Trajectory,
    agent_names,
    left_pad,
)
from rlcore_plugin_agents.interactions import load_interactions
from rlcore_plugin_agents.tools import ToolExecutor, load_tools
from rlcore_plugin_agents.tracing import Tracer, trajectory_outputs

if TYPE_CHECKING:
    from rlcore.api import Registry

__all__ = ["AgentRunner", "TurnBatcher", "aborted_trajectory", "finish_or_abort", "run_agent_loops"]

#: seconds the batcher waits for more turns once one is pending and some trajectories are busy elsewhere
GATHER_WINDOW_S = 0.005


class TurnBatcher:
    """Collects the turns trajectories wait for and generates them together.

    Args:
        generate: the rollout call, ``Batch -> Batch`` (the worker group's ``generate_sequences``).
        pad_id: the pad token id for left-padding contexts.
        eos_ids: ids that end a turn (a turn without one at its end was cut by the engine's length).
        meta: the rollout batch's ``meta`` (``validate``, ``do_sample``, ``temperature``) for every turn.
    """

    def __init__(self, generate: Callable[[Batch], Batch], pad_id: int, eos_ids: Sequence[int], meta: dict[str, Any]):
        self._generate = generate
        self.pad_id = pad_id
        self.eos_ids = set(eos_ids)
        self.meta = {k: v for k, v in meta.items() if k != "metrics"}
        self.pending: list[tuple[list[int], asyncio.Future[Generation]]] = []
        self.live = 0
        self.engine_calls = 0
        self.with_log_probs = False
        self._arrived: asyncio.Event | None = None

    async def generate(self, token_ids: list[int]) -> Generation:
        """Queue one turn and wait for it."""
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self.pending.append((list(token_ids), future))
        if self._arrived is not None:
            self._arrived.set()
        return await future

    def _call(self, contexts: list[list[int]]) -> list[Generation]:
        ids, mask = left_pad(contexts, self.pad_id)
        batch = Batch(
            {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp_(min=0)},
            {},
            dict(self.meta),
        )
        out = self._generate(batch)
        responses, valid = out["responses"].cpu(), out["response_mask"].cpu().bool()
        log_probs = out["rollout_log_probs"].cpu() if "rollout_log_probs" in out else None
        self.with_log_probs = log_probs is not None
        width = responses.shape[1]
        turns = []
        for row in range(len(contexts)):
            count = int(valid[row].sum())
            tokens = responses[row, :count].tolist()
            finished = count < width or (bool(tokens) and tokens[-1] in self.eos_ids)
            lps = log_probs[row, :count].tolist() if log_probs is not None else None
            turns.append(Generation(tokens, lps, finished))
        return turns

    async def serve(self, tasks: Sequence[asyncio.Task[Any]]) -> None:
        """Dispatch queued turns until every task is done: at once when every live trajectory is waiting,
        else after a short window without new arrivals (some are running tools)."""
        self._arrived = asyncio.Event()
        while True:
            live = sum(not t.done() for t in tasks)
            if live == 0:
                return
            if not self.pending:
                self._arrived.clear()
                waiter = asyncio.ensure_future(self._arrived.wait())
                await asyncio.wait([waiter, *[t for t in tasks if not t.done()]], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                continue
            if len(self.pending) < live:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), GATHER_WINDOW_S)
                    continue
                except TimeoutError:
                    pass
            batch, self.pending = self.pending, []
            self.engine_calls += 1
            try:
                turns = await asyncio.to_thread(self._call, [ids for ids, _ in batch])
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                raise
            for (_, future), turn in zip(batch, turns):
                if not future.done():  # its trajectory was aborted (over_sample_rate) while the turn ran
                    future.set_result(turn)


class AgentRunner:
    """Builds the agent machinery of a run once (tools, interactions, parser, loops) and runs rollouts.

    Args:
        config: the resolved run config.
        tokenizer: the policy's tokenizer.
        registry: the run's registry: the tools, interactions, tool parser, agent loops and trace backend
            are resolved there.
    """

    def __init__(self, config: Any, tokenizer: Any, registry: Registry) -> None:
        rollout = RolloutConfig.from_tree(config)
        self.settings = AgentSettings.from_rollout(rollout)
        self.records_routing = bool(rollout.enable_rollout_routing_replay)
        self.tokenizer = tokenizer
        self.registry = registry
        tools = load_tools(self.settings.tool_config_path, registry) if self.settings.tool_config_path else {}
        self.tools = ToolExecutor(
            tools,
            self.settings.max_parallel_calls,
            self.settings.max_tool_response_length,
            self.settings.tool_response_truncate_side,
        )
        self.interactions = (
            load_interactions(self.settings.interaction_config_path, registry)
            if self.settings.interaction_config_path
            else {}
        )
        self.parser = self.registry.load("tool_parser", self.settings.format)()
        self.renderer = ChatRenderer(tokenizer)
        self.registry.load("agent_loop", self.settings.default_agent_loop)  # unknown names fail at start
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad)
        eos = tokenizer.eos_token_id
        self.eos_ids = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
        self._calls = 0
        self.tracer = Tracer.from_config(config, tokenizer, registry)

    def applies_to(self, batch: Batch) -> bool:
        """Whether ``batch`` needs agent loops: multi-turn is on, the default loop is not ``single_turn`` or a
        sample names an agent loop."""
        return self.settings.active or any(name for name in agent_names(batch) if name)

    def run(self, batch: Batch, generate: Callable[[Batch], Batch]) -> Batch:
        """The rollout of ``batch`` (left-padded prompts, already repeated ``n`` times) through agent loops.

        Raises :class:`RLCoreError` with ``rollout.enable_rollout_routing_replay`` (R3): the trajectories do not
        carry the routing the engine records (the dry run refuses R3 with multi-turn; this catches samples that
        name an agent loop themselves)."""
        if self.records_routing:
            raise RLCoreError(
                f"{ROLLOUT_KEY}.enable_rollout_routing_replay=true, but these samples go through agent loops "
                f"(they name one, or {ROLLOUT_KEY}.multi_turn is on), whose trajectories do not carry the recorded "
                "routing yet; turn R3 off or drop the samples' agent loop"
            )
        return asyncio.run(self._run(batch, generate))

    async def _run(self, batch: Batch, generate: Callable[[Batch], Batch]) -> Batch:
        self._calls += 1
        batcher = TurnBatcher(generate, self.pad_id, self.eos_ids, dict(batch.meta))
        context = AgentContext(
            tokenizer=self.tokenizer,
            renderer=self.renderer,
            settings=self.settings,
            tools=self.tools,
            parser=self.parser,
            generator=batcher,
            interactions=self.interactions,
        )
        names = [name or self.settings.default_agent_loop for name in agent_names(batch)]
        loops = {name: self.registry.load("agent_loop", name)(context) for name in dict.fromkeys(names)}
        samples = _samples(batch, self._calls)
        timings: list[float] = [0.0] * len(samples)

        traced = self.tracer.begin(batch, samples, names, self._calls) if self.tracer else {}

        async def one(i: int) -> Trajectory:
            start = time.perf_counter()
            with self.tracer.trajectory(traced.get(i)) if self.tracer else contextlib.nullcontext() as trace:
                trajectory = await loops[names[i]].run(samples[i])
                if trace is not None:
                    trace.end(trajectory_outputs(trajectory))
            timings[i] = time.perf_counter() - start
            return trajectory

        tasks = [asyncio.ensure_future(one(i)) for i in range(len(samples))]
        server = asyncio.ensure_future(batcher.serve(tasks))
        try:
            await finish_or_abort(tasks, self.completion_target(len(tasks), batch.meta))
            trajectories = [
                aborted_trajectory(samples[i]) if task.cancelled() else task.result() for i, task in enumerate(tasks)
            ]
        finally:
            for task in (*tasks, server):
                task.cancel()
            await asyncio.gather(*tasks, server, return_exceptions=True)
        if self.tracer:
            self.tracer.export()
        out = assemble(batch, trajectories, self.settings.response_length, self.pad_id, batcher.with_log_probs)
        out.meta["agent_metrics"] = agent_metrics(trajectories, timings, batcher.engine_calls)
        return out

    def completion_target(self, size: int, meta: dict[str, Any]) -> int:
        """How many of ``size`` trajectories a rollout waits for: ``int(size × (1 − over_sample_rate))`` in
        training (verl's early termination), all of them in validation."""
        if meta.get("validate") or not self.settings.over_sample_rate:
            return size
        return max(1, int(size * (1 - self.settings.over_sample_rate)))


async def finish_or_abort(tasks: Sequence[asyncio.Task[Trajectory]], target: int) -> None:
    """Wait until ``target`` of ``tasks`` are done, then cancel the others (aborted trajectories) and wait for
    them to unwind (their tool instances are released). A loop's error is raised as soon as it is seen."""
    pending: set[asyncio.Task[Trajectory]] = set(tasks)
    while len(tasks) - len(pending) < target:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def aborted_trajectory(sample: AgentSample) -> Trajectory:
    """What an aborted sample contributes, as in verl: its prompt and an empty response, so that its
    ``response_mask`` is all 0 and no token of it enters the loss; ``extra["aborted"]`` marks it."""
    return Trajectory(list(sample.prompt_ids), extra={"aborted": True})


def _samples(batch: Batch, call: int) -> list[AgentSample]:
    ids, mask = batch["input_ids"], batch["attention_mask"] if "attention_mask" in batch else None
    raw: Sequence[Any] = batch["raw_prompt"] if "raw_prompt" in batch.non_tensors else [None] * len(batch)
    infos: Sequence[Any] = batch["extra_info"] if "extra_info" in batch.non_tensors else [None] * len(batch)
    samples = []
    for i in range(len(batch)):
        row = ids[i][mask[i].bool()] if mask is not None else ids[i]
        prompt = raw[i]
        messages = [dict(m) for m in prompt] if prompt is not None else None
        info = dict(infos[i]) if isinstance(infos[i], dict) else {}
        samples.append(AgentSample(row.tolist(), messages, info, f"{call}-{i}"))
    return samples


def assemble(
    batch: Batch, trajectories: Sequence[Trajectory], response_length: int, pad_id: int, with_log_probs: bool
) -> Batch:
    """The rollout Batch of ``trajectories`` in an engine's layout (``rollout_log_probs`` when
    ``with_log_probs``); per-sample ``extra_info`` gains ``num_turns``, ``tool_rewards`` and ``turn_scores``
    for reward functions."""
    prompt_width = batch["input_ids"].shape[1]
    for i, trajectory in enumerate(trajectories):
        trajectory.finish(response_length)
        if len(trajectory.prompt_ids) > prompt_width:
            raise RLCoreError(
                f"sample {i}: the agent loop's prompt is {len(trajectory.prompt_ids)} tokens (with the tool "
                f"schemas), more than data.max_prompt_length={prompt_width}; raise data.max_prompt_length"
            )
    prompts, prompt_mask = left_pad([t.prompt_ids for t in trajectories], pad_id, prompt_width)
    size = (len(trajectories), response_length)
    responses = torch.full(size, pad_id, dtype=torch.long)
    response_mask = torch.zeros(size, dtype=torch.long)
    attention = torch.zeros(size, dtype=torch.long)
    log_probs = torch.zeros(size, dtype=torch.float32)
    for i, t in enumerate(trajectories):
        n = len(t.response_ids)
        responses[i, :n] = torch.tensor(t.response_ids, dtype=torch.long)
        response_mask[i, :n] = torch.tensor(t.response_mask, dtype=torch.long)
        attention[i, :n] = 1
        log_probs[i, :n] = torch.tensor(t.log_probs, dtype=torch.float32)
    prompt_mask = prompt_mask.to(batch["attention_mask"].dtype) if "attention_mask" in batch else prompt_mask
    attention_mask = torch.cat([prompt_mask, attention.to(prompt_mask.dtype)], dim=-1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask.to(prompt_mask.dtype),
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.long().cumsum(-1) - 1).clamp_(min=0),
    }
    if with_log_probs:
        tensors["rollout_log_probs"] = log_probs
    non_tensors = {key: value.copy() for key, value in batch.non_tensors.items()}
    infos = list(non_tensors.get("extra_info", [None] * len(trajectories)))
    for i, t in enumerate(trajectories):
        info = dict(infos[i]) if isinstance(infos[i], dict) else {}
        info.update(
            num_turns=t.num_turns,
            tool_rewards=t.reward_scores.get("tool_rewards", 0.0),
            aborted=bool(t.extra.get("aborted", False)),
        )
        info["turn_scores"] = list(t.extra.get("turn_scores", []))
        infos[i] = info
    non_tensors["extra_info"] = np.array(infos + [None], dtype=object)[:-1]
    meta = {key: value for key, value in batch.meta.items() if key != "metrics"}
    meta["metrics"] = {"rollout/gen_tokens": int(response_mask.sum())}
    return Batch(tensors, non_tensors, meta)


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64) if len(values) else np.zeros(1)
    return {f"{prefix}/min": float(arr.min()), f"{prefix}/max": float(arr.max()), f"{prefix}/mean": float(arr.mean())}


def agent_metrics(trajectories: Sequence[Trajectory], seconds: Sequence[float], engine_calls: int) -> dict[str, float]:
    """The rollout's metrics: ``num_turns/*`` (verl's names), ``agent_loop/*`` timing and the count of
    trajectories aborted by ``over_sample_rate``, ``tool/*`` counters."""
    metrics = _stats("num_turns", [t.num_turns for t in trajectories])
    metrics.update(_stats("agent_loop/trajectory_s", seconds))
    metrics["agent_loop/engine_calls"] = float(engine_calls)
    metrics["agent_loop/aborted"] = float(sum(bool(t.extra.get("aborted")) for t in trajectories))
    metrics["agent_loop/policy_tokens/mean"] = float(np.mean([sum(t.response_mask) for t in trajectories] or [0]))
    metrics["agent_loop/observation_tokens/mean"] = float(
        np.mean([len(t.response_mask) - sum(t.response_mask) for t in trajectories] or [0])
    )
    calls = [t.metrics.get("tool/calls", 0.0) for t in trajectories]
    metrics["tool/calls/mean"] = float(np.mean(calls or [0]))
    metrics["tool/call_rate"] = float(np.mean([float(c > 0) for c in calls] or [0.0]))
    for key in (
        "tool/errors",
        "tool/malformed",
        "tool/timeouts",
        "tool/unknown",
        "tool/truncated",
        "tool/create_errors",
        "interaction/turns",
        "interaction/errors",
    ):
        metrics[key] = float(sum(t.metrics.get(key, 0.0) for t in trajectories))
    total_calls = sum(calls)
    metrics["tool/time_s/mean"] = (
        sum(t.metrics.get("tool/time_s", 0.0) for t in trajectories) / total_calls if total_calls else 0.0
    )
    return metrics


def run_agent_loops(
    config: Any, tokenizer: Any, registry: Registry, batch: Batch, generate: Callable[[Batch], Batch]
) -> Batch:
    """One-shot helper: build an :class:`AgentRunner` and run ``batch`` (tests and scripts; the trainer keeps one)."""
    return AgentRunner(config, tokenizer, registry).run(batch, generate)
