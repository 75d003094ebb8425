"""Profiling of chosen training steps: :mod:`~rlcore.profiling.plan` reads the config on the controller and says
which steps and ranks to profile; :mod:`~rlcore.profiling.worker` records and writes the traces on the workers."""
