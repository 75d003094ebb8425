"""The plugin's config sections, mounted by its ``config_defaults`` hook: ``reward_model.sandbox`` (the local
sandbox) and ``reward_model.sandbox_fusion`` (verl's keys for a remote Sandbox Fusion service; verl 0.10 spells
them ``reward.sandbox_fusion`` or ``sandbox_fusion``)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from rlcore.api import Section


@dataclass(frozen=True)
class SandboxConfig(Section):
    """``reward_model.sandbox``: code rewards (data_source codecontests, apps, ...)."""

    PATH = "reward_model.sandbox"

    #: true: run them where the kernel cannot confine the code fully (`rlcore sandbox check`); false: the run refuses
    #: there, saying what is not enforced
    allow_unconfined: bool = False


def url_problem(key: str, url: str) -> str | None:
    """Why ``url`` (the value of ``key``) cannot be a Sandbox Fusion ``run_code`` endpoint, or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{key}={url!r} is not an http(s) URL (e.g. http://localhost:8080/run_code)"
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError:
        return f"{key}={url!r} has a bad port"
    if parts.path in ("", "/"):
        return (
            f"{key}={url!r} has no path: requests go to the URL as given (as in verl), so name the endpoint, "
            f"e.g. {url.rstrip('/')}/run_code"
        )
    return None


@dataclass(frozen=True)
class SandboxFusionConfig(Section):
    """``reward_model.sandbox_fusion``: code rewards run by a remote Sandbox Fusion service instead of the local
    sandbox."""

    PATH = "reward_model.sandbox_fusion"

    #: the service's run_code endpoint (http://host:8080/run_code); null: code rewards run in the local sandbox
    url: str | None = None
    #: the most requests in flight at once from this host (all scorer processes together)
    max_concurrent: int = 64
    #: memory_limit_MB of each program when the problem gives no memory_limit
    memory_limit_mb: int = 1024

    def problems(self) -> list[str]:
        """The URL is an http(s) endpoint; the counts are positive."""
        found = self.positive("max_concurrent") + self.positive("memory_limit_mb")
        if self.url is not None:
            problem = url_problem(self.key("url"), str(self.url))
            found += [problem] if problem else []
        return found
