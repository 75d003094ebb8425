"""``rlcore sft``: supervised fine-tuning on rlcore's training engines, workers and checkpoints.

:mod:`rlcore.sft.config` (verl's SFT keys, lowered to the engine config), :mod:`rlcore.sft.dataset`
(single- and multi-turn chat data, the loss mask), :mod:`rlcore.sft.worker` (the supervised step on the
actor worker), :mod:`rlcore.sft.trainer` (the loop), :mod:`rlcore.sft.run` (the command) and
:mod:`rlcore.sft.arith` (the bundled task). docs/sft.md is the user guide.
"""
