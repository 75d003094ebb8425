"""rlcore plugin: profiling of chosen training steps (verl's ``global_profiler`` and the roles' ``profiler``
sections). :mod:`~rlcore_plugin_profiler.plan` reads the config on the controller and says which steps and
ranks to profile; :mod:`~rlcore_plugin_profiler.worker` records and writes the traces on the workers;
:mod:`~rlcore_plugin_profiler.profiler` is what the core calls (:mod:`rlcore.api.profiling`)."""

__version__ = "0.1.0"
