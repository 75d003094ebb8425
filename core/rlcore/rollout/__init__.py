"""Rollout: the built-in Hugging Face sampling engine and helpers shared by rollout engines."""
