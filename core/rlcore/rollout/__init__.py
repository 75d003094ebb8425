"""What every rollout engine shares: sampling settings and seeds, the token-list engine base, the rollout Batch
layout, weight checks and buckets (the HF engine itself is the distribution ``rlcore-plugin-hf``)."""
