"""Metric tracking for a run: the console and JSONL trackers, what tracker plugins build on, the progress
bar, stage timers, reward plots and reports.

The submodules are imported only on the run path (or by ``rlcore report``): ``sinks``
(:class:`~rlcore.tracking.sinks.Tracker`, :func:`~rlcore.tracking.sinks.build_trackers`), ``external``
(:class:`~rlcore.tracking.external.ExternalTracker`, the base of the swanlab, wandb, tensorboard and mlflow
plugins: settings, run metadata, :func:`~rlcore.tracking.external.preflight_trackers`), ``progress``,
``timer``, ``plot`` and ``report``.
"""
