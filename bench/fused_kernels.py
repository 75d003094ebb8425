"""Peak memory and time of one forward + backward of the LM-head step with and without
``use_fused_kernels`` (:mod:`rlcore.modelkit.fused_logprobs`).

The work: hidden states ``[tokens, hidden]`` and an LM head ``[vocab, hidden]``; log-probs of random labels
and entropies at temperature 0.7, a PPO-style loss ``−mean(adv·logp) − 0.01·mean(entropy)``, backward to
the hidden states and the head. ``unfused`` is rlcore's logits path (full ``[tokens, vocab]`` float32
logits, :func:`rlcore.algos.logprobs_from_logits` / :func:`rlcore.algos.entropy_from_logits`); ``torch`` and
(on CUDA with triton) ``triton`` are the fused backends. Each variant runs in a fresh child process; peak
memory is what the step adds on top of its inputs: the process's peak RSS on CPU, ``max_memory_allocated``
on CUDA. Prints one JSON object; also reports the largest difference of the results and gradients from
the unfused path.

    python bench/fused_kernels.py [--vocab 32768] [--tokens 2048] [--hidden 1024] [--dtype float32|bfloat16]
                                  [--device cpu|cuda] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

VARIANTS = ("unfused", "torch", "triton")


def _rss_peak_bytes() -> int:
    """The process's peak resident set size so far (Linux ``VmHWM``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_step(step: Callable[[], Any], device: Any, repeats: int) -> tuple[Any, list[float], int]:
    """Run ``step`` once to warm up, then ``repeats`` timed times on ``device`` (a ``torch.device``): the last
    results, the wall time of each timed run, and the peak memory the step adds in bytes — the process's peak
    RSS over the one before the first step on the CPU (``VmHWM`` keeps a step's peak), ``max_memory_allocated``
    over ``memory_allocated`` after the warm-up on CUDA."""
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    base = _rss_peak_bytes()
    step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    results = None
    for _ in range(repeats):
        start = time.perf_counter()
        results = step()
        sync()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() - base if device.type == "cuda" else _rss_peak_bytes() - base
    return results, times, peak


def _child(args: argparse.Namespace) -> dict[str, Any]:
    """One variant in this process: median time of ``--repeats`` forward+backward passes and peak memory."""
    import torch

    from rlcore.algos import entropy_from_logits, logprobs_from_logits
    from rlcore.modelkit.fused_logprobs import fused_linear_logprobs

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    hidden = (torch.randn(args.tokens, args.hidden, generator=gen) * 0.5).to(device, dtype).requires_grad_()
    weight = (torch.randn(args.vocab, args.hidden, generator=gen) * 0.05).to(device, dtype).requires_grad_()
    labels = torch.randint(0, args.vocab, (args.tokens,), generator=gen).to(device)
    adv = torch.randn(args.tokens, generator=gen).to(device)

    def step() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if args.variant == "unfused":
            logits = torch.nn.functional.linear(hidden, weight).float() / 0.7
            logp, entropy = logprobs_from_logits(logits, labels), entropy_from_logits(logits)
        else:
            out = fused_linear_logprobs(hidden, weight, None, labels, 0.7, backend=args.variant)
            logp, entropy = out[:, 0], out[:, 1]
        loss = -(adv * logp).mean() - 0.01 * entropy.mean()
        grad_hidden, grad_weight = torch.autograd.grad(loss, (hidden, weight))
        return logp.detach(), entropy.detach(), grad_hidden, grad_weight

    results, times, peak = measure_step(step, device, args.repeats)  # the warm-up compiles triton's kernels
    if args.save:
        torch.save([r.float().cpu() for r in results], args.save)
    return {"median_s": statistics.median(times), "min_s": min(times), "peak_extra_mib": round(peak / 2**20, 1)}


def _run_variant(args: argparse.Namespace, variant: str, save: str) -> dict[str, Any]:
    """Run one variant in a fresh interpreter (so the RSS peak is its own)."""
    command = [sys.executable, __file__, "--child", variant, "--save", save]
    for name in ("vocab", "tokens", "hidden", "dtype", "device", "repeats", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout)


def _available(device: str) -> list[str]:
    """The variants that can run on ``device``: ``triton`` only on CUDA with the triton package."""
    if device != "cuda":
        return ["unfused", "torch"]
    try:
        import triton  # noqa: F401
    except ImportError:
        return ["unfused", "torch"]
    return list(VARIANTS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--save", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.vocab, args.tokens, args.hidden, args.repeats, args.threads) < 1:
        print("error: --vocab, --tokens, --hidden, --repeats and --threads must be positive", file=sys.stderr)
        return 2
    if args.child:
        args.variant = args.child
        print(json.dumps(_child(args)))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda: no CUDA device here", file=sys.stderr)
            return 2
    import tempfile

    import torch

    report: dict[str, Any] = {k: getattr(args, k) for k in ("vocab", "tokens", "hidden", "dtype", "device", "threads")}
    report["logits_mib"] = round(args.tokens * args.vocab * 4 / 2**20, 1)
    with tempfile.TemporaryDirectory() as tmp:
        saved = {}
        for variant in _available(args.device):
            print(f"running {variant} ...", file=sys.stderr)
            saved[variant] = os.path.join(tmp, f"{variant}.pt")
            report[variant] = _run_variant(args, variant, saved[variant])
        reference = torch.load(saved["unfused"]) if os.path.exists(saved["unfused"]) else None
        for variant in saved:
            if variant != "unfused" and reference is not None and os.path.exists(saved[variant]):
                got = torch.load(saved[variant])
                names = ("log_probs", "entropy", "grad_hidden", "grad_weight")
                report[variant]["max_abs_diff"] = {
                    n: float((a - b).abs().max()) for n, a, b in zip(names, got, reference, strict=True)
                }
    for variant in saved:
        if variant != "unfused" and "median_s" in report[variant] and "median_s" in report["unfused"]:
            report[variant]["time_vs_unfused"] = round(report[variant]["median_s"] / report["unfused"]["median_s"], 3)
            report[variant]["memory_vs_unfused"] = round(
                report[variant]["peak_extra_mib"] / max(report["unfused"]["peak_extra_mib"], 1e-9), 3
            )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
