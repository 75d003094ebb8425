"""rlcore's plugin API, on the ground floor of the import graph: its version and the component kinds.

:data:`API_VERSION` is the version of the contract between rlcore and its plugins (the hooks, the
``register`` callback, the component kinds and the modules of :data:`rlcore.public_api.PUBLIC_MODULES`), not
of the rlcore distribution. A plugin declares the range it supports in its hooks module, ``RLCORE_API =
">=2,<3"`` (a PEP 440 specifier), and the loader refuses a plugin whose range excludes this version
(:mod:`rlcore.plugins`). ``core/rlcore/api/surface.json`` is a snapshot of the API surface stored with the
version it belongs to; ``python -m rlcore.api.surface`` checks or rewrites it, and ``docs/publishing.md``
says when to bump which part.

This package imports only the standard library (no torch): the loader and the CLI import it at start-up.
"""

from __future__ import annotations

from rlcore.api.kinds import COMPONENT_KINDS, KINDS, KindSpec

#: the plugin API's version (SemVer): major for a breaking change, minor for an addition, patch for a fix
API_VERSION = "2.5.0"
#: the module attribute of a plugin's hooks module that declares the API range it supports
API_RANGE_ATTRIBUTE = "RLCORE_API"

__all__ = ["API_RANGE_ATTRIBUTE", "API_VERSION", "COMPONENT_KINDS", "KINDS", "KindSpec"]
