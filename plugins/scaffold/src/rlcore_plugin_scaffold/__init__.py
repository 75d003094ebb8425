"""rlcore plugin: ``rlcore new plugin``, which scaffolds a plugin distribution ``rlcore-plugin-<name>`` from the
cookiecutter template this package ships (:mod:`rlcore_plugin_scaffold.scaffold`, ``templates/plugin``)."""

__version__ = "0.1.0"
