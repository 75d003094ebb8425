"""The plugin API's version, on the ground floor of the import graph (the loader and the CLI read it at start-up).

:data:`API_VERSION` versions the contract between rlcore and its plugins: the hooks, the ``register``
callback, the component kinds and the names of :mod:`rlcore.api`. ``docs/publishing.md`` says when to bump
which part; ``python -m rlcore_testkit.surface`` checks the stored snapshot against it.
"""

#: the plugin API's version (SemVer): major for a breaking change, minor for an addition, patch for a fix
API_VERSION = "3.6.0"
#: the module attribute of a plugin's hooks module that declares the API range it supports
API_RANGE_ATTRIBUTE = "RLCORE_API"
