"""The public names of :mod:`sandbox.scenario` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from sandbox.scenario.load import (
    DEFAULT_SCENARIO,
    ScenarioError,
    dump_scenario,
    load_scenario,
    parse_overrides,
    validate_scenario,
    variant_scenarios,
)
from sandbox.scenario.model import AlgorithmConfig, RunConfig, Scenario

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
