"""rlcore plugin: DAPO's overlong reward shaping (``reward_model.reward_manager=dapo``), dynamic sampling
(``algorithm.filter_groups``, batch filter ``dapo-groups``) and the ``dapo`` preset."""

__version__ = "0.1.0"
