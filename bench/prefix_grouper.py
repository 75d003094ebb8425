"""Time and peak memory of one actor forward + backward with and without ``actor.use_prefix_grouper``
(:mod:`rlcore.modelkit.prefix_grouper`): a long prompt shared by ``n`` responses.

The work: a randomly initialised Qwen2 model built from config (``--hidden``, ``--layers``; the tiny tokenizer's
vocabulary), ``--groups`` prompts of ``--prompt`` tokens (left-padded by a few tokens), each with ``--n``
right-padded responses of up to ``--response`` tokens; log-probs and entropies at temperature 0.7 through
:func:`rlcore.modelkit.hf_models.response_outputs` and a PPO-style loss, backward to every parameter. ``plain`` is
the padded forward of every row, ``grouped`` the shared-prompt forward. Each variant runs in a fresh child
process; peak memory is what the step adds on top of the model: the process's peak RSS on CPU,
``max_memory_allocated`` on CUDA. Prints one JSON object, with the largest difference of the log-probs and of
the gradients from the plain forward.

    python bench/prefix_grouper.py [--prompt 1024] [--response 128] [--n 8] [--groups 1] [--hidden 256]
                                   [--layers 4] [--device cpu|cuda] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from fused_kernels import measure_step

VARIANTS = ("plain", "grouped")
KEY = "actor_rollout_ref.actor.use_prefix_grouper"


def _batch(args: argparse.Namespace, vocab: int) -> Any:
    """The groups' rows: prompts padded left by 0–3 tokens, responses of 1/2 to all of ``--response`` tokens."""
    import torch

    from rlcore.api.batch import Batch

    gen = torch.Generator().manual_seed(0)
    rows = args.groups * args.n
    prompts = torch.randint(3, vocab, (args.groups, args.prompt), generator=gen)
    prompt_mask = torch.ones_like(prompts)
    for g in range(args.groups):
        prompt_mask[g, : g % 4] = 0
    responses = torch.randint(3, vocab, (rows, args.response), generator=gen)
    lengths = torch.randint(args.response // 2, args.response + 1, (rows,), generator=gen)
    response_mask = (torch.arange(args.response)[None, :] < lengths[:, None]).long()
    mask = torch.cat([prompt_mask.repeat_interleave(args.n, 0), response_mask], 1)
    input_ids = torch.cat([prompts.repeat_interleave(args.n, 0), responses], 1) * mask
    return Batch.from_dict(
        {
            "input_ids": input_ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp_min(0),
            "responses": responses * response_mask,
            "response_mask": response_mask,
        }
    )


def _child(args: argparse.Namespace) -> dict[str, Any]:
    """One variant in this process: median time of ``--repeats`` forward+backward passes and peak memory."""
    import torch
    from rlcore_testkit.tiny import build_model, build_tokenizer

    from rlcore.api.batch import Batch
    from rlcore.modelkit.hf_models import response_outputs

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = build_model(
        build_tokenizer(),
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3,
        num_layers=args.layers,
        num_heads=max(1, args.hidden // 64),
        num_kv_heads=1,
        max_position_embeddings=args.prompt + args.response + 8,
    ).to(device)
    model.config._attn_implementation = "sdpa"
    model.train()
    batch = Batch.from_dict(
        {key: value.to(device) for key, value in _batch(args, model.config.vocab_size).tensors.items()}
    )
    mask = batch["response_mask"].float()
    adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)).to(device)
    grouper = KEY if args.variant == "grouped" else None

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        out = response_outputs(model, batch, 0.7, with_entropy=True, prefix_grouper=grouper)
        loss = -(adv * out.log_probs * mask).sum() / mask.sum() - 0.01 * (out.entropy * mask).sum() / mask.sum()
        loss.backward()
        return (out.log_probs.detach() * mask), [p.grad.detach().clone() for p in model.parameters()]

    results, times, peak = measure_step(step, device, args.repeats)
    if args.save:
        torch.save([results[0].cpu(), [g.cpu() for g in results[1]]], args.save)
    tokens = int(batch["attention_mask"].sum())
    return {
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "peak_extra_mib": round(peak / 2**20, 1),
        "attended_tokens_plain_layout": tokens,
    }


def _run_variant(args: argparse.Namespace, variant: str, save: str) -> dict[str, Any]:
    """Run one variant in a fresh interpreter (so the RSS peak is its own)."""
    command = [sys.executable, __file__, "--child", variant, "--save", save]
    for name in ("prompt", "response", "n", "groups", "hidden", "layers", "device", "repeats", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout)


def main() -> int:
    """Parse the options, run both variants in child processes and print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("prompt", 1024), ("response", 128), ("n", 8), ("groups", 1), ("hidden", 256)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--save", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = (args.prompt, args.response, args.n, args.groups, args.hidden, args.layers, args.repeats, args.threads)
    if min(sizes) < 1 or args.prompt < 4 or args.response < 2:
        print("error: every size must be positive (--prompt at least 4, --response at least 2)", file=sys.stderr)
        return 2
    if args.child:
        args.variant = args.child
        print(json.dumps(_child(args)))
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device here", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        paths = {variant: os.path.join(folder, f"{variant}.pt") for variant in VARIANTS}
        results = {variant: _run_variant(args, variant, paths[variant]) for variant in VARIANTS}
        if all("error" not in result for result in results.values()):
            plain_lp, plain_grads = torch.load(paths["plain"])
            grouped_lp, grouped_grads = torch.load(paths["grouped"])
            results["grouped"]["max_abs_diff_log_probs"] = float((grouped_lp - plain_lp).abs().max())
            results["grouped"]["max_abs_diff_grads"] = max(
                float((g - p).abs().max()) for g, p in zip(grouped_grads, plain_grads, strict=True)
            )
            results["grouped"]["time_ratio"] = round(results["grouped"]["median_s"] / results["plain"]["median_s"], 3)
    settings = {name: getattr(args, name) for name in ("prompt", "response", "n", "groups", "hidden", "layers")}
    print(
        json.dumps({"bench": "prefix_grouper", **settings, "device": args.device, "threads": args.threads, **results})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
