"""rlcore plugin: ``rlcore report`` (plots and an HTML page of run directories) and the report and reward curve
that every run writes at its end."""

__version__ = "0.1.0"
