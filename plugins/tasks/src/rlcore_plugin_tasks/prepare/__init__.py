"""Data preparation of verl's GSM8K and Geometry3K to verl-schema parquet (``rlcore data gsm8k`` and
``rlcore data geo3k``, :mod:`rlcore_plugin_tasks.commands`)."""
