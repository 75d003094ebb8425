"""``python -m rlcore`` runs the command line."""

from rlcore.cli import main

main()
