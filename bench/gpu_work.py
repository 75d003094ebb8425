"""The child-process side of ``bench/gpu.py``: build the work, and measure generation.

Not a benchmark of its own: ``bench/gpu.py`` runs ``python bench/gpu_work.py build|gen --work DIR ...`` in a
fresh process per part, so that a part's time limit can stop it and its device memory is released when it
ends. Each command writes its result to ``DIR/<part>.json`` (``gen`` after every measured call, so that a
part stopped at its limit still leaves what it measured).

- ``build``: a byte-level BPE tokenizer trained on the GSM8K questions and answers under
  ``bench/data/gsm8k`` (no hub), and a random-init model: ``--size 1.7b`` is Qwen3-1.7B's exact shape
  (:data:`QWEN3_1_7B`, bfloat16, built on the benchmark's device), ``--size tiny`` the tiny Qwen2 model of
  ``rlcore_testkit.tiny``; both saved to ``DIR/model``. It also records the software and the device.
- ``gen``: rlcore's HF rollout engine against plain ``transformers`` ``model.generate`` on the same
  chat-templated GSM8K prompts, lengths and sampling: ``bench/rollout.py``'s :func:`~rollout.compare_generate`
  (two timed calls per side, time allowing), in this one process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
GSM8K_DIR = BENCH_DIR / "data" / "gsm8k"

#: Qwen3-1.7B's shape (its config.json), built here with random weights
QWEN3_1_7B: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
#: per size: the tokenizer's vocabulary (the model's embedding keeps its own, larger, padded vocabulary)
TOKENIZER_VOCAB = {"1.7b": 16384, "tiny": 1024}


def log(message: str) -> None:
    """Progress on stderr."""
    print(f"[gpu_work] {message}", file=sys.stderr, flush=True)


def write_result(work: Path, part: str, result: dict[str, Any]) -> None:
    """Write ``result`` to ``work/<part>.json`` atomically (the parent may read it at any time)."""
    tmp = work / f".{part}.json.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, work / f"{part}.json")


def gsm8k_texts() -> list[str]:
    """The questions and answers of the bundled GSM8K training rows, the tokenizer's corpus."""
    rows = [json.loads(line) for line in (GSM8K_DIR / "train.jsonl").read_text().splitlines() if line.strip()]
    return [f"{row['question']}\n{row['answer']}" for row in rows]


def environment(device: str) -> dict[str, Any]:
    """Python, torch, CUDA, transformers and rlcore versions, and the device's name, count and memory."""
    import importlib.metadata

    import torch
    import transformers

    import rlcore

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "rlcore": importlib.metadata.version("rlcore") if _has_dist("rlcore") else "source tree",
        "rlcore_path": str(Path(rlcore.__file__).parent),
        "cuda_available": torch.cuda.is_available(),
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            device_name=props.name,
            device_count=torch.cuda.device_count(),
            device_memory_gb=round(props.total_memory / 2**30, 1),
        )
    else:
        from rlcore.tracking.device_peak import device_name

        info["device_name"] = device_name(torch.device("cpu"))
    return info


def _has_dist(name: str) -> bool:
    """Whether distribution ``name`` is installed (not just importable from a source tree)."""
    import importlib.metadata

    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def build(work: Path, size: str, device: str) -> None:
    """Train the tokenizer, build and save the model to ``work/model``; write ``work/build.json``."""
    import torch
    from rlcore_testkit.tiny import build_model, build_tokenizer

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is false on this machine")
    start = time.perf_counter()
    tokenizer = build_tokenizer(gsm8k_texts(), vocab_size=TOKENIZER_VOCAB[size])
    tokenizer_s = time.perf_counter() - start
    if size == "tiny":
        model = build_model(tokenizer)
        dtype = torch.float32
    else:
        from transformers import Qwen3Config, Qwen3ForCausalLM

        dtype = torch.bfloat16
        config = Qwen3Config(
            **QWEN3_1_7B,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=None,
            dtype="bfloat16",
        )
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen3ForCausalLM(config).to(dtype)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    config = model.config
    write_result(
        work,
        "build",
        {
            "environment": environment(device),
            "tokenizer_s": round(tokenizer_s, 2),
            "model_s": round(time.perf_counter() - start - tokenizer_s, 2),
            "tokenizer_vocab": len(tokenizer),
            "model": {
                "model_type": config.model_type,
                "params": sum(p.numel() for p in model.parameters()),
                "dtype": str(dtype).removeprefix("torch."),
                "hidden_size": config.hidden_size,
                "num_hidden_layers": config.num_hidden_layers,
                "num_attention_heads": config.num_attention_heads,
                "num_key_value_heads": config.num_key_value_heads,
                "head_dim": config.head_dim,
                "intermediate_size": config.intermediate_size,
                "vocab_size": config.vocab_size,
                "tie_word_embeddings": config.tie_word_embeddings,
            },
        },
    )


# ------------------------------------------------------------------------------------------------ generation
def prompt_texts(tokenizer: Any, parquet: Path, rows: int) -> list[str]:
    """The chat-templated prompts of the first ``rows`` rows of a verl-schema parquet file."""
    import pyarrow.parquet as pq

    records = pq.read_table(parquet, columns=["prompt"]).to_pylist()[:rows]
    return [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in records]


def generate(work: Path, device: str, rows: int, response_length: int, deadline: float) -> None:
    """:func:`rollout.compare_generate` on the first ``rows`` GSM8K test prompts, chat-templated; writes
    ``work/gen.json`` after every timed call."""
    from rollout import compare_generate
    from transformers import AutoTokenizer

    model_dir = work / "model"
    prompts = prompt_texts(AutoTokenizer.from_pretrained(model_dir), work / "home/data/gsm8k/test.parquet", rows)
    log(f"HF engine, then model.generate: {len(prompts)} rows x {response_length} tokens")
    compare_generate(
        model_dir,
        prompts,
        response_length,
        device,
        "bfloat16" if device == "cuda" else "float32",
        repeats=2,
        gpu_memory_utilization=0.6,
        deadline=deadline,
        on_result=lambda result: write_result(work, "gen", result),
    )


def main(argv: list[str] | None = None) -> None:
    """``build`` or ``gen`` (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("build", "gen"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--size", choices=tuple(TOKENIZER_VOCAB), required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--rows", type=int, default=8, help="gen: prompts per call")
    parser.add_argument("--response-length", type=int, default=32, help="gen: new tokens per prompt")
    parser.add_argument("--deadline", type=float, default=0.0, help="gen: time.time() after which no call starts")
    args = parser.parse_args(argv)
    if args.part == "build":
        build(args.work, args.size, args.device)
    else:
        deadline = time.perf_counter() + max(args.deadline - time.time(), 0.0)
        generate(args.work, args.device, args.rows, args.response_length, deadline)


if __name__ == "__main__":
    main()
