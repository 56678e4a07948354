"""Validators that hold an exported configuration against each framework's own schema (CPU only).

Each ``validate_<framework>(files, wheel_dir)`` returns a list of problems (empty when the config is
accepted, reads back with the exported values and uses only allowed enum values). Recipes:
``docs/promotion.md`` ("How exports are validated").
"""
