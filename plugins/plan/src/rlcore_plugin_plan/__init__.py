"""rlcore plugin: ``rlcore plan`` (per-rank peak memory of each phase of a step, the step time and whether the
run fits, before launch) and the plan lines of ``rlcore run --dry-run``."""

__version__ = "0.1.0"
