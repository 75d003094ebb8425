"""rlcore plugin: the ``wandb`` experiment tracker (``trainer.logger=[..., wandb]``)."""

__version__ = "0.1.0"
