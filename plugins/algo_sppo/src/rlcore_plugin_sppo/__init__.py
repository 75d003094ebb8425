"""rlcore plugin: SPPO: the advantage estimator and policy loss ``sppo`` and the ``sppo`` preset."""

__version__ = "0.1.0"
