"""The typed config sections, one module per part of the tree; :mod:`rlcore.config.schema` assembles them
into :class:`~rlcore.config.schema.Sections`."""
