"""Kernels and bytes moved per decoding step of the HF engine's static decoder, counted on CPU with the profiler.

Prints one JSON object: for one decoding step at Qwen3-1.7B's shape (hidden 2048, 16 heads / 8 KV heads,
head_dim 128, intermediate 6144, vocabulary 151936; ``--layers`` layers built, the per-layer figures
scaled to 28 layers) the profiler's leaf operator calls (``aten::`` events with no ``aten::`` child,
views left out: each is one kernel launch on a GPU) and the bytes they move (every tensor operand read
once and the largest written once: an estimate from the recorded shapes), with the step attending the
whole cache and attending its read-length bucket, with the mean key/value bytes per step over a
generation; then the sampler alone at that vocabulary: the torch sampler (``sample_next_tokens`` with the
rows' counter-based Gumbel noise: CPU, and CUDA without triton) and the one-kernel sampler that CUDA with
triton runs (``fused_cuda``: its torch-side ops counted, its kernel counted from its operands). Run it on
two checkouts for before/after.

    python bench/decode_kernels.py [--layers 2] [--rows 8] [--prompt 512] [--response 512] [--threads 2]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

import torch

QWEN3_1_7B = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "num_hidden_layers": 28,
}
#: operators that only make views or metadata (no kernel, no traffic)
VIEWS = {
    "aten::view",
    "aten::reshape",
    "aten::as_strided",
    "aten::slice",
    "aten::select",
    "aten::expand",
    "aten::transpose",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::t",
    "aten::permute",
    "aten::alias",
    "aten::detach",
    "aten::_unsafe_view",
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::resize_",
    "aten::lift_fresh",
    "aten::split",
    "aten::chunk",
    "aten::narrow",
    "aten::view_as",
    "aten::_reshape_alias",
    "aten::expand_as",
    "aten::contiguous",
    "aten::result_type",
    "aten::unbind",
    "aten::scalar_tensor",
}
ITEMSIZE = {
    "float": 4,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "double": 8,
    "long int": 8,
    "int": 4,
    "bool": 1,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
}


def count(run: Callable[[], Any]) -> dict[str, Any]:
    """Leaf operator calls of one ``run()`` and the bytes they move (estimated from operand shapes)."""
    run()  # warm-up: lazy initialisation is not a step's cost
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    kernels, moved, by_name = 0, 0, {}
    for event in prof.events():
        if not event.name.startswith("aten::") or event.name in VIEWS:
            continue
        if any(child.name.startswith("aten::") and child.name not in VIEWS for child in event.cpu_children):
            continue  # not a leaf: its children that compute are counted
        sizes = [
            int(torch.Size(shape).numel()) * ITEMSIZE.get(dtype, 0)
            for shape, dtype in zip(event.input_shapes, event.input_dtypes)
            if isinstance(shape, list) and shape
        ]
        kernels += 1
        moved += sum(sizes) + max(sizes, default=0)
        by_name[event.name] = by_name.get(event.name, 0) + 1
    top = dict(sorted(by_name.items(), key=lambda item: -item[1])[:12])
    return {"kernels": kernels, "bytes": moved, "top_ops": top}


def step_counts(
    model: Any, args: argparse.Namespace, cache_len: int, reads: dict[str, int | None]
) -> dict[str, dict[str, Any]]:
    """:func:`count` of one static-shape decoding step (the CUDA-graph path, run eagerly) of ``model`` at
    mid-generation, for each named read length (None: the whole cache, the only choice before buckets)."""
    from rlcore_plugin_hf.decode_state import DecodeState
    from rlcore_plugin_hf.static_decoder import StaticDecoder

    from rlcore.rollout.sampling import SamplingParams

    decoder = StaticDecoder(model)
    decoder.load_weights()
    decoder.reserve(args.rows, cache_len)
    state = DecodeState(
        args.rows,
        args.response,
        QWEN3_1_7B["vocab_size"],
        SamplingParams(temperature=1.0),
        cache_len=cache_len,
        eos_ids=torch.tensor([0]),
        stop_on_eos=False,
        with_logprobs=True,
        graphed=True,
        device=torch.device("cpu"),
    )
    state.start(
        list(range(args.rows)),
        torch.ones(args.rows, args.prompt, dtype=torch.long),
        torch.full((args.rows,), args.prompt),
    )

    def run(read: int | None) -> None:
        state.slot.fill_(args.prompt + args.response // 2 - 1)
        state.step.fill_(args.response // 2)
        if read is None:
            state.decode_with(decoder)
        else:
            state.decode_with(decoder, read)

    return {name: {"read": read or cache_len, **count(lambda read=read: run(read))} for name, read in reads.items()}


def decode_step(args: argparse.Namespace) -> dict[str, Any]:
    """One decoding step at mid-generation, attending the whole cache and its read-length bucket: counted
    on ``args.layers`` layers and on one, and scaled to 28 layers (``fixed + 28 · per_layer``); and the
    mean key/value bytes a step reads over a generation at 28 layers."""
    from rlcore_plugin_hf.chunking import aligned_length
    from rlcore_plugin_hf.decode_state import DecodeState
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cache_len = aligned_length(args.prompt + args.response)
    filled = args.prompt + args.response // 2
    reads: dict[str, int | None] = {"whole_cache": None}
    result: dict[str, Any] = {"cache_len": cache_len, "filled": filled}
    if "read" in inspect.signature(DecodeState.decode_with).parameters:  # a checkout with read buckets
        from rlcore_plugin_hf.chunking import read_length

        reads["read_bucket"] = read_length(filled, cache_len)
    counts = {}
    for layers in (args.layers, 1):
        torch.manual_seed(0)
        config = Qwen3Config(**{**QWEN3_1_7B, "num_hidden_layers": layers}, tie_word_embeddings=True)
        counts[layers] = step_counts(Qwen3ForCausalLM(config).to(torch.bfloat16).eval(), args, cache_len, reads)
    full = QWEN3_1_7B["num_hidden_layers"]
    for name in reads:
        many, one = counts[args.layers][name], counts[1][name]
        per_layer = {key: (many[key] - one[key]) / (args.layers - 1) for key in ("kernels", "bytes")}
        result[name] = {
            "read": many["read"],
            f"at_{args.layers}_layers": many,
            "per_layer": per_layer,
            "at_28_layers": {key: round(one[key] + per_layer[key] * (full - 1)) for key in ("kernels", "bytes")},
        }
    if "read_bucket" in reads:
        from rlcore_plugin_hf.chunking import read_length

        kv_per_position = 2 * full * args.rows * QWEN3_1_7B["num_key_value_heads"] * QWEN3_1_7B["head_dim"] * 2
        fills = [args.prompt + taken for taken in range(1, args.response)]
        result["kv_bytes_per_step_mean_at_28_layers"] = {
            "whole_cache": kv_per_position * cache_len,
            "read_bucket": round(kv_per_position * sum(read_length(f, cache_len) for f in fills) / len(fills)),
            "filled_exactly": round(kv_per_position * sum(fills) / len(fills)),
        }
    return result


def sampler(rows: int) -> dict[str, Any]:
    """The sampler alone at the 1.7B vocabulary, per step, for the engine's sampling settings."""
    from rlcore_plugin_hf.row_noise import RowNoise
    from rlcore_plugin_hf.sampler import sample_next_tokens

    from rlcore.rollout.sampling import SamplingParams

    vocab = QWEN3_1_7B["vocab_size"]
    logits = torch.randn(rows, vocab, dtype=torch.bfloat16)
    noise = RowNoise(rows, vocab, 16, torch.device("cpu"))
    noise.seed(list(range(rows)))
    step = torch.zeros(1, dtype=torch.long)
    settings = {
        "t1_logprobs": SamplingParams(temperature=1.0),
        "t0.7_topk50_logprobs": SamplingParams(temperature=0.7, top_k=50),
        "t1_topp0.9_logprobs": SamplingParams(temperature=1.0, top_p=0.9),
        "greedy_logprobs": SamplingParams(temperature=0.0),
    }
    out: dict[str, Any] = {}
    for name, params in settings.items():

        def run(params: Any = params) -> None:
            gumbel = None if params.greedy else noise.gumbel(step)
            sample_next_tokens(logits, params, None, with_logprobs=True, gumbel=gumbel)

        figures = count(run)
        figures["bytes_per_vocab_entry_per_row"] = round(figures["bytes"] / (rows * vocab), 1)
        out[name] = figures
    fused = fused_figures(logits, settings, noise)
    if fused:
        out["fused_cuda"] = fused
    return out


def fused_figures(logits: torch.Tensor, settings: dict[str, Any], noise: Any) -> dict[str, Any]:
    """The one-kernel sampler that CUDA with triton runs: its torch-side ops (``prepare``: top-k's
    selection, top-p's mask) counted with the profiler, plus its one kernel, whose bytes are its operands
    (the logits read once, the vocabulary codes, the keys, thresholds or mask, the two outputs)."""
    try:
        from rlcore_plugin_hf.sampling_kernel import prepare
    except ImportError:  # no triton, or a checkout without the kernel
        return {}
    rows, vocab = logits.shape
    out: dict[str, Any] = {}
    for name, params in settings.items():
        figures = count(lambda params=params: prepare(logits, params))
        source, _scale, kth, drop = prepare(logits, params)
        operands = [source, noise.codes, noise.keys[:, 0], kth, drop]
        kernel_bytes = sum(t.numel() * t.element_size() for t in operands if t is not None) + rows * 12
        figures["kernels"] += 1
        figures["bytes"] += kernel_bytes
        figures["bytes_per_vocab_entry_per_row"] = round(figures["bytes"] / (rows * vocab), 1)
        out[name] = figures
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, measure, print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2, help="layers built (≥ 2; figures scaled to 28)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--response", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parts", default="step,sampler", help="comma-separated: step, sampler")
    args = parser.parse_args(argv)
    if args.layers < 2 or min(args.rows, args.prompt, args.response) < 1:
        print("error: --layers must be at least 2 and --rows/--prompt/--response positive", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    parts = set(args.parts.split(","))
    report: dict[str, Any] = {
        "shape": "Qwen3-1.7B (bfloat16), counted on CPU with torch.profiler",
        "layers_built": args.layers,
        "rows": args.rows,
        "note": "kernels: leaf aten ops (no views); bytes: operands read + largest written, from shapes",
    }
    with torch.no_grad():
        if "step" in parts:
            report["decode_step"] = decode_step(args)
        if "sampler" in parts:
            report["sampler"] = sampler(args.rows)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
