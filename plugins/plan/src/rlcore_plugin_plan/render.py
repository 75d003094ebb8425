"""The plan as text: a table of phases with their largest terms, the step time and the verdict (and a
short form of three lines for ``rlcore run --dry-run``)."""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore_plugin_plan.devices import GIB
from rlcore_plugin_plan.planner import Plan


def gib(value: float) -> str:
    """Bytes as GiB text: ``12.3 GiB`` (MiB below one GiB)."""
    if value < GIB:
        return f"{value / 2**20:.1f} MiB"
    return f"{value / GIB:.1f} GiB"


def count(value: int) -> str:
    """A parameter count as ``1.72B`` or ``0.65M``."""
    return f"{value / 1e9:.2f}B" if value >= 1e9 else f"{value / 1e6:.2f}M"


def _seconds(value: float) -> str:
    return f"{value:.3g} s"


def headline(plan: Plan) -> str:
    """One line: the model, the ranks and the device."""
    model, s, device = plan.model, plan.settings, plan.device
    return (
        f"plan: {count(model.params)} parameters ({model.shape.layers} layers, hidden {model.shape.hidden}, "
        f"vocab {model.shape.vocab}), {s.world} rank(s) of {device.description} ({gib(device.memory_bytes)}, "
        f"{device.bf16_flops / 1e12:.0f} TFLOP/s bf16, {device.bandwidth / 1e12:.2f} TB/s)"
    )


def time_line(plan: Plan) -> str:
    """The step time and its parts, with the efficiencies assumed."""
    t = plan.time
    parts = [("generation", t.generation), ("old log-probs", t.old_log_prob)]
    if t.ref_log_prob:
        parts.append(("reference", t.ref_log_prob))
    if t.critic:
        parts.append(("critic", t.critic))
    parts.append(("update", t.update))
    inner = ", ".join(f"{name} {_seconds(value)}" for name, value in parts)
    return (
        f"step time ≈ {_seconds(t.step)} ({inner}) at {t.as_dict()['compute_efficiency']:.0%} of peak FLOP/s and "
        f"{t.as_dict()['bandwidth_efficiency']:.0%} of memory bandwidth"
    )


def verdict_line(plan: Plan) -> str:
    """``fits`` with the largest phase, or each phase that does not fit with its fix."""
    memory = plan.device.memory_bytes
    if plan.fits:
        top = max(plan.phases, key=lambda p: p.peak)
        return f"verdict: fits ({top.name} is the largest phase: {gib(top.peak)} of {gib(memory)} per rank)"
    parts = [
        f"{f.phase} needs {gib(f.peak)} of {gib(memory)}" + (f": try {f.fix}" if f.fix else "") for f in plan.findings
    ]
    return "verdict: does not fit — " + "; ".join(parts)


def render_text(plan: Plan) -> str:
    """The full plan as text."""
    lines = [headline(plan), f"{'phase':<16}{'peak/rank':>12}  terms (largest first)"]
    for phase in plan.phases:
        terms = sorted(phase.terms.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{name} {gib(value)}" for name, value in terms)
        lines.append(f"{phase.name:<16}{gib(phase.peak):>12}  {shown}")
        lines.extend(f"{'':<30}{note}" for note in phase.notes)
    lines.append(time_line(plan))
    lines.append(verdict_line(plan))
    return "\n".join(lines)


def render_short(plan: Plan) -> list[str]:
    """The dry run's lines: peaks per phase, the step time and the verdict."""
    peaks = ", ".join(f"{phase.name} {gib(phase.peak)}" for phase in plan.phases)
    return [
        f"plan ({plan.device.name}, `rlcore plan` for details): peak per rank {peaks}",
        time_line(plan),
        verdict_line(plan),
    ]


def dry_run_lines(config: DictConfig) -> list[str]:
    """The short plan for ``rlcore run --dry-run`` on the run's device (``trainer.device=cpu``: the CPU
    rules; else this machine's GPU, or the CPU without one), reading a hub model's config from the local
    cache only (a dry run goes to no network); a plan that cannot be made is one line saying why, never a
    failed dry run. It is made (``plan_lines``) before the run's checks raise their problems, so a config they
    refuse (a world size of 0) gets here too: whatever the planner raises then is that line, and the checks'
    error is what the dry run prints."""
    from rlcore.api import RLCoreError, select
    from rlcore_plugin_plan.planner import plan_for_config

    device = "cpu" if select(config, "trainer.device") == "cpu" else None
    try:
        return render_short(plan_for_config(config, device, offline=True))
    except (RLCoreError, OSError, ValueError) as exc:
        return [f"plan: not made ({exc})"]
    except Exception as exc:  # noqa: BLE001 - a config the checks refuse (see above); never a traceback here
        return [f"plan: not made ({type(exc).__name__}: {exc})"]
