"""rlcore plugin: the ``tensorboard`` experiment tracker (``trainer.logger=[..., tensorboard]``)."""

__version__ = "0.1.0"
