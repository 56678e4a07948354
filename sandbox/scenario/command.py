"""The ``sandbox list, scenario`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base.errors import ScenarioError
from sandbox.cli_support import _fail, _starting, console


def scenario_command(
    scenario: Path | None = typer.Argument(
        None, help="Scenario TOML, or the name of a shipped scenario such as max_lag (default: the shipped quickstart)."
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."
    ),
    variant: str | None = typer.Option(
        None, "--variant", metavar="NAME", help="Print this variant resolved instead of the whole scenario."
    ),
    reference: bool = typer.Option(
        False, "--reference", help="Print the reference of every scenario key (markdown) and exit."
    ),
):
    """Print a scenario resolved (TOML, every default explicit, --set applied: what `sandbox run` would
    run; a scenario with variants whole, its [variants] tables included, so the output re-runs as is;
    --variant one variant resolved), or with --reference the reference of every key: type, default,
    allowed values, description.

    docs/scenario-reference.md is this reference; regenerate it with
    `sandbox scenario --reference > docs/scenario-reference.md`.
    """
    with _starting():
        from sandbox.scenario.api import DEFAULT_SCENARIO, dump_scenario, load_scenario, variant_scenarios

    if reference:
        from sandbox.scenario.reference import reference_markdown

        sys.stdout.write(reference_markdown())
        return
    try:
        scn, raw = load_scenario(scenario or DEFAULT_SCENARIO, set_)
        variants = variant_scenarios(scn, raw)
        if variant is not None and variant not in variants:
            names = ", ".join(n for n in variants if n) or "none"
            raise ScenarioError(
                [f"--variant: unknown variant {variant!r}; this scenario's variants: {names}"], "option"
            )
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    if variant is None and scn.variants:
        names = ", ".join(scn.variants)
        sys.stdout.write(
            f"# {len(scn.variants)} variants ({names}), each the base below with its [variants] overrides;\n"
            f"# `sandbox scenario {scenario or 'quickstart'} --variant NAME` prints one resolved.\n"
        )
        sys.stdout.write(dump_scenario(scn, variants=True))
        return
    sys.stdout.write(dump_scenario(variants[variant] if variant is not None else scn))


def list_components(
    family: str | None = typer.Argument(
        None, help="objective, correction, stabilizer, delay, staleness, task or engine (default: all)."
    ),
):
    """List what a scenario can be assembled from: every registered objective, correction, stabilizer,
    delay model, staleness control, task and rollout engine, with the field that selects it and its docs entry."""
    from sandbox.components import FAMILIES

    if family is not None and family not in FAMILIES:
        _fail(f"FAMILY: unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    for name, fam in FAMILIES.items():
        if family is not None and name != family:
            continue
        table = Table(title=f"{name} ({fam.field})", title_justify="left")
        table.add_column("name", style="bold")
        table.add_column("what it is")
        table.add_column("docs")
        for entry in fam.registry.entries():
            table.add_row(entry.name, escape(entry.summary), f"{fam.docs}#{entry.name}")
        console.print(table)
