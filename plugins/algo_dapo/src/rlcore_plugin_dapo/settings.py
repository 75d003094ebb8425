"""DAPO's config keys, their defaults and their validation. Imports no torch (the hooks module uses it)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import ConfigError
from rlcore_plugin_dapo.config import OverlongBufferConfig

#: the batch filter that implements dynamic sampling
FILTER_NAME = "dapo-groups"
#: group metrics computed from the batch's tensors; any other metric names a per-sample column
COMPUTED_METRICS: tuple[str, ...] = ("seq_reward", "seq_final_reward", "reward")
#: without ``overlong_buffer.len``, the buffer is this fraction of the maximum response length (the DAPO
#: paper's 4096 of 20480 tokens)
DEFAULT_BUFFER_FRACTION = 0.2


@dataclass(frozen=True)
class OverlongBuffer:
    """DAPO's soft overlong punishment, from ``reward_model.overlong_buffer``.

    A response of L tokens gets min(−(L − (L_max − L_buf)) / L_buf · factor, 0): nothing up to
    L_max − L_buf tokens, then a penalty growing linearly to −factor at L_max.
    """

    enable: bool
    length: int
    max_length: int
    penalty_factor: float
    log: bool

    @property
    def expected_length(self) -> int:
        """L_max − L_buf: the longest response that is not penalised."""
        return self.max_length - self.length


def overlong_buffer(section: OverlongBufferConfig) -> OverlongBuffer:
    """Read and check the ``reward_model.overlong_buffer`` section.

    A null ``len`` is max(1, int(0.2·L_max)); with ``enable`` the buffer must satisfy 1 ≤ len ≤ L_max.
    Raises :class:`~rlcore.config.ConfigError` naming the key.
    """
    max_length = int(section.max_response_length or 0)
    length = section.len
    if length is None:
        length = max(1, int(DEFAULT_BUFFER_FRACTION * max_length))
    settings = OverlongBuffer(
        enable=bool(section.enable),
        length=int(length),
        max_length=max_length,
        penalty_factor=float(section.penalty_factor or 0.0),
        log=bool(section.log),
    )
    if settings.enable and not 1 <= settings.length <= settings.max_length:
        raise ConfigError(
            f"reward_model.overlong_buffer.len={settings.length} must be between 1 and the maximum response "
            f"length {settings.max_length} (data.max_response_length)"
        )
    return settings
