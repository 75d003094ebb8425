"""The built-in plugins. Each module registers lazy targets through the same hooks as external plugins,
so ``rlcore plugins --all`` lists them and ``RLCORE_DISABLE_PLUGINS`` can switch them off."""
