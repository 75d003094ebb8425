"""Metric tracking for a run: trackers (console, JSONL and plugins), the progress bar, stage timers and
reward plots.

The submodules are imported only on the run path: ``sinks`` (:class:`~rlcore.tracking.sinks.Tracker`,
:func:`~rlcore.tracking.sinks.build_trackers`), ``progress``, ``timer`` and ``plot``.
"""
