"""The modules a plugin may import: rlcore's declared public API.

A plugin imports ``rlcore`` (``hookimpl``, ``hookspec``, ``get_component``, ``load_plugins``, ``__version__``)
and ``rlcore.api`` (every other public name, listed and documented there and in ``docs/api.md``), and may read
``rlcore.hookspecs`` (the hook specifications, which ``docs/plugins.md`` renders); its tests use
the test kit, ``rlcore_testkit`` (the ``rlcore-testkit`` distribution, no part of rlcore). Everything else of
rlcore (the registry, the controller, the workers, the config loader, the built-in implementations) is private
and may change in any release, the way pytest's ``_pytest`` package is private behind the ``pytest`` namespace. ``tests/test_boundaries.py`` checks that every bundled plugin and the
plugin template import nothing else from rlcore, and ``docs/publishing.md`` explains the compatibility promise.
"""

from __future__ import annotations

#: public modules; an entry ending in ``.*`` makes every submodule of that package public too
PUBLIC_MODULES: tuple[str, ...] = (
    "rlcore",  # hookimpl, hookspec, get_component, load_plugins, __version__
    "rlcore.api",  # every other public name (rlcore/api/__init__.py)
    "rlcore.hookspecs",  # the hook specifications: each hook's signature, documentation and example
)


def is_public(module: str) -> bool:
    """Whether a plugin may import ``module`` (see :data:`PUBLIC_MODULES`)."""
    for entry in PUBLIC_MODULES:
        if entry.endswith(".*"):
            package = entry[:-2]
            if module == package or module.startswith(package + "."):
                return True
        elif module == entry:
            return True
    return False
