"""rlcore-plugin-{{ cookiecutter.hyphenated }}.

The entry point (group ``rlcore``) names :mod:`rlcore_plugin_{{ cookiecutter.underscored }}.hooks`; each component lives in the
module named after its kind and is imported only when a run uses it.
"""
