"""Config errors, and the collector that lets one dry run report every problem at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rlcore.errors import RLCoreError


class ConfigError(RLCoreError, ValueError):
    """A bad config key or value; the message names the key and where it came from.

    One error may carry several problems (:attr:`problems`, one line each): the message is their lines.
    """

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class ConfigFileError(ConfigError):
    """A config file that cannot be read (missing, not YAML, not a mapping, a broken ``defaults:`` list).

    The keys it would have set are unknown, so checking the rest would only report their absence:
    :meth:`Problems.collect` lets this error through, and the run stops at it.
    """


class Problems:
    """Collects config problems, so that a run reports all of them instead of stopping at the first."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        """Record one problem (a repeated message is recorded once)."""
        if message not in self.items:
            self.items.append(message)

    @contextmanager
    def collect(self) -> Iterator[None]:
        """Record the problems of an :class:`RLCoreError` raised in the block instead of propagating it
        (a :class:`ConfigFileError` propagates: nothing after it can be checked meaningfully)."""
        try:
            yield
        except ConfigFileError:
            raise
        except ConfigError as exc:
            for message in exc.problems:
                self.add(message)
        except RLCoreError as exc:
            self.add(str(exc))

    def raise_if_any(self) -> None:
        """Raise one :class:`ConfigError` carrying every recorded problem, if there is any."""
        if self.items:
            raise ConfigError(*self.items)
