"""Pinned lanes: ``trainer.lane_cpus`` parsed and checked, and what each pool's workers are pinned to.

With split placement the rollout pool and the train pool run at the same time (one-step-off, the
asynchronous modes); on one machine they otherwise compete for the same cores. ``trainer.lane_cpus.trainer``
and ``trainer.lane_cpus.rollout`` give each pool cores of its own: every worker of the pool is pinned to
them (``os.sched_setaffinity``) and runs ``max(1, cores // ranks per node)`` torch threads
(:func:`rlcore.process_env.pin_process`). No torch or Ray here: the dry run checks the keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.config.problems import ConfigError

#: the config key of the section
LANE_KEY = "trainer.lane_cpus"
#: the pools a lane can pin, by the field that names their cores
LANE_POOLS = {"trainer": "train", "rollout": "rollout"}


def parse_cpu_list(value: Any, key: str) -> frozenset[int]:
    """The cores of a Linux CPU list such as ``"0-3,8"`` (or one int); a :class:`ConfigError` naming ``key``
    when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f'{key} must be a CPU list such as "0-3,8" or null, got {value!r}')
    cores: set[int] = set()
    for part in value.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise ConfigError(f'{key}={value!r}: {part!r} is not a core number or range (a CPU list such as "0-3,8")')
        cores.update(range(int(low), int(high or low) + 1))
    return frozenset(cores)


def lane_cpu_problems(values: dict[str, Any]) -> list[str]:
    """The format problems of ``trainer.lane_cpus`` (``values``: its fields by name): each value a CPU list or
    null, and no core in both."""
    problems: list[str] = []
    sets: dict[str, frozenset[int]] = {}
    for name, value in values.items():
        if value is None:
            continue
        try:
            sets[name] = parse_cpu_list(value, f"{LANE_KEY}.{name}")
        except ConfigError as exc:
            problems += exc.problems
    if len(sets) == 2 and sets["trainer"] & sets["rollout"]:
        shared = format_cpus(sets["trainer"] & sets["rollout"])
        problems.append(
            f"{LANE_KEY}.trainer and {LANE_KEY}.rollout share cores {shared}: each lane needs cores of its own"
        )
    return problems


def format_cpus(cores: frozenset[int] | set[int]) -> str:
    """``cores`` as a compact CPU list (``0-3,8``)."""
    runs: list[list[int]] = []
    for core in sorted(cores):
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(f"{low}-{high}" if high > low else str(low) for low, high in runs)


@dataclass(frozen=True)
class LanePin:
    """What the workers of one pool are pinned to: ``cpus`` and torch ``threads`` per worker."""

    cpus: frozenset[int]
    threads: int

    def describe(self) -> str:
        """``cores 0-3, 2 threads per worker``."""
        return f"cores {format_cpus(self.cpus)}, {self.threads} torch thread(s) per worker"


def lane_pins(config: DictConfig, available: frozenset[int] | None = None) -> dict[str, LanePin]:
    """The pinning of each pool that ``trainer.lane_cpus`` names, by pool name (``train``, ``rollout``);
    empty when unpinned. Raises one :class:`ConfigError` naming the key: a bad CPU list, shared cores, pinning
    without ``trainer.executor=ray``, a rollout lane without ``trainer.placement=split``, or cores that are not
    in ``available`` (default: this process's cores when Ray is started locally; a cluster's workers check
    their own node when they start)."""
    values = {name: OmegaConf.select(config, f"{LANE_KEY}.{name}", default=None) for name in LANE_POOLS}
    given = {name: value for name, value in values.items() if value is not None}
    if not given:
        return {}
    problems = lane_cpu_problems(values)
    if problems:
        raise ConfigError(*problems)
    if config.trainer.executor != "ray":
        problems.append(
            f"{LANE_KEY} pins Ray worker processes and needs trainer.executor=ray (got {config.trainer.executor!r})"
        )
    if "rollout" in given and config.trainer.placement != "split":
        problems.append(
            f"{LANE_KEY}.rollout pins the rollout pool, which only trainer.placement=split has "
            f"(got {config.trainer.placement!r}); set trainer.placement=split or {LANE_KEY}.rollout=null"
        )
    if available is None and not config.trainer.ray_address:
        available = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    ranks = {"trainer": config.trainer.n_gpus_per_node, "rollout": config.trainer.rollout_n_gpus_per_node}
    pins: dict[str, LanePin] = {}
    for name, value in given.items():
        cpus = parse_cpu_list(value, f"{LANE_KEY}.{name}")
        missing = cpus - available if available is not None else frozenset()
        if missing:
            problems.append(
                f"{LANE_KEY}.{name}={value!r}: cores {format_cpus(missing)} are not among this machine's usable "
                f"cores {format_cpus(available or frozenset())}"
            )
        pins[LANE_POOLS[name]] = LanePin(cpus, max(1, len(cpus) // max(1, int(ranks[name]))))
    if problems:
        raise ConfigError(*problems)
    return pins


def lane_plan_lines(config: DictConfig) -> list[str]:
    """The run plan's line for pinned lanes (none when unpinned); checks the keys (:func:`lane_pins`)."""
    pins = lane_pins(config)
    if not pins:
        return []
    pools = ["train", "rollout"] if config.trainer.placement == "split" else ["train"]
    parts = [f"{pool} pool on {pins[pool].describe()}" if pool in pins else f"{pool} pool unpinned" for pool in pools]
    return [f"Pinned lanes ({LANE_KEY}): {'; '.join(parts)}"]
