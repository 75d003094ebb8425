"""Bundled tasks: small verifiable problems that run on a CPU in minutes."""
