"""Scenario files: typed, validated, overridable experiment descriptions."""

from .load import (
    DEFAULT_SCENARIO,
    ScenarioError,
    dump_scenario,
    load_scenario,
    parse_overrides,
    validate_scenario,
    variant_scenarios,
)
from .model import AlgorithmConfig, RunConfig, Scenario

__all__ = [
    "DEFAULT_SCENARIO",
    "ScenarioError",
    "dump_scenario",
    "load_scenario",
    "parse_overrides",
    "validate_scenario",
    "variant_scenarios",
    "AlgorithmConfig",
    "RunConfig",
    "Scenario",
]
