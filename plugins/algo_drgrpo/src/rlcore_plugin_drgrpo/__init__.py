"""rlcore plugin: the ``drgrpo`` preset (``rlcore run --preset drgrpo``)."""

__version__ = "0.1.0"
