"""PRIME (Process Reinforcement through IMplicit rEwards) for rlcore."""
