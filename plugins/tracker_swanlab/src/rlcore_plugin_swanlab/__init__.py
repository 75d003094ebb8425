"""rlcore plugin: the ``swanlab`` experiment tracker (``trainer.logger=[..., swanlab]``)."""

__version__ = "0.1.0"
