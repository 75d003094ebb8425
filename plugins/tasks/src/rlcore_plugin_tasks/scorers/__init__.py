"""verl's rule-based reward scorers for GSM8K, MATH and Geometry3K, registered by ``data_source`` (see
:func:`rlcore_plugin_tasks.hooks.register_reward_scorers`)."""
