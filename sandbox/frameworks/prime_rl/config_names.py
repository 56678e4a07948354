"""Values of the prime-rl config that its exporter and importer share."""

OFF_MASK = 1.0
"""A mask threshold that never masks: |π_θ − μ| ≤ 1, so thresholds of 1 never mask a token."""
