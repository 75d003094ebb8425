"""Rollout throughput of the HF and vLLM engines on the same model and prompts, weight-sync time by model size,
and the HF engine against plain ``transformers`` ``model.generate`` (:func:`compare_generate`).

For each model size (built locally from config, random weights) and each batch size, both engines sample
``--new-tokens`` tokens per prompt with EOS ignored (so every response has exactly that length) at
temperature 1; the figure is generated tokens per second over ``--repeats`` timed calls after one warm-up
call. Weight sync is the time of ``update_weights`` with the full state dict (for vLLM: name/shape checks,
safetensors serialisation and ``reload_weights`` in vLLM's process), median of ``--repeats``.

With ``--compare-generate`` it measures instead, per size and batch, the HF engine against
``model.generate`` on the same rows, lengths and sampling (:func:`compare_generate`; ``--device``,
``--dtype``), and vLLM is not started. ``bench/gpu.py`` imports :func:`compare_generate` for the same
comparison on a GPU.

Prints one JSON object on stdout; progress goes to stderr. vLLM must be importable
(``pip install 'rlcore-plugin-vllm[cpu]'``); without it only the HF figures are reported.

    python bench/rollout.py [--sizes tiny,small] [--batches 8,64] [--new-tokens 128] [--repeats 3]
    python bench/rollout.py --compare-generate [--sizes tiny,small] [--batches 8,64] [--device cpu] [--dtype float32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: model shapes (hidden, intermediate, layers, heads, kv heads); head_dim stays >= 32 for vLLM's CPU kernels
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1},
    "small": {"hidden_size": 256, "intermediate_size": 1024, "num_layers": 6, "num_heads": 8, "num_kv_heads": 2},
    "medium": {"hidden_size": 512, "intermediate_size": 2048, "num_layers": 8, "num_heads": 16, "num_kv_heads": 4},
}
PROMPT = "Question: John has {n} apples and buys {m} more. How many apples does he have now? Answer:"


def log(message: str) -> None:
    """Progress on stderr (stdout carries only the JSON result)."""
    print(message, file=sys.stderr, flush=True)


def build_model_dir(root: Path, size: str) -> tuple[Path, int]:
    """Write the ``size`` model and tokenizer under ``root``; returns the directory and the parameter count."""
    from rlcore_testkit.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, **SIZES[size])
    path = root / size
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, sum(p.numel() for p in model.parameters())


def rollout_config(new_tokens: int, config_class: Any = None) -> Any:
    """The typed ``actor_rollout_ref.rollout`` section both engines use (``config_class``: an engine's own,
    default :class:`rlcore.api.RolloutConfig`)."""
    from rlcore.api import RolloutConfig
    from rlcore.config import load_config

    tree = load_config(
        overrides=[
            f"actor_rollout_ref.rollout.response_length={new_tokens}",
            "data.max_prompt_length=64",
            "actor_rollout_ref.rollout.ignore_eos=true",
            "actor_rollout_ref.rollout.load_format=auto",
        ]
    )
    return (config_class or RolloutConfig).from_tree(tree)


def prompt_batch(tokenizer: Any, count: int) -> Any:
    """``count`` left-padded arithmetic prompts."""
    from rlcore_testkit.contracts.rollout import make_prompt_batch

    return make_prompt_batch(tokenizer, [PROMPT.format(n=i % 17, m=(3 * i) % 11) for i in range(count)])


def time_generation(engine: Any, batch: Any, repeats: int) -> dict[str, float]:
    """Generated tokens per second (median over ``repeats`` calls after one warm-up call)."""
    engine.generate(batch)
    seconds, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        out = engine.generate(batch)
        seconds.append(time.perf_counter() - start)
        tokens = int(out["response_mask"].sum())
    median = statistics.median(seconds)
    return {"seconds": round(median, 4), "tokens": tokens, "tokens_per_s": round(tokens / median, 1)}


def time_sync(engine: Any, state: dict[str, Any], repeats: int) -> float:
    """Median seconds of ``engine.update_weights(state)``."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.update_weights(state.items())
        seconds.append(time.perf_counter() - start)
    return round(statistics.median(seconds), 4)


class _Side:
    """One timed side of :func:`compare_generate`: its JSON entry, filled as calls are made."""

    def __init__(self, device: Any) -> None:
        """Time calls on ``device`` (synchronised around each call on CUDA)."""
        self.device = device
        self.entry: dict[str, Any] = {}

    def synchronize(self) -> None:
        """Wait for the device's queued work."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        """Start the side's peak-memory measurement afresh (CUDA)."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def _call(self, call: Callable[[], Any]) -> tuple[float, Any]:
        """Seconds of one synchronised ``call()``, and its result."""
        self.synchronize()
        start = time.perf_counter()
        result = call()
        self.synchronize()
        return time.perf_counter() - start, result

    def run(
        self,
        call: Callable[[], Any],
        tokens_of: Callable[[Any], int],
        repeats: int,
        deadline: float | None,
        on_call: Callable[[], None],
    ) -> Any:
        """One untimed warm-up call (``first_call_s``), then up to ``repeats`` timed calls; a further timed call
        starts only while one more of the last one's length ends before ``deadline``. After each timed call
        the entry holds ``calls``, their median ``seconds``, ``tokens`` and ``tokens_per_s``, and the peak
        memory, and ``on_call()`` runs. Returns the last call's result."""
        import torch

        first_s, result = self._call(call)
        self.entry["first_call_s"] = round(first_s, 3)
        calls: list[dict[str, float]] = []
        last_s = first_s
        while len(calls) < repeats and (
            deadline is None or not calls or time.perf_counter() + 1.2 * last_s <= deadline
        ):
            last_s, result = self._call(call)
            tokens = tokens_of(result)
            calls.append({"seconds": round(last_s, 4), "tokens": tokens, "tokens_per_s": round(tokens / last_s, 1)})
            median = statistics.median(c["seconds"] for c in calls)
            cuda = self.device.type == "cuda"
            self.entry.update(
                calls=calls,
                seconds=round(median, 4),
                tokens=tokens,
                tokens_per_s=round(tokens / median, 1),
                max_memory_allocated_gb=round(torch.cuda.max_memory_allocated(self.device) / 2**30, 2)
                if cuda
                else None,
            )
            on_call()
        return result


def _measure_engine(
    result: dict[str, Any],
    make_engine: Callable[[], Any],
    place: Any,
    batch: Any,
    repeats: int,
    deadline: float | None,
    report: Callable[[], None],
) -> None:
    """The ``engine`` entry of :func:`compare_generate`'s ``result`` and (on CUDA, time allowing)
    ``engine_sleep_wake``; the engine is built here and freed on return, before ``model.generate`` loads
    its own copy."""
    side = _Side(place)
    result["engine"] = side.entry
    side.reset_peak()
    start = time.perf_counter()
    engine = make_engine()
    side.entry["load_s"] = round(time.perf_counter() - start, 2)

    def tokens_of(out: Any) -> int:
        return int(out.meta["metrics"]["rollout/gen_tokens"])

    out = side.run(lambda: engine.generate(batch), tokens_of, repeats, deadline, report)
    metrics = out.meta["metrics"]
    side.entry.update(
        rows_per_chunk=metrics["rollout/rows_per_chunk"], graph_step_share=round(metrics["rollout/graph_step_share"], 4)
    )
    if place.type != "cuda" or (deadline is not None and time.perf_counter() >= deadline):
        return

    def woken() -> Any:
        engine.wake()
        try:
            return engine.generate(batch)
        finally:
            engine.sleep()

    asleep = _Side(place)
    result["engine_sleep_wake"] = asleep.entry
    asleep.run(woken, tokens_of, repeats, deadline, report)


def compare_generate(
    model_dir: str | Path,
    prompts: list[str],
    response_length: int,
    device: str = "cpu",
    dtype: str = "float32",
    *,
    repeats: int = 3,
    temperature: float = 1.0,
    enforce_eager: bool = False,
    gpu_memory_utilization: float = 0.5,
    deadline: float | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """rlcore's HF rollout engine against plain ``transformers`` ``model.generate`` on the same rows.

    Both load the causal LM in ``model_dir`` (and its tokenizer) in ``dtype`` on ``device``, take the same
    ``prompts`` (texts, tokenized as they are, padded on the left) and sample ``response_length`` tokens per row
    at ``temperature`` without top-k or top-p, ignoring EOS (the engine's ``rollout.ignore_eos``;
    ``model.generate`` with no EOS token), so both generate exactly ``rows x response_length`` tokens.
    Each side makes one warm-up call, then up to ``repeats`` timed calls (median, the device synchronised).
    The engine runs as a rollout does (``enforce_eager`` and ``gpu_memory_utilization`` as the rollout
    keys); on CUDA it is also timed with ``wake()`` before and ``sleep()`` after every call, as a run with
    ``rollout.free_cache_engine=true`` (the default) calls it: weights moved back, cache reallocated and
    graphs captured again.

    With a ``deadline`` (a ``time.perf_counter()`` value) the engine's side ends by 60 % of the time left and
    ``model.generate``'s by the deadline: a timed call starts only while one more of the last one's length
    fits. ``on_result(result)`` receives the result so far after every timed call, so that a caller stopped
    at its time limit keeps what was measured.

    Returns a JSON-friendly dict:

    - ``device``, ``device_name`` (the GPU's name, or the CPU's architecture), ``dtype``, ``rows``,
      ``prompt_tokens`` (the padded prompt width), ``prompt_tokens_mean`` (the mean real prompt length),
      ``response_length``, ``temperature``, ``repeats``;
    - ``engine``: ``load_s`` (building the engine), ``first_call_s`` (the warm-up call), ``calls`` (each timed
      call's ``seconds``, ``tokens``, ``tokens_per_s``), ``seconds`` (their median), ``tokens`` (generated per
      call), ``tokens_per_s`` (tokens / median seconds), ``max_memory_allocated_gb`` (the CUDA peak during
      the side; None on CPU), and ``rows_per_chunk`` and ``graph_step_share`` (the engine's own metrics of
      its last call);
    - ``engine_sleep_wake`` (CUDA only, time allowing): the same timing with ``wake()`` / ``sleep()`` around
      every call;
    - ``generate``: the same as ``engine`` for ``model.generate`` (``load_s``: loading the model);
    - ``engine_vs_generate``: ``engine.tokens_per_s / generate.tokens_per_s``.
    """
    import copy
    import platform

    import torch
    from rlcore_plugin_hf.engine import HFRolloutEngine
    from rlcore_testkit.contracts.rollout import make_prompt_batch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlcore.api import RolloutConfig
    from rlcore.config import load_config

    place = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    batch = make_prompt_batch(tokenizer, list(prompts))
    rows, width = batch["input_ids"].shape
    tree = load_config(
        overrides=[
            f"actor_rollout_ref.rollout.response_length={response_length}",
            f"data.max_prompt_length={width}",
            f"actor_rollout_ref.rollout.temperature={temperature}",
            "actor_rollout_ref.rollout.top_k=-1",
            "actor_rollout_ref.rollout.top_p=1.0",
            "actor_rollout_ref.rollout.ignore_eos=true",
            f"actor_rollout_ref.rollout.enforce_eager={str(enforce_eager).lower()}",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={gpu_memory_utilization}",
        ]
    )
    config = RolloutConfig.from_tree(tree)
    result: dict[str, Any] = {
        "device": place.type,
        "device_name": torch.cuda.get_device_name(place) if place.type == "cuda" else platform.machine(),
        "dtype": dtype,
        "rows": rows,
        "prompt_tokens": width,
        "prompt_tokens_mean": round(float(batch["attention_mask"].sum(-1).float().mean()), 1),
        "response_length": response_length,
        "temperature": temperature,
        "repeats": repeats,
    }

    def report() -> None:
        """Hand the result so far to ``on_result``, with the ratio once both sides are measured."""
        if "tokens_per_s" in result.get("engine", {}) and "tokens_per_s" in result.get("generate", {}):
            ratio = result["engine"]["tokens_per_s"] / result["generate"]["tokens_per_s"]
            result["engine_vs_generate"] = round(ratio, 2)
        if on_result is not None:
            on_result(result)

    now = time.perf_counter()
    engine_deadline = None if deadline is None else now + 0.6 * (deadline - now)
    _measure_engine(
        result,
        lambda: HFRolloutEngine(str(model_dir), tokenizer, config, device=place, dtype=torch_dtype),
        place,
        batch,
        repeats,
        engine_deadline,
        report,
    )
    side = _Side(place)
    side.reset_peak()
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(place).eval()
    result["generate"] = side.entry
    side.entry["load_s"] = round(time.perf_counter() - start, 2)
    settings = copy.deepcopy(model.generation_config)
    settings.eos_token_id = None  # no stopping: every row gets response_length tokens, as with ignore_eos
    settings.update(
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=response_length,
        min_new_tokens=None,
        pad_token_id=tokenizer.pad_token_id,
    )
    inputs = {"input_ids": batch["input_ids"].to(place), "attention_mask": batch["attention_mask"].to(place)}

    def generate() -> Any:
        with torch.inference_mode():
            return model.generate(**inputs, generation_config=settings)

    side.run(generate, lambda out: rows * (out.shape[1] - width), repeats, deadline, report)
    report()
    return result


def bench_size(root: Path, size: str, batches: list[int], new_tokens: int, repeats: int, with_vllm: bool) -> dict:
    """Both engines on one model size."""
    import torch
    from rlcore_plugin_hf.engine import HFRolloutEngine
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, params = build_model_dir(root, size)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = rollout_config(new_tokens)
    state = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    result: dict[str, Any] = {
        "params": params,
        "state_dict_mb": round(sum(t.numel() * 4 for t in state.values()) / 2**20, 2),
    }
    engines: dict[str, Any] = {"hf": HFRolloutEngine(str(model_dir), tokenizer, config)}
    if with_vllm:
        from rlcore_plugin_vllm.engine import VLLMRolloutEngine

        start = time.perf_counter()
        vllm_config = rollout_config(new_tokens, VLLMRolloutEngine.config_class)
        engines["vllm"] = VLLMRolloutEngine(str(model_dir), tokenizer, vllm_config, dtype="float32")
        result["vllm_start_s"] = round(time.perf_counter() - start, 1)
    for name, engine in engines.items():
        entry: dict[str, Any] = {}
        for count in batches:
            log(f"{size}: {name} batch {count}")
            entry[f"batch_{count}"] = time_generation(engine, prompt_batch(tokenizer, count), repeats)
        entry["weight_sync_s"] = time_sync(engine, state, repeats)
        result[name] = entry
    if with_vllm:
        result["vllm_vs_hf_tokens_per_s"] = {
            f"batch_{count}": round(
                result["vllm"][f"batch_{count}"]["tokens_per_s"] / result["hf"][f"batch_{count}"]["tokens_per_s"], 2
            )
            for count in batches
        }
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; an unknown size is an error naming the known ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,small", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--batches", default="8,64", help="comma-separated batch sizes (prompts per call)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--compare-generate", action="store_true", help="the HF engine against model.generate (no vLLM)"
    )
    parser.add_argument("--device", default="cpu", help="with --compare-generate: cpu or cuda")
    parser.add_argument("--dtype", default="float32", help="with --compare-generate: float32, bfloat16, ...")
    args = parser.parse_args(argv)
    args.sizes = args.sizes.split(",")
    unknown = [size for size in args.sizes if size not in SIZES]
    if unknown:
        parser.error(f"unknown size(s) {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    args.batches = [int(value) for value in args.batches.split(",")]
    return args


def compare_main(args: argparse.Namespace) -> dict[str, Any]:
    """``--compare-generate``: :func:`compare_generate` per size and batch size."""
    import torch

    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "new_tokens": args.new_tokens,
        "sizes": {},
    }
    with tempfile.TemporaryDirectory() as root:
        for size in args.sizes:
            model_dir, params = build_model_dir(Path(root), size)
            entry: dict[str, Any] = {"params": params}
            for count in args.batches:
                log(f"{size}: engine vs model.generate, batch {count}")
                prompts = [PROMPT.format(n=i % 17, m=(3 * i) % 11) for i in range(count)]
                entry[f"batch_{count}"] = compare_generate(
                    model_dir, prompts, args.new_tokens, args.device, args.dtype, repeats=args.repeats
                )
            report["sizes"][size] = entry
    return report


def engines_main(args: argparse.Namespace) -> dict[str, Any]:
    """The HF and (when importable) vLLM engines per size and batch size, and their weight sync."""
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM's own handler prints to stdout, which carries the JSON
    import torch

    from rlcore.errors import RLCoreError

    try:
        from rlcore_plugin_vllm.engine import import_vllm

        import_vllm()
        with_vllm, vllm_note = True, None
    except (ImportError, RLCoreError) as exc:
        with_vllm, vllm_note = False, str(exc)
        log(f"vLLM unavailable, HF only: {exc}")
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(),
        },
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "vllm": with_vllm if with_vllm else vllm_note,
        "sizes": {},
    }
    with tempfile.TemporaryDirectory() as root:
        for size in args.sizes:
            report["sizes"][size] = bench_size(Path(root), size, args.batches, args.new_tokens, args.repeats, with_vllm)
    return report


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its JSON object (anything the libraries print goes to stderr: saving a
    model imports DeepSpeed through transformers, whose logger writes to stdout)."""
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with contextlib.redirect_stdout(sys.stderr):
        report = compare_main(args) if args.compare_generate else engines_main(args)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
