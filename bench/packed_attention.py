"""Time and peak memory of one packed forward + backward (``model.use_remove_padding``) against the number of
packed sequences, before and after :mod:`rlcore.modelkit.packed_attention`, and packed against padded at the
seed command's shape.

Variants, each in a fresh child process (so that its RSS peak is its own):

- ``mask`` (before): the packed row through transformers' ``sdpa`` with its dense block-diagonal causal mask
  ``[1, 1, T, T]``, derived from the restarting position ids. The model attends with ``sdpa`` registered under
  another name (:data:`DENSE`), which rlcore leaves alone, so this is exactly what packed rows got before.
- ``packed`` (after): the same row through rlcore's packed attention (causal SDPA per bucket of sequences of
  similar length on the CPU, no mask).
- ``padded``: the rows padded, as with ``use_remove_padding=false`` (seed shape only).

The step is :func:`rlcore.modelkit.hf_models.response_outputs` (log-probs and entropies at temperature 0.7)
with a PPO-style loss, backward to every parameter, of a float32 Qwen2 model built from config with the tiny
tokenizer's vocabulary.

- The curve: ``--counts`` sequences of ``--length`` tokens each (a prompt and a 16-token response), model
  ``--hidden``/``--layers`` (4 query heads, 2 key/value heads). Linear cost means time and memory double when
  the sequences do; the JSON gives each variant's growth exponent (the slope of log time and of log memory
  against log sequences, from 4 sequences on: 1 linear, 2 quadratic).
- The seed shape: one micro-batch of the seed command as ``tests/test_seed_command.py`` runs it on the CPU:
  20 rows (``ppo_micro_batch_size_per_gpu``), prompts left-padded to 512 columns (``data.max_prompt_length``),
  of 94–270 tokens (median 182, as the tiny tokenizer's GSM8K prompts), responses of 1–16 tokens in 16
  columns, the tiny model (``bench/common.py``'s ``tiny``: hidden 64, 2 layers).

Peak memory is what the step adds on top of the model: the peak RSS over the one before the first step. The
largest difference of each variant's log-probs from the ``mask`` variant's is reported too (the padded one at
the seed shape compares with the packed one the same way).

    python bench/packed_attention.py [--length 128] [--counts 1,2,4,8,16,32] [--hidden 256] [--layers 2]
                                     [--repeats 3] [--threads 1] [--skip-seed]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from fused_kernels import measure_step  # noqa: E402

#: the name transformers' plain ``sdpa`` (function and mask) is registered under for the ``mask`` variant
DENSE = "sdpa_dense_mask"
VARIANTS = ("mask", "packed", "padded")
RESPONSE = 16
LOG = common.make_log("packed_attention")
SEED_ROWS, SEED_PROMPT, SEED_PROMPT_TOKENS = 20, 512, (94, 270)


def _batch(prompts: list[int], responses: list[int], prompt_width: int, vocab: int, seed: int) -> Any:
    """Rows with ``prompts[i]`` prompt tokens left-padded to ``prompt_width`` and ``responses[i]`` response
    tokens right-padded to :data:`RESPONSE`, random token ids."""
    import torch

    from rlcore.api.batch import Batch

    gen = torch.Generator().manual_seed(seed)
    rows = len(prompts)
    columns = torch.arange(prompt_width)
    prompt_mask = (columns[None, :] >= prompt_width - torch.tensor(prompts)[:, None]).long()
    response_mask = (torch.arange(RESPONSE)[None, :] < torch.tensor(responses)[:, None]).long()
    mask = torch.cat([prompt_mask, response_mask], 1)
    input_ids = torch.randint(3, vocab, (rows, prompt_width + RESPONSE), generator=gen) * mask
    return Batch.from_dict(
        {
            "input_ids": input_ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp_min(0),
            "responses": input_ids[:, prompt_width:],
            "response_mask": response_mask,
        }
    )


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """One variant of one shape in this process: median time of the step and its peak memory."""
    import torch
    from rlcore_testkit.tiny import build_model, build_tokenizer
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    from rlcore.modelkit.hf_models import response_outputs
    from rlcore.modelkit.packed_attention import kernel

    torch.set_num_threads(spec["threads"])
    model = build_model(build_tokenizer(), **spec["model"], max_position_embeddings=4096).train()
    if spec["variant"] == "mask":
        AttentionInterface.register(DENSE, sdpa_attention_forward)
        AttentionMaskInterface.register(DENSE, sdpa_mask)
        model.set_attn_implementation(DENSE)
    else:
        model.set_attn_implementation("sdpa")
    batch = _batch(spec["prompts"], spec["responses"], spec["prompt_width"], model.config.vocab_size, seed=0)
    mask = batch["response_mask"].float()
    advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        out = response_outputs(model, batch, 0.7, with_entropy=True, remove_padding=spec["variant"] != "padded")
        assert out.entropy is not None
        loss = -(advantages * out.log_probs * mask).sum() / mask.sum() - 0.01 * (out.entropy * mask).sum() / mask.sum()
        loss.backward()
        return out.log_probs.detach() * mask

    log_probs, times, peak = measure_step(step, torch.device("cpu"), spec["repeats"])
    torch.save(log_probs, spec["save"])
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    return {
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "peak_extra_mib": round(peak / 2**20, 1),
        "attention": str(model.config._attn_implementation),
        "kernel": kernel(torch.zeros(1, 1, 1, head_dim)) if spec["variant"] == "packed" else None,
    }


def _run(spec: dict[str, Any], folder: str, threads: int) -> dict[str, Any]:
    """:func:`_child` of ``spec`` in a fresh interpreter, its log-probs saved under ``folder``."""
    save = os.path.join(folder, f"{spec['name']}-{spec['variant']}.pt")
    spec = {**spec, "save": save, "threads": threads}
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        env=common.bench_env(threads),
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        raise common.BenchError(f"{spec['name']} ({spec['variant']}) failed: {tail}")
    LOG(f"{spec['name']} {spec['variant']}: {done.stdout.strip()}")
    return {**json.loads(done.stdout), "save": save}


def _diff(runs: dict[str, dict[str, Any]], variant: str, reference: str) -> None:
    """Add ``variant``'s largest log-prob difference from ``reference``'s to its figures."""
    import torch

    difference = torch.load(runs[variant]["save"]) - torch.load(runs[reference]["save"])
    runs[variant]["max_abs_diff_log_probs"] = float(difference.abs().max())


def _figures(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs' figures without the paths of their saved log-probs."""
    return {variant: {k: v for k, v in run.items() if k != "save"} for variant, run in runs.items()}


def _exponent(points: list[tuple[int, float]]) -> float | None:
    """The least-squares slope of log y against log x over ``points`` (x ≥ 4), or None with fewer than 2."""
    pairs = [(math.log(x), math.log(y)) for x, y in points if x >= 4 and y > 0]
    if len(pairs) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in pairs)
    mean_y = statistics.fmean(y for _, y in pairs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in pairs) / sum((x - mean_x) ** 2 for x, _ in pairs)
    return round(slope, 2)


def _curve(args: argparse.Namespace, folder: str) -> dict[str, Any]:
    """Both variants at every count of ``--length``-token sequences, and each variant's growth exponents."""
    model = {"hidden_size": args.hidden, "intermediate_size": 3 * args.hidden, "num_layers": args.layers}
    model |= {"num_heads": 4, "num_kv_heads": 2}
    points = []
    for count in args.counts:
        shape = {"prompts": [args.length - RESPONSE] * count, "responses": [RESPONSE] * count}
        spec = {"name": f"curve{count}", "model": model, "prompt_width": args.length - RESPONSE, **shape}
        spec["repeats"] = args.repeats
        runs = {variant: _run({**spec, "variant": variant}, folder, args.threads) for variant in ("mask", "packed")}
        _diff(runs, "packed", "mask")
        runs = _figures(runs)
        point = {"sequences": count, "tokens": count * args.length, **runs}
        point["time_ratio_mask_over_packed"] = round(runs["mask"]["median_s"] / runs["packed"]["median_s"], 2)
        points.append(point)
    exponents = {
        variant: {
            "time": _exponent([(p["sequences"], p[variant]["median_s"]) for p in points]),
            "memory": _exponent([(p["sequences"], p[variant]["peak_extra_mib"]) for p in points]),
        }
        for variant in ("mask", "packed")
    }
    return {"length": args.length, "model": model, "points": points, "growth_exponents": exponents}


def _seed_shape(args: argparse.Namespace, folder: str) -> dict[str, Any]:
    """All three variants on one seed-shaped micro-batch."""
    import random

    rng = random.Random(0)
    low, high = SEED_PROMPT_TOKENS
    spec = {
        "name": "seed",
        "model": common.SIZES["tiny"]["model"],
        "prompt_width": SEED_PROMPT,
        "prompts": [rng.randint(low, high) for _ in range(SEED_ROWS)],
        "responses": [rng.randint(1, RESPONSE) for _ in range(SEED_ROWS)],
        "repeats": args.repeats,
    }
    runs = {variant: _run({**spec, "variant": variant}, folder, args.threads) for variant in VARIANTS}
    _diff(runs, "padded", "packed")
    _diff(runs, "packed", "mask")
    runs = _figures(runs)
    return {
        "rows": SEED_ROWS,
        "prompt_columns": SEED_PROMPT,
        "response_columns": RESPONSE,
        "attended_tokens": sum(spec["prompts"]) + sum(spec["responses"]),
        **runs,
        "time_ratio_packed_over_padded": round(runs["packed"]["median_s"] / runs["padded"]["median_s"], 2),
        "time_ratio_mask_over_padded": round(runs["mask"]["median_s"] / runs["padded"]["median_s"], 2),
    }


def _counts(text: str) -> list[int]:
    """``--counts``: comma-separated positive integers."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise common.BenchError(f"--counts must be comma-separated positive integers, got {text!r}")
    return counts


def main() -> int:
    """Parse the options, run every variant in child processes and print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=128, help="tokens per packed sequence on the curve")
    parser.add_argument("--counts", default="1,2,4,8,16,32", help="packed sequences per point of the curve")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-seed", action="store_true", help="leave out the seed-shape comparison")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0

    def body() -> dict[str, Any]:
        args.counts = _counts(args.counts)
        if args.length <= RESPONSE or min(args.hidden, args.layers, args.repeats, args.threads) < 1:
            raise common.BenchError(f"--length must exceed {RESPONSE}; --hidden, --layers, --repeats, --threads >= 1")
        if args.hidden % 8:
            raise common.BenchError("--hidden must be a multiple of 8 (4 heads of a head size divisible by 2)")
        with tempfile.TemporaryDirectory() as folder:
            result: dict[str, Any] = {"threads": args.threads, "repeats": args.repeats, "curve": _curve(args, folder)}
            if not args.skip_seed:
                result["seed_shape"] = _seed_shape(args, folder)
        return result

    return common.run_main("packed_attention", args.threads, body)


if __name__ == "__main__":
    sys.exit(main())
