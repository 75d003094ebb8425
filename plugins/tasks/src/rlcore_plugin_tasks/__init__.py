"""rlcore plugin: the bundled CPU tasks (presets ``arith-cpu``, ``arith-chain-cpu``, ``arith-tools-cpu``,
``shapes-vl-cpu`` and their scorers ``rlcore/...``): small verifiable problems that run on a CPU in minutes, from
shipped warm-started models; and verl's GSM8K, MATH and Geometry3K task parts (data preparation, scorers, tools,
interaction)."""

__version__ = "0.1.0"
