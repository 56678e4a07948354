"""Print (or write) the ``system.generation_time`` of a scenario in ``scenarios/published/``.

The values are the exact group-time quantiles of :func:`sandbox.claims.published.generation_quantiles`
for the scenario's response-length model (``Published.lengths`` in ``sandbox/claims/published.py``;
docs/claims.md, section published_speedups), rounded to 0.1 s. The median group length and the mean
response length that the scenario's description quotes go to stderr.

    python tools/published_generation.py areal_fully_async          # print the TOML line
    python tools/published_generation.py --write                    # rewrite every published scenario
"""

from __future__ import annotations

import argparse
import re
import sys

from sandbox.claims.published import ROOT, SETUPS, Published

BLOCK = re.compile(r'generation_time = \{ kind = "empirical", values = \[.*?\] \}', re.S)
WIDTH = 95


def _number(v: float) -> str:
    return f"{v:.1f}".removesuffix(".0")


def toml_line(setup: Published) -> str:
    """``generation_time = { kind = "empirical", values = [...] }``, wrapped at about 95 characters."""
    lines, line = [], " "
    for text in (_number(v) for v in setup.lengths.rounded()):
        if len(line) + len(text) + 2 > WIDTH:
            lines.append(line.rstrip())
            line = " "
        line += f" {text},"
    lines.append(line.rstrip().removesuffix(","))
    return 'generation_time = { kind = "empirical", values = [\n' + "\n".join(lines) + "\n] }"


def summary(setup: Published) -> str:
    n = setup.lengths
    return (
        f"{setup.scenario}: median group {n.median_group_tokens():.0f} tokens, "
        f"mean response {n.mean_response_tokens():.0f} tokens"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="scenario names (file stems); none = all")
    parser.add_argument("--write", action="store_true", help="replace the generation_time in the scenario files")
    args = parser.parse_args(argv)
    by_name = {p.scenario: p for p in SETUPS}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}; expected one of {', '.join(by_name)}")
    for name in args.names or list(by_name):
        setup = by_name[name]
        line = toml_line(setup)
        print(summary(setup), file=sys.stderr)
        if not args.write:
            print(line)
            continue
        path = ROOT / f"{name}.toml"
        text = path.read_text()
        if len(BLOCK.findall(text)) != 1:
            raise SystemExit(f"{path}: expected exactly one empirical generation_time block")
        path.write_text(BLOCK.sub(lambda _: line, text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
