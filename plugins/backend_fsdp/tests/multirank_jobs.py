"""Scenarios that run the FSDP workers at world size 1 and 2 on the same global batch.

Imported by name (not collected by pytest) so that :func:`rlcore_testkit.ranks.spawn` can pickle
:func:`run_rank` into its child processes. :func:`run_scenarios` is the same code for both world sizes:
each rank takes its consecutive chunk of the global batch, as a worker group would give it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

from rlcore.api.batch import Batch

#: four long prompts then four short ones: under a token budget the two ranks need different numbers
#: of micro-batches, which the workers must agree on
PROMPTS = (
    "john has 5 apples and mary has more apples than john",
    "how many oranges are left after mary sold the oranges",
    "what is the total cost of the apples and the oranges",
    "first think then answer the question with the number",
    "cost",
    "a",
    "sum",
    "left",
)
#: every scenario: (worker role, config overrides)
SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    # token-mean over responses of unequal lengths, micro-batches of 2 rows on every rank
    "token_mean": ("actor", {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2}),
    # token-budget micro-batches over packed sequences, for the log-prob pass and the update
    "dynamic_packed": (
        "actor",
        {
            "actor_rollout_ref.model.use_remove_padding": True,
            "actor_rollout_ref.actor.use_dynamic_bsz": True,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 40,
        },
    ),
    # adapters sharded across ranks next to frozen base weights; compared as merged weights
    "lora": (
        "actor",
        {
            "actor_rollout_ref.model.lora_rank": 4,
            "actor_rollout_ref.model.lora_alpha": 8,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        },
    ),
    "critic": ("critic", {"critic.ppo_micro_batch_size_per_gpu": 2}),
    # bf16 compute under torch.autocast on FSDP2-sharded parameters
    "cpu_autocast": (
        "actor",
        {
            "actor_rollout_ref.actor.fsdp_config.cpu_autocast": True,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        },
    ),
}


class Settings(TrainingBackendContract):
    """The contract's small config for the ``fsdp`` backend (not a test class)."""

    component_name = "fsdp"


def global_batch(model_dir: Path) -> Batch:
    """The 8-row batch every world size trains on: left-padded prompts, responses of 8, 7 and 6 tokens."""
    from transformers import AutoTokenizer

    return make_batch(AutoTokenizer.from_pretrained(model_dir), prompts=PROMPTS, response_length=8, seed=7)


def run_scenario(name: str, model_dir: Path, rank: int, world_size: int) -> dict[str, Any]:
    """Build the scenario's worker as ``rank`` of ``world_size``, run one update on this rank's chunk of
    :func:`global_batch` and return the full parameters, the update's gradient norm and (for the actor)
    this chunk's old log-probs."""
    from rlcore.workers.actor import ActorRolloutRefWorker
    from rlcore.workers.critic import CriticWorker

    role, overrides = SCENARIOS[name]
    config = Settings.make_config(
        model_dir,
        **{
            "data.train_batch_size": 8,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
            "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
            "actor_rollout_ref.actor.entropy_coeff": 0.01,
            **overrides,
        },
    )
    batch = global_batch(model_dir)
    advantages = torch.linspace(-1.0, 1.0, batch["responses"].numel()).view_as(batch["responses"])
    chunk = batch.chunk(world_size)[rank]
    chunk["advantages"] = advantages.chunk(world_size)[rank].clone()
    worker_cls = CriticWorker if role == "critic" else ActorRolloutRefWorker
    worker = worker_cls(config, role, rank, world_size)
    try:
        worker.init_model()
        out: dict[str, Any] = {}
        if role == "critic":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            chunk["values"] = worker.compute_values(chunk)["values"]
            chunk["returns"] = chunk["advantages"]
            out["grad_norm"] = worker.update_critic(chunk).meta["metrics"]["critic/grad_norm"]
            options = StateDictOptions(full_state_dict=True)
            out["state"] = get_model_state_dict(worker.critic.module, options=options)
        else:
            chunk["old_log_probs"] = out["old_log_probs"] = worker.compute_log_prob(chunk)["old_log_probs"]
            out["grad_norm"] = worker.update_actor(chunk).meta["metrics"]["actor/grad_norm"]
            out["state"] = worker.full_state_dict()
        return {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in out.items()}
    finally:
        worker.shutdown()


def run_scenarios(model_dir: Path, rank: int = 0, world_size: int = 1) -> dict[str, dict[str, Any]]:
    """Every scenario's result for this rank."""
    return {name: run_scenario(name, model_dir, rank, world_size) for name in SCENARIOS}


def run_rank(rank: int, world_size: int, store_file: str, model_dir: str, out_dir: str) -> None:
    """A spawned rank: join a gloo group through a ``FileStore``, run the scenarios, save the results to
    ``out_dir/rank<r>.pt`` and leave the group."""
    torch.set_num_threads(1)
    store = dist.FileStore(store_file, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    try:
        results = run_scenarios(Path(model_dir), rank, world_size)
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
