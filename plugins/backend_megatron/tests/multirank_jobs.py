"""Scenarios that run the Megatron actor at tensor/pipeline-parallel layouts on the same global batch.

Imported by name (not collected by pytest) so that :func:`rlcore_testkit.ranks.spawn` can pickle
:func:`run_world` into its child processes. Every rank takes the chunk of its data-parallel rank, as the
worker group gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.ranks import spawn

from rlcore.api.batch import Batch
from rlcore.api.training import ROUTED_EXPERTS

PROMPTS = (
    "john has 5 apples and mary has more apples than john",
    "how many oranges are left",
    "what is the total cost of the apples",
    "first think then answer",
)
#: name -> (world size, tensor parallel size, pipeline parallel size)
LAYOUTS: dict[str, tuple[int, int, int]] = {
    "tp1": (1, 1, 1),
    "tp2": (2, 2, 1),
    "pp2": (2, 1, 2),
    "tp2pp2": (4, 2, 2),
    "tp2dp2": (4, 2, 1),
    "tp2_recompute": (2, 2, 1),
    "tp2sp": (2, 2, 1),
    "moe_r3_pp1": (1, 1, 1),
    "moe_r3_pp2": (2, 1, 2),
    "pp2vpp2": (2, 1, 2),
    "cp2": (2, 1, 1),
    "moe_ep1": (1, 1, 1),
    "moe_ep2": (2, 1, 1),
    "lora_tp1": (1, 1, 1),
    "lora_tp2": (2, 2, 1),
    "lora_moe_ep1": (1, 1, 1),
    "lora_moe_ep2": (2, 1, 1),
}
#: what a Megatron rank imports beyond :data:`rlcore_testkit.ranks.BASE_PRELOAD` (1.5 s of CPU per rank
#: otherwise): megatron-core and its GPT model
PRELOAD = ("megatron.core", "megatron.core.models.gpt.gpt_model", "megatron.core.models.gpt.gpt_layer_specs")
#: name -> virtual pipeline size, for the layouts with interleaved (virtual) pipeline stages
VIRTUAL: dict[str, int] = {"pp2vpp2": 2}
#: name -> context parallel size, for the layouts with context parallelism
CONTEXT: dict[str, int] = {"cp2": 2}
#: name -> expert parallel size, for the layouts of a mixture-of-experts model
EXPERT: dict[str, int] = {"moe_ep1": 1, "moe_ep2": 2, "lora_moe_ep1": 1, "lora_moe_ep2": 2}
#: the layouts that split the sequence over the tensor-parallel ranks (``megatron.sequence_parallel``)
SEQUENCE_PARALLEL = {"tp2sp"}
#: the layouts of a mixture-of-experts model that replay :func:`replayed_routes` (``router_replay.mode=R3``)
REPLAY = {"moe_r3_pp1", "moe_r3_pp2"}
#: the layouts that recompute every layer in the backward pass (``model.enable_gradient_checkpointing``)
RECOMPUTE = {"tp2_recompute"} | REPLAY
#: the layouts that train LoRA adapters (``model.lora.*``; on the MoE model every expert gets its own)
LORA: dict[str, Any] = {"actor_rollout_ref.model.lora.rank": 4, "actor_rollout_ref.model.lora.alpha": 8}
LORA_LAYOUTS = {"lora_tp1", "lora_tp2", "lora_moe_ep1", "lora_moe_ep2"}
#: the layouts whose runs also export, checkpoint and resume (given an ``out_dir``)
RESUMED = set(VIRTUAL) | set(CONTEXT) | set(EXPERT) | LORA_LAYOUTS


class Settings(TrainingBackendContract):
    """The contract's small config for the ``megatron`` backend (not a test class)."""

    component_name = "megatron"


def global_batch(model_dir: Path) -> Batch:
    """The 4-row batch every layout trains on."""
    from transformers import AutoTokenizer

    return make_batch(AutoTokenizer.from_pretrained(model_dir), prompts=PROMPTS, response_length=8, seed=7)


def exported_log_probs(hf_dir: Path, batch: Batch) -> torch.Tensor:
    """The log-probs of ``batch``'s responses under the Hugging Face export at ``hf_dir`` (transformers, fp32)."""
    from transformers import AutoModelForCausalLM

    from rlcore.algos.functional import logprobs_from_logits

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    length = batch["responses"].shape[1]
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits[:, -length - 1 : -1]
    return logprobs_from_logits(logits, batch["responses"]).detach()


def make_worker(name: str, model_dir: Path, rank: int) -> Any:
    """The actor worker of layout ``name`` as ``rank`` (initialised)."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    world, tp, pp = LAYOUTS[name]
    sizes = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp}
    if name in VIRTUAL:
        sizes["virtual_pipeline_model_parallel_size"] = VIRTUAL[name]
    if name in CONTEXT:
        sizes["context_parallel_size"] = CONTEXT[name]
    if name in EXPERT:
        sizes["expert_model_parallel_size"] = EXPERT[name]
    if name in SEQUENCE_PARALLEL:
        sizes["sequence_parallel"] = True
    config = Settings.make_config(
        model_dir,
        **{
            f"actor_rollout_ref.{role}.megatron.{key}": value
            for role in ("actor", "ref")
            for key, value in sizes.items()
        },
        **(LORA if name in LORA_LAYOUTS else {}),
        **{
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
            "actor_rollout_ref.actor.entropy_coeff": 0.01,
            "actor_rollout_ref.actor.optim.lr": 1e-3,
            "actor_rollout_ref.model.enable_gradient_checkpointing": name in RECOMPUTE,
        },
    )
    if name in REPLAY:
        from omegaconf import OmegaConf, open_dict

        with open_dict(config):
            OmegaConf.update(config, "actor_rollout_ref.actor.router_replay.mode", "R3", force_add=True)
    worker = ActorRolloutRefWorker(config, "actor", rank, world)
    worker.init_model()
    return worker


def replayed_routes(batch: Batch, layers: int = 2, experts: int = 8, top_k: int = 2) -> torch.Tensor:
    """Fixed routes ``[B, S, layers, top_k]`` for :data:`REPLAY` layouts: ``top_k`` distinct experts per token
    drawn with a fixed seed (not what the routers would choose)."""
    generator = torch.Generator().manual_seed(3)
    shape = (*batch["input_ids"].shape, layers, experts)
    return torch.rand(shape, generator=generator).argsort(-1)[..., :top_k]


def update_metrics(worker: Any, chunk: Batch) -> dict[str, float]:
    """One PPO update of ``worker`` on ``chunk`` (old log-probs recomputed); its metrics."""
    chunk["old_log_probs"] = worker.compute_log_prob(chunk)["old_log_probs"]
    return dict(worker.update_actor(chunk).meta["metrics"])


def update(worker: Any, chunk: Batch) -> float:
    """One PPO update of ``worker`` on ``chunk`` (old log-probs recomputed); the gradient norm."""
    return float(update_metrics(worker, chunk)["actor/grad_norm"])


def run_layout(name: str, model_dir: Path, rank: int, out_dir: Path | None = None) -> dict[str, Any]:
    """Build the actor for layout ``name`` as ``rank``; return its data-parallel chunk's log-probs before and
    after one update, the gradient norm, the gathered Hugging Face weights and its recomputation granularity.

    With virtual pipeline stages or context parallelism (:data:`RESUMED`) and an ``out_dir``, also: the Hugging Face export after the update
    (``out_dir/hf``), a checkpoint (``out_dir/ckpt``), the log-probs after a second update, and the same
    second update by a fresh worker resumed from the checkpoint (``resumed``).
    """
    worker = make_worker(name, model_dir, rank)
    try:
        layout = worker.parallel_layout()
        batch = global_batch(model_dir)
        advantages = torch.linspace(-1.0, 1.0, batch["responses"].numel()).view_as(batch["responses"])
        chunk = batch.chunk(layout.dp_size)[layout.dp_rank]
        chunk["advantages"] = advantages.chunk(layout.dp_size)[layout.dp_rank].clone()
        out: dict[str, Any] = {}
        if name in REPLAY:
            # the engine's own routing (the worker's R3 compute_log_prob asks for the routes)
            out["free"] = worker.actor.forward([chunk], temperature=1.0, with_entropy=False)[0].log_probs
            chunk[ROUTED_EXPERTS] = replayed_routes(chunk)
        out.update(dp_rank=layout.dp_rank, dp_size=layout.dp_size, output=layout.is_output_rank)
        out["recompute"] = worker.actor.chunks[0].config.recompute_granularity
        out["sequence_parallel"] = worker.actor.chunks[0].config.sequence_parallel
        out["before"] = worker.compute_log_prob(chunk)["old_log_probs"]
        out["metrics"] = update_metrics(worker, chunk)
        out["grad_norm"] = out["metrics"]["actor/grad_norm"]
        out["after"] = worker.compute_log_prob(chunk)["old_log_probs"]
        out["state"] = {key: t.clone() for key, t in worker.full_state_dict().items()}
        out["trainable"] = [key for key, p in worker.actor.module.named_parameters() if p.requires_grad]
        if name in RESUMED and out_dir is not None:
            out["chunk_layers"] = [list(layers) for layers in worker.actor.chunk_layers]
            worker.actor.save_hf(out_dir / "hf", with_weights=True)
            worker.save_checkpoint(out_dir / "ckpt")
            out["second_metrics"] = update_metrics(worker, chunk)
            out["second"] = worker.compute_log_prob(chunk)["old_log_probs"]
    finally:
        worker.shutdown()
    if name in RESUMED and out_dir is not None:
        resumed = make_worker(name, model_dir, rank)
        try:
            resumed.load_checkpoint(out_dir / "ckpt")
            update(resumed, chunk)
            out["resumed"] = resumed.compute_log_prob(chunk)["old_log_probs"]
        finally:
            resumed.shutdown()
    return out


def token_id_outputs(name: str, model_dir: Path, rank: int) -> dict[str, Any]:
    """Layout ``name``'s actor engine on the whole batch with random ``gather_ids`` ``[B, R, 5]``: the forward's
    log-probs at them and its top 3 (temperature 0.7), and the same log-probs out of ``forward_backward``
    (whether they carry gradients, and the gradient norm of their sum)."""
    from rlcore.api.training import GATHER_IDS

    worker = make_worker(name, model_dir, rank)
    try:
        batch = global_batch(model_dir)
        vocab = worker.actor.spec.vocab_size
        generator = torch.Generator().manual_seed(0)
        batch[GATHER_IDS] = torch.randint(0, vocab, (*batch["responses"].shape, 5), generator=generator)
        engine = worker.actor
        out: dict[str, Any] = {"ids": batch[GATHER_IDS]}
        with engine.resident():
            (forward,) = engine.forward([batch], temperature=0.7, with_entropy=False, top_k=3)
            trained: list[torch.Tensor] = []

            def loss_fn(_: int, micro: Batch, output: Any) -> torch.Tensor:
                trained.append(output.gathered_log_probs)
                return -(output.gathered_log_probs * micro["response_mask"][..., None]).sum()

            engine.forward_backward([batch], loss_fn, temperature=0.7, with_entropy=False)
            out["grad_norm"] = engine.optimizer_step(None)
        out.update(
            gathered=forward.gathered_log_probs.cpu(),
            top_k_ids=forward.top_k_ids.cpu(),
            top_k_log_probs=forward.top_k_log_probs.cpu(),
            trained=trained[0].detach().cpu() if trained else None,  # None: a stage without the loss
            requires_grad=bool(trained) and trained[0].requires_grad,
        )
        return out
    finally:
        worker.shutdown()


def run_critic(name: str, model_dir: Path, rank: int) -> dict[str, Any]:
    """A Megatron critic at layout ``name`` (``tp1`` or ``tp2sp``) as ``rank``: its values of the global batch
    after one update towards fixed returns, and the update's gradient norm."""
    from rlcore.workers.critic import CriticWorker

    world, tp, _ = LAYOUTS[name]
    config = Settings.make_config(
        model_dir,
        **{
            "critic.megatron.tensor_model_parallel_size": tp,
            "critic.megatron.sequence_parallel": name in SEQUENCE_PARALLEL,
            "critic.ppo_micro_batch_size_per_gpu": 2,
            "critic.optim.lr": 1e-2,
        },
    )
    worker = CriticWorker(config, "critic", rank, world)
    worker.init_model()
    try:
        batch = global_batch(model_dir)
        batch["values"] = worker.compute_values(batch)["values"]
        batch["returns"] = torch.linspace(-1.0, 1.0, batch["responses"].numel()).view_as(batch["responses"])
        metrics = dict(worker.update_critic(batch).meta["metrics"])
        return {"values": worker.compute_values(batch)["values"], "grad_norm": metrics["critic/grad_norm"]}
    finally:
        worker.shutdown()


#: what a scenario of :func:`run_world` runs, by kind: (layout name, model dir, rank, out dir) -> the rank's result
KINDS: dict[str, Callable[[str, Path, int, Path], dict[str, Any]]] = {
    "layout": run_layout,
    "token_ids": lambda name, model_dir, rank, _: token_id_outputs(name, model_dir, rank),
    "critic": lambda name, model_dir, rank, _: run_critic(name, model_dir, rank),
}


def run_world(rank: int, world: int, scenarios: dict[str, tuple[str, str, str]], store_file: str, out_dir: str) -> None:
    """A spawned rank of one gloo group of ``world`` processes that runs ``scenarios`` (``{tag: (kind of
    :data:`KINDS`, layout name, model dir)}``) in turn, each in its own folder ``out_dir/<tag>`` (its export and
    checkpoint), its result saved to ``out_dir/<tag>/rank<r>.pt``. Each scenario builds and shuts down its own
    workers, so megatron-core's model-parallel groups are built anew for each layout on the same process group."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_file, world), rank=rank, world_size=world)
    try:
        for tag, (kind, name, model_dir) in scenarios.items():
            assert LAYOUTS[name][0] == world, f"{tag}: layout {name} needs {LAYOUTS[name][0]} ranks, not {world}"
            folder = Path(out_dir) / tag
            folder.mkdir(exist_ok=True)
            try:
                result = KINDS[kind](name, Path(model_dir), rank, folder)
            except Exception as error:
                raise RuntimeError(f"scenario {tag!r} ({kind} at layout {name}) failed on rank {rank}") from error
            torch.save(result, folder / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def spawn_world(world: int, scenarios: dict[str, tuple[str, str, Path]], out_dir: Path) -> dict[str, list[Any]]:
    """Run ``scenarios`` (``{tag: (kind, layout name, model dir)}``, every layout of ``world`` ranks) in one
    spawned gloo group of ``world`` processes (:func:`run_world`): ``{tag: [rank 0's result, ...]}``."""
    named = {tag: (kind, name, str(model_dir)) for tag, (kind, name, model_dir) in scenarios.items()}
    spawn(run_world, args=(world, named, str(out_dir / "store"), str(out_dir)), nprocs=world, preload=PRELOAD)
    return {
        tag: [torch.load(out_dir / tag / f"rank{rank}.pt", weights_only=False) for rank in range(world)]
        for tag in scenarios
    }
