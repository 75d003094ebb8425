"""rlcore: reinforcement-learning post-training for LLMs — a single-controller core plus plugins.

Plugin authors need only ``rlcore.hookimpl`` (``rlcore.hookspecs`` specifies every hook) and
:mod:`rlcore.api`.
"""

from rlcore.hookspecs import hookimpl, hookspec
from rlcore.plugins import get_component, load_plugins

__version__ = "0.1.0"
__all__ = ["hookimpl", "hookspec", "get_component", "load_plugins", "__version__"]
