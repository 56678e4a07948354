"""``sandbox plan``: capacity planning (throughput, lag and memory) and the rollout/train split."""
