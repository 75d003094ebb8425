"""rlcore plugin: ``rlcore sft``, supervised fine-tuning on rlcore's training engines, workers and checkpoints.

:mod:`rlcore_plugin_sft.config` (verl's SFT keys, lowered to the engine config), :mod:`rlcore_plugin_sft.dataset`
(single- and multi-turn chat data, the loss mask), :mod:`rlcore_plugin_sft.worker` (the supervised step on the
actor worker), :mod:`rlcore_plugin_sft.trainer` (the loop), :mod:`rlcore_plugin_sft.run` (the run), :mod:`rlcore_plugin_sft.commands` (``rlcore sft`` and ``rlcore data
arith-sft``) and :mod:`rlcore_plugin_sft.arith` (the bundled task). docs/sft.md is the user guide.
"""

__version__ = "0.1.0"
