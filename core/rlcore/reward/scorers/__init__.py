"""Rule-based reward scorers, registered by ``data_source`` (see :mod:`rlcore.builtin.rewards`)."""
