"""Scenario files: typed, validated, overridable experiment descriptions."""
