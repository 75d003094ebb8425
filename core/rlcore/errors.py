"""The base error type: every error rlcore raises on purpose derives from it, and the CLI prints its
message without a traceback."""


class RLCoreError(Exception):
    """An error with a message meant for the user (names the file, key, row or plugin at fault)."""
