"""A scorer run inline cannot change torch's global switches under the training.

A reward function that calls ``torch.set_grad_enabled(False)`` (to run a small model of its own) would
otherwise leave gradients off in the controller, and the next backward pass would fail with a bare autograd
error that names no scorer; ``torch.set_default_dtype(torch.float64)``, ``torch.set_num_threads(1)`` or
``torch.use_deterministic_algorithms(True)`` would silently change the rest of the run.

Restoring, not refusing: in scorer processes (the default, ``reward_model.scorer_timeout > 0``) a scorer's
changes stay in its own process and never reach the training, and setting a switch for one's own inference
is legitimate, so an inline call (``scorer_timeout=0``) gets the same: :func:`restore_torch_state` reads the
switches of :data:`SWITCHES` before the call and sets back each one the call changed, with a warning once per
scorer and switch. Inference mode is not among them: it is a context (``with torch.inference_mode():``),
which ends with its block. Nothing here imports torch: without torch loaded there is nothing to restore.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Switch:
    """One of torch's global (or per-thread) settings: how to read it and how to set it back."""

    name: str
    read: Callable[[Any], Any]
    write: Callable[[Any, Any], None]


def _default_device(torch: Any) -> Any:
    """The default device set with ``torch.set_default_device`` (None: never set, or set to None); read
    without making a tensor, as ``torch.get_default_device`` would."""
    context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    return None if context is None else context.device


def _set_deterministic(torch: Any, value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _set_anomaly(torch: Any, value: tuple[bool, bool]) -> None:
    torch.autograd.set_detect_anomaly(value[0], check_nan=value[1])


def _set_attribute(path: str) -> Callable[[Any, Any], None]:
    """A writer of the attribute ``path`` (``backends.cudnn.benchmark``) of the torch module."""
    *parents, last = path.split(".")

    def write(torch: Any, value: Any) -> None:
        owner = torch
        for part in parents:
            owner = getattr(owner, part)
        setattr(owner, last, value)

    return write


def _get_attribute(path: str, getter: str) -> Callable[[Any], Any]:
    """A reader of the attribute ``path`` of the torch module: through ``torch._C.<getter>`` where this torch
    has it (a tenth of the time of the attribute, which goes through a module wrapper)."""

    def read(torch: Any) -> Any:
        fast = getattr(torch._C, getter, None)
        if fast is not None:
            return fast()
        value = torch
        for part in path.split("."):
            value = getattr(value, part)
        return value

    return read


#: the switches an inline scorer call may not change; the order is the order they are set back in
#: (the float32 matmul precision before the TF32 flags it also sets)
SWITCHES: tuple[Switch, ...] = (
    Switch("grad mode (torch.set_grad_enabled)", lambda t: t.is_grad_enabled(), lambda t, v: t.set_grad_enabled(v)),
    Switch(
        "default dtype (torch.set_default_dtype)", lambda t: t.get_default_dtype(), lambda t, v: t.set_default_dtype(v)
    ),
    Switch("default device (torch.set_default_device)", _default_device, lambda t, v: t.set_default_device(v)),
    Switch(
        "intra-op threads (torch.set_num_threads)", lambda t: t.get_num_threads(), lambda t, v: t.set_num_threads(v)
    ),
    Switch(
        "deterministic algorithms (torch.use_deterministic_algorithms)",
        lambda t: (t.are_deterministic_algorithms_enabled(), t.is_deterministic_algorithms_warn_only_enabled()),
        _set_deterministic,
    ),
    Switch(
        "anomaly detection (torch.autograd.set_detect_anomaly)",
        lambda t: (t.is_anomaly_enabled(), t.is_anomaly_check_nan_enabled()),
        _set_anomaly,
    ),
    Switch(
        "autocast on CPU (torch.set_autocast_enabled)",
        lambda t: t.is_autocast_enabled("cpu"),
        lambda t, v: t.set_autocast_enabled("cpu", v),
    ),
    Switch(
        "autocast on CUDA (torch.set_autocast_enabled)",
        lambda t: t.is_autocast_enabled("cuda"),
        lambda t, v: t.set_autocast_enabled("cuda", v),
    ),
    Switch(
        "float32 matmul precision (torch.set_float32_matmul_precision)",
        lambda t: t.get_float32_matmul_precision(),
        lambda t, v: t.set_float32_matmul_precision(v),
    ),
    *(
        Switch(f"torch.{path}", _get_attribute(path, getter), _set_attribute(path))
        for path, getter in (
            ("backends.cuda.matmul.allow_tf32", "_get_cublas_allow_tf32"),
            ("backends.cudnn.allow_tf32", "_get_cudnn_allow_tf32"),
            ("backends.cudnn.benchmark", "_get_cudnn_benchmark"),
            ("backends.cudnn.deterministic", "_get_cudnn_deterministic"),
            ("backends.cudnn.enabled", "_get_cudnn_enabled"),
        )
    ),
)

_warned: set[tuple[str, str]] = set()


def _read_all(torch: Any) -> dict[str, Any]:
    """The value of each switch this torch has (a switch it lacks is left out)."""
    values = {}
    for switch in SWITCHES:
        try:
            values[switch.name] = switch.read(torch)
        except (AttributeError, TypeError, RuntimeError):  # an older or newer torch without it
            continue
    return values


@contextmanager
def restore_torch_state(what: str) -> Iterator[None]:
    """Around one inline call of user code (``what`` names it, e.g. ``"the reward scorer (data_source
    'gsm8k')"``): set back each switch of :data:`SWITCHES` that the call changed, warning once per ``what``
    and switch."""
    torch = sys.modules.get("torch")
    before = _read_all(torch) if torch is not None else {}
    try:
        yield
    finally:
        if before:
            _set_back(torch, before, what)


def _set_back(torch: Any, before: dict[str, Any], what: str) -> None:
    """Set back the switches whose value differs from ``before``."""
    after = _read_all(torch)
    for switch in SWITCHES:
        if switch.name not in before or after.get(switch.name) == before[switch.name]:
            continue
        switch.write(torch, before[switch.name])
        if (what, switch.name) not in _warned:
            _warned.add((what, switch.name))
            logger.warning(
                "%s changed torch's %s from %r to %r; rlcore set it back after the call (a scorer's torch "
                "settings stay in its call, as they stay in a scorer process)",
                what,
                switch.name,
                before[switch.name],
                after.get(switch.name),
            )
