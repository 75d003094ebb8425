"""DeepSpeed ZeRO-1/2/3 against FSDP, and Ulysses SP=2 against SP=1: step time and memory on the small model.

``engines``: for each engine (``fsdp``, ``deepspeed`` at ZeRO stage 1, 2 and 3) two gloo ranks
(``torch.multiprocessing.spawn``) build the actor worker on the ``small`` model of ``bench/common.py``
(8 layers, hidden 512) and run ``--steps`` PPO updates on their half of a batch of 8 rows × (64 prompt + 128
response) tokens, micro-batches of 2. Reported per engine: the median ``update_actor`` time after the
first update, each rank's peak RSS and the bytes of parameters, gradients and optimizer state the rank
holds after an update (what ZeRO partitions).

``sequence``: one sequence of ``--tokens`` tokens (half prompt, half response) through one
``forward_backward`` of the FSDP actor with SP=1 (one process) and SP=2 (two processes, each holding half of
the sequence). Reported: the activation memory of one rank (bytes of the tensors autograd saves for the
backward pass, each storage once; weights left out, recognised by storage or by a parameter's shape, so a
``--tokens`` per rank equal to a weight dimension undercounts), its peak RSS and the step time.

    python bench/deepspeed_sp.py                      # both parts, 4 updates, 4096 tokens
    python bench/deepspeed_sp.py --part sequence --tokens 8192

Prints one JSON object on stdout; progress goes to stderr; bad input gives ``error: ...`` and exit status 2.
Needs ``pip install -e plugins/backend_deepspeed``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402

#: the engine settings compared: name -> config overrides of the actor
ENGINES: dict[str, dict[str, Any]] = {
    "fsdp": {"actor_rollout_ref.actor.strategy": "fsdp"},
    **{
        f"deepspeed_zero{stage}": {
            "actor_rollout_ref.actor.strategy": "deepspeed",
            "actor_rollout_ref.actor.deepspeed_config.zero_stage": stage,
        }
        for stage in (1, 2, 3)
    },
}
ROWS, PROMPT, RESPONSE = 8, 64, 128
log = common.make_log("deepspeed_sp")


def _config(model_dir: Path, overrides: dict[str, Any]) -> Any:
    """The contract's small config around ``model_dir`` with ``overrides``."""
    from rlcore_testkit.contracts.backend import TrainingBackendContract

    strategy = overrides.get("actor_rollout_ref.actor.strategy", "fsdp")
    settings = type("Settings", (TrainingBackendContract,), {"component_name": strategy})
    return settings.make_config(model_dir, **overrides)


def _batch(rows: int, prompt: int, response: int, vocab: int) -> Any:
    """Random tokens, every position attended."""
    import torch

    from rlcore.api.batch import Batch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, prompt + response), generator=generator)
    mask = torch.ones_like(ids)
    return Batch.from_dict(
        {
            "prompts": ids[:, :prompt],
            "responses": ids[:, prompt:],
            "response_mask": mask[:, prompt:],
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": torch.arange(prompt + response).expand(rows, -1).clone(),
        }
    )


def _local(tensor: Any) -> Any:
    """This rank's shard of a (possibly distributed) tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _held_bytes(engine: Any) -> int:
    """Bytes of this rank's parameters, gradients and optimizer state (local shards, each storage once)."""
    import torch

    seen: dict[int, int] = {}

    def add(tensor: Any) -> None:
        if isinstance(tensor, torch.Tensor):
            local = _local(tensor)
            seen[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()

    for param in engine.module.parameters():
        add(getattr(param, "ds_tensor", param))
        add(param.grad)
    if engine.optimizer is not None:
        for group in engine.optimizer.param_groups:
            for param in group["params"]:
                add(param)
        for state in engine.optimizer.state.values():
            for value in state.values():
                add(value)
    return sum(seen.values())


def engine_rank(rank: int, world: int, store: str, model_dir: str, name: str, steps: int, out: str) -> None:
    """One rank of the ``engines`` part; writes ``<out>/<name>_rank<r>.json``."""
    import json

    import torch
    import torch.distributed as dist

    from rlcore.workers.actor import ActorRolloutRefWorker

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    overrides = {
        **ENGINES[name],
        "data.train_batch_size": ROWS,
        "actor_rollout_ref.actor.ppo_mini_batch_size": ROWS,
        "actor_rollout_ref.actor.optim.lr": 1e-4,
    }
    worker = ActorRolloutRefWorker(_config(Path(model_dir), overrides), "actor", rank, world)
    try:
        worker.init_model()
        batch = _batch(ROWS, PROMPT, RESPONSE, worker.actor.module.config.vocab_size).chunk(world)[rank]
        times = []
        for _ in range(steps):
            batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            started = time.perf_counter()
            worker.update_actor(batch)
            times.append(time.perf_counter() - started)
        held = _held_bytes(worker.actor)
    finally:
        worker.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()
    result = {
        "update_s": times,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "held_mb": held / 2**20,
    }
    Path(out, f"{name}_rank{rank}.json").write_text(json.dumps(result))


def sequence_rank(rank: int, world: int, store: str, model_dir: str, tokens: int, out: str) -> None:
    """One rank of the ``sequence`` part (SP = ``world``); writes ``<out>/sp<world>_rank<r>.json``."""
    import json

    import torch
    import torch.distributed as dist

    from rlcore.algos.functional import masked_mean
    from rlcore.workers.actor import ActorRolloutRefWorker

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    overrides = {
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size": world,
        "data.max_prompt_length": tokens // 2,
        "data.max_response_length": tokens // 2,
        "data.train_batch_size": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 1,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
    }
    worker = ActorRolloutRefWorker(_config(Path(model_dir), overrides), "actor", rank, world)
    try:
        worker.init_model()
        engine = worker.actor
        batch = _batch(1, tokens // 2, tokens // 2, engine.module.config.vocab_size)
        params = {_local(p).untyped_storage().data_ptr() for p in engine.module.parameters()}
        shapes = {shape for p in engine.module.parameters() for shape in (tuple(p.shape), tuple(p.shape)[::-1])}
        saved: dict[int, int] = {}

        def pack(tensor: Any) -> Any:
            # weights are saved too (as views, or as FSDP's gathered copies): left out by storage and by shape
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in params and tuple(tensor.shape) not in shapes:
                saved[storage.data_ptr()] = storage.nbytes()
            return tensor

        def loss(_: int, micro: Any, output: Any) -> Any:
            return -masked_mean(output.log_probs, micro["response_mask"].float())

        started = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            engine.forward_backward([batch], loss, temperature=1.0, with_entropy=False)
        elapsed = time.perf_counter() - started
    finally:
        worker.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()
    result = {
        "activation_mb": sum(saved.values()) / 2**20,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "forward_backward_s": elapsed,
    }
    Path(out, f"sp{world}_rank{rank}.json").write_text(json.dumps(result))


def _spawn(target: Any, world: int, args: tuple[Any, ...], out: Path, tag: str) -> list[dict[str, Any]]:
    """Run ``target`` on ``world`` gloo ranks; their JSON results."""
    import json

    import torch.multiprocessing as mp

    store = out / f"{tag}.store"
    mp.spawn(target, args=(world, str(store), *args), nprocs=world, join=True)
    return [json.loads((out / f"{tag}_rank{rank}.json").read_text()) for rank in range(world)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both parts; the JSON result."""
    from rlcore_testkit.tiny import build_model, build_tokenizer

    with common.work_dir("rlcore-bench-ds-", args.keep, log) as work:
        tokenizer = build_tokenizer()
        spec = dict(common.SIZES["small"]["model"], max_position_embeddings=max(2048, args.tokens))
        model = build_model(tokenizer, **spec)
        model.save_pretrained(work / "model")
        tokenizer.save_pretrained(work / "model")
        result: dict[str, Any] = {"model": dict(spec, params=sum(p.numel() for p in model.parameters()))}
        if args.part in ("engines", "both"):
            engines = {}
            for name in ENGINES:
                log(f"{name}: 2 ranks, {args.steps} updates")
                ranks = _spawn(engine_rank, 2, (str(work / "model"), name, args.steps, str(work)), work, name)
                engines[name] = {
                    "median_update_s": round(statistics.median(t for r in ranks for t in r["update_s"][1:]), 4),
                    "peak_rss_mb_per_rank": [round(r["peak_rss_mb"], 1) for r in ranks],
                    "params_grads_optimizer_mb_per_rank": [round(r["held_mb"], 2) for r in ranks],
                }
            result["engines"] = {"ranks": 2, "rows": ROWS, "tokens_per_row": PROMPT + RESPONSE, **engines}
        if args.part in ("sequence", "both"):
            sequence = {"tokens": args.tokens}
            for world in (1, 2):
                log(f"SP={world}: one sequence of {args.tokens} tokens")
                ranks = _spawn(sequence_rank, world, (str(work / "model"), args.tokens, str(work)), work, f"sp{world}")
                sequence[f"sp{world}"] = {
                    "activation_mb_per_rank": [round(r["activation_mb"], 1) for r in ranks],
                    "peak_rss_mb_per_rank": [round(r["peak_rss_mb"], 1) for r in ranks],
                    "forward_backward_s": [round(r["forward_backward_s"], 3) for r in ranks],
                }
            result["sequence"] = sequence
        return result


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("engines", "sequence", "both"), default="both")
    parser.add_argument("--steps", type=int, default=4, help="updates per engine (the first is left out)")
    parser.add_argument("--tokens", type=int, default=4096, help="sequence length of the sequence part")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.tokens < 4 or args.tokens % 4:
        print("error: --steps must be at least 2 and --tokens a positive multiple of 4", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    if not torch.cuda.is_available():  # DeepSpeed otherwise prints its CPU fallback warning on stdout
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    return common.run_main("deepspeed_sp", 1, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
