"""Prompt data: the verl-schema dataset, batch collation and the resumable loader (verl's GSM8K and Geometry3K
preparation is rlcore-plugin-tasks').

Submodules import torch and pyarrow; this package itself only defines :class:`DataError` so that a
``except DataError`` never pulls in heavy dependencies.
"""

from rlcore.errors import RLCoreError


class DataError(RLCoreError):
    """Bad or unreadable prompt data; the message names the file, the row and the key at fault."""


__all__ = ["DataError"]
