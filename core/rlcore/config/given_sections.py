"""Typed sections of a tree that may have problems, for the dry run's checks.

The dry run reports every problem of a config at once: each section's own (:meth:`Sections.from_tree`) and the
checks that read several sections (:mod:`rlcore.config.validate`). Those checks must still run when a section
they read has a problem of its own (``trainer.total_epochs=0`` must not hide ``rollout.do_sample=false``), so
they read :func:`given_section`: the section built from the tree's values, its own checks left to
:meth:`Section.from_tree`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from rlcore.config.problems import ConfigError
from rlcore.config.sections.base import Section, field_types, is_section, to_plain

_S = TypeVar("_S", bound=Section)


def given_section(cls: type[_S], config: DictConfig, path: str | None = None) -> _S | None:
    """The section ``cls`` at ``path`` (default :attr:`Section.PATH`) of the resolved ``config``, with the
    values as given even where they fail its checks (a bad choice, a count of 0); None when a key of it is
    missing (the loader adds every declared key, so only a hand-made tree lacks one)."""
    try:
        return cls.from_tree(config, path)
    except ConfigError:
        pass
    path = path or cls.PATH
    return _given_data(cls, to_plain(OmegaConf.select(config, path)), path)


def _given_data(cls: type[_S], data: Any, path: str) -> _S | None:
    """:func:`given_section` of the section at ``path`` whose keys are the plain ``data``
    (:meth:`Section.from_data`)."""
    if not isinstance(data, Mapping):
        return None
    hints = field_types(cls)
    section = object.__new__(cls)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind, key = hints[field.name], f"{path}.{field.name}"
        value: Any
        if is_section(kind):
            try:
                value = kind.from_data(data.get(field.name), key)
            except ConfigError:
                value = _given_data(kind, data.get(field.name), key)
            if value is None:
                return None
        elif field.name not in data:
            return None
        else:
            value = data[field.name]
        object.__setattr__(section, field.name, value)  # frozen: set as from_tree would, without the checks
    return section
