"""Metric tracking for a run: trackers (console, JSONL, swanlab, wandb, tensorboard, mlflow and plugins),
the progress bar, stage timers, reward plots and reports.

The submodules are imported only on the run path (or by ``rlcore report``): ``sinks``
(:class:`~rlcore.tracking.sinks.Tracker`, :func:`~rlcore.tracking.sinks.build_trackers`), ``external``
(what the optional trackers share: settings, run metadata, :func:`~rlcore.tracking.external.preflight_trackers`),
``swanlab_tracker``, ``wandb_tracker``, ``tensorboard_tracker``, ``mlflow_tracker``, ``progress``, ``timer``,
``plot`` and ``report``.
"""
