"""The child-process side of ``bench/gpu.py``: build the work, and measure generation.

Not a benchmark of its own: ``bench/gpu.py`` runs ``python bench/gpu_work.py build|gen --work DIR ...`` in a
fresh process per part, so that a part's time limit can stop it and its device memory is released when it
ends. Each command writes its result to ``DIR/<part>.json`` (``gen`` after every measured call, so that a
part stopped at its limit still leaves what it measured).

- ``build``: a byte-level BPE tokenizer trained on the GSM8K questions and answers under
  ``bench/data/gsm8k`` (no hub), and a random-init model: ``--size 1.7b`` is Qwen3-1.7B's exact shape
  (:data:`QWEN3_1_7B`, bfloat16, built on the benchmark's device), ``--size tiny`` the tiny Qwen2 model of
  ``rlcore.testing.tiny``; both saved to ``DIR/model``. It also records the software and the device.
- ``gen``: rlcore's HF rollout engine (its public ``generate``) against plain ``transformers``
  ``model.generate`` on the same left-padded GSM8K prompts, the same number of new tokens (EOS ignored:
  ``rollout.ignore_eos`` for the engine, ``min_new_tokens`` for ``generate``) and the same sampling
  (temperature 1, no top-k, no top-p), in this one process, one after the other.
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

    from rlcore.testing.tiny import build_model, build_tokenizer

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


def timed_calls(call: Any, deadline: float, max_calls: int, on_call: Any) -> None:
    """Run ``call()`` (which returns its generated token count) up to ``max_calls`` times; a further call is
    made only when one more of the last call's length still ends before ``deadline``. ``on_call(seconds,
    tokens)`` records each."""
    for _ in range(max_calls):
        start = time.perf_counter()
        tokens = call()
        seconds = time.perf_counter() - start
        on_call(seconds, tokens)
        if time.perf_counter() + 1.2 * seconds > deadline:
            return


class GenerationRecord:
    """The ``gen`` part's result, written to ``work/gen.json`` after every measured call."""

    def __init__(self, work: Path, device: str, result: dict[str, Any]) -> None:
        """Start from ``result`` (the batch's description)."""
        self.work = work
        self.cuda = device == "cuda"
        self.result = result

    def sync(self) -> None:
        """Wait for queued GPU work."""
        import torch

        if self.cuda:
            torch.cuda.synchronize()

    def reset_peak(self) -> None:
        """Start a side's peak-memory measurement afresh (CUDA)."""
        import torch

        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def recorder(self, side: str) -> Any:
        """``on_call(seconds, tokens)`` adding one call of ``side`` (``generate`` or ``engine``): its calls, the
        best tokens/s (the warm call when there were two) and the peak memory so far."""
        import torch

        calls: list[dict[str, float]] = []

        def on_call(seconds: float, tokens: int) -> None:
            """Add one call and write the result so far."""
            calls.append({"seconds": round(seconds, 3), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)})
            self.result[side] = {
                "calls": calls,
                "tokens_per_s": max(c["tokens_per_s"] for c in calls),
                "max_memory_allocated_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if self.cuda else None,
            }
            self.write()

        return on_call

    def write(self) -> None:
        """Write the result so far, with the engine/generate ratio once both are measured."""
        if "engine" in self.result and "generate" in self.result:
            ratio = self.result["engine"]["tokens_per_s"] / self.result["generate"]["tokens_per_s"]
            self.result["engine_vs_generate"] = round(ratio, 3)
        write_result(self.work, "gen", self.result)


def measure_hf_generate(
    record: GenerationRecord, model_dir: Path, batch: Any, response_length: int, deadline: float
) -> None:
    """Plain ``transformers`` ``model.generate``: exactly ``response_length`` sampled tokens per row."""
    import torch
    from transformers import AutoModelForCausalLM

    device, dtype = record.result["device"], getattr(torch, record.result["dtype"])
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    record.result["generate_load_s"] = round(time.perf_counter() - start, 2)
    inputs = {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}
    pad = model.generation_config.pad_token_id
    prompt_width = inputs["input_ids"].shape[1]

    def call(new_tokens: int) -> int:
        """One ``generate`` call; returns the tokens it made."""
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=pad,
            )
        record.sync()
        return int(out.shape[0] * (out.shape[1] - prompt_width))

    torch.manual_seed(0)
    call(2)  # kernels, allocator and library handles: not timed
    record.reset_peak()
    log(f"model.generate: {len(batch)} rows x {response_length} tokens")
    timed_calls(lambda: call(response_length), deadline, 2, record.recorder("generate"))


def measure_engine(
    record: GenerationRecord, model_dir: Path, tokenizer: Any, batch: Any, response_length: int, deadline: float
) -> None:
    """rlcore's HF rollout engine, configured as a run configures it (EOS ignored, temperature 1)."""
    from rlcore.config import load_config
    from rlcore.rollout.hf import HFRolloutEngine

    overrides = [
        f"actor_rollout_ref.rollout.response_length={response_length}",
        f"data.max_prompt_length={batch['input_ids'].shape[1]}",
        "actor_rollout_ref.rollout.ignore_eos=true",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_k=-1",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    ]
    config = load_config(overrides=overrides).actor_rollout_ref.rollout
    record.reset_peak()
    start = time.perf_counter()
    engine = HFRolloutEngine(
        str(model_dir), tokenizer, config, device=record.result["device"], dtype=record.result["dtype"]
    )
    record.result["engine_load_s"] = round(time.perf_counter() - start, 2)

    def call() -> int:
        """One ``engine.generate`` call; returns the tokens it made."""
        out = engine.generate(batch)
        record.sync()
        return int(out["response_mask"].sum())

    log(f"HF engine: {len(batch)} rows x {response_length} tokens")
    timed_calls(call, deadline, 2, record.recorder("engine"))


def generate(work: Path, device: str, rows: int, response_length: int, deadline: float) -> None:
    """Measure ``model.generate``, then the HF engine, on the same batch; write ``work/gen.json`` as it goes."""
    from transformers import AutoTokenizer

    from rlcore.testing.contracts.rollout import make_prompt_batch

    model_dir = work / "model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    batch = make_prompt_batch(tokenizer, prompt_texts(tokenizer, work / "home/data/gsm8k/test.parquet", rows))
    record = GenerationRecord(
        work,
        device,
        {
            "device": device,
            "dtype": "bfloat16" if device == "cuda" else "float32",
            "rows": len(batch),
            "prompt_tokens_max": batch["input_ids"].shape[1],
            "prompt_tokens_mean": round(float(batch["attention_mask"].sum(-1).float().mean()), 1),
            "response_tokens": response_length,
            "sampling": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "ignore_eos": True},
        },
    )
    now = time.perf_counter()
    measure_hf_generate(
        record, model_dir, batch, response_length, now + 0.4 * (deadline - now)
    )  # the engine gets the rest
    measure_engine(record, model_dir, tokenizer, batch, response_length, deadline)


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
