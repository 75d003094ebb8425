"""rlcore plugin: the built-in run-health monitors (issue 44), on by default under ``trainer.monitors.*``.
:mod:`~rlcore_plugin_health.signals` holds their arithmetic, :mod:`~rlcore_plugin_health.monitors` the
monitors, :mod:`~rlcore_plugin_health.config` their settings; :mod:`~rlcore_plugin_health.loophole` is the
demo reward with a loophole (preset ``reward-loophole-cpu``) that the reward-hacking monitor catches."""

__version__ = "0.1.0"
