"""rlcore plugin: the ``mlflow`` experiment tracker (``trainer.logger=[..., mlflow]``)."""

__version__ = "0.1.0"
