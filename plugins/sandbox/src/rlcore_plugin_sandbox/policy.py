"""Whether a sandboxed program may run where the kernel cannot confine it fully.

Code rewards and the code tool refuse to run model-written code on a host whose level is not ``full``
(:attr:`rlcore_plugin_sandbox.host.HostIsolation.level`) unless the user accepts the weaker mode: the code tool with
``allow_unconfined: true`` in its config, code rewards with ``reward_model.sandbox.allow_unconfined=true``,
which a run passes to its scorer processes as ``RLCORE_SANDBOX_ALLOW_UNCONFINED=1``.
"""

from __future__ import annotations

import os

from rlcore_plugin_sandbox.host import HostIsolation
from rlcore_plugin_sandbox.launch import SandboxError

ALLOW_ENV = "RLCORE_SANDBOX_ALLOW_UNCONFINED"
#: how a user accepts the weaker mode, as the refusal names it
HOW_TO_ACCEPT = (
    "reward_model.sandbox.allow_unconfined=true for code rewards, allow_unconfined: true in the code tool's "
    f"config, or {ALLOW_ENV}=1"
)


class SandboxUnavailableError(SandboxError):
    """The host cannot confine model-written code fully and the weaker mode was not accepted."""


def unconfined_allowed(explicit: bool | None = None) -> bool:
    """``explicit`` when given, else whether ``RLCORE_SANDBOX_ALLOW_UNCONFINED`` is set to a true value."""
    if explicit is not None:
        return explicit
    return os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes")


def refusal(host: HostIsolation) -> str:
    """Why the sandbox refuses here: the level, what is not enforced and why, and how to accept it."""
    missing = "; ".join(f"{row.name}: {row.how}" for row in host.missing())
    reasons = "; ".join(f"{mode}: {reason}" for mode, reason in host.unavailable.items())
    return (
        f"the sandbox cannot fully confine model-written code on this host (level {host.level}; not enforced: "
        f"{missing}) [{reasons}]. To run it anyway, set {HOW_TO_ACCEPT}; `rlcore sandbox check` shows what "
        "is enforced"
    )


def require_confinement(host: HostIsolation, allow_unconfined: bool | None = None) -> None:
    """Raise :class:`SandboxUnavailableError` when ``host`` is not ``full`` and the weaker mode is not accepted."""
    if host.level != "full" and not unconfined_allowed(allow_unconfined):
        raise SandboxUnavailableError(refusal(host))
