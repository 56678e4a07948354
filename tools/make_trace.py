"""Write a synthetic timing trace in the format of the ``trace`` delay model (``docs/system.md#trace``).

Each row is one measured job: ``step`` (the learner step it belongs to), ``tokens`` (its work: the
decode steps of a generation call, or a learner step's batch tokens), ``prompt_tokens`` and
``seconds`` (the duration), drawn from a parametric description:

    tokens  ~ LogNormal(log(median_tokens · (1 + growth · step / steps)), length_sigma), rounded, >= 1
    seconds = (prefill + per_token · tokens) · exp(jitter · z − jitter² / 2),   z ~ N(0, 1)

so response lengths grow by ``growth`` (a fraction) over ``steps`` learner steps, as they do during
RL training, and a ``mode = "fit"`` trace model recovers ``prefill``, ``per_token`` and ``jitter``.
The file type follows the extension: ``.csv`` (with a header) or ``.jsonl``. Seeded: the same
arguments write the same file.

    python tools/make_trace.py traces/gen.csv --rows 400 --prefill 0.3 --per-token 0.004 --jitter 0.1
    python tools/make_trace.py traces/train.jsonl --rows 100 --median-tokens 60000 --per-token 2e-5
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np


def make_rows(
    rows: int,
    steps: int,
    median_tokens: float,
    length_sigma: float,
    growth: float,
    prompt_tokens: int,
    prefill: float,
    per_token: float,
    jitter: float,
    seed: int,
) -> list[dict]:
    """The trace rows (see the module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        step = int(i * steps / rows)
        median = median_tokens * (1 + growth * step / max(steps, 1))
        tokens = max(1, int(round(median * math.exp(length_sigma * rng.standard_normal()))))
        noise = math.exp(jitter * rng.standard_normal() - jitter**2 / 2) if jitter > 0 else 1.0
        out.append(
            {
                "step": step,
                "prompt_tokens": prompt_tokens,
                "tokens": tokens,
                "seconds": round((prefill + per_token * tokens) * noise, 6),
            }
        )
    return out


def write_trace(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as CSV or JSONL (by the extension of ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif suffix in (".jsonl", ".ndjson"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        raise SystemExit(f"{path}: expected a .csv or .jsonl file name")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="Output file (.csv or .jsonl).")
    p.add_argument("--rows", type=int, default=400, help="Rows (jobs) to write (default 400).")
    p.add_argument("--steps", type=int, default=100, help="Learner steps the rows are spread over (default 100).")
    p.add_argument("--median-tokens", type=float, default=400.0, help="Median tokens at step 0 (default 400).")
    p.add_argument("--length-sigma", type=float, default=0.5, help="Log-normal sigma of the lengths (default 0.5).")
    p.add_argument(
        "--growth", type=float, default=0.0, help="Relative growth of the median over the steps (default 0)."
    )
    p.add_argument("--prompt-tokens", type=int, default=256, help="Prompt tokens of every row (default 256).")
    p.add_argument(
        "--prefill", type=float, default=0.3, help="Seconds per job independent of its length (default 0.3)."
    )
    p.add_argument("--per-token", type=float, default=0.004, help="Seconds per token (default 0.004).")
    p.add_argument(
        "--jitter", type=float, default=0.1, help="Log-normal sigma of the multiplicative noise (default 0.1)."
    )
    p.add_argument("--seed", type=int, default=0, help="Random seed (default 0).")
    a = p.parse_args(argv)
    if (
        a.rows < 1
        or a.steps < 1
        or a.median_tokens <= 0
        or min(a.length_sigma, a.growth, a.prefill, a.per_token, a.jitter) < 0
    ):
        raise SystemExit("--rows, --steps and --median-tokens must be positive; the other numbers >= 0")
    rows = make_rows(
        a.rows,
        a.steps,
        a.median_tokens,
        a.length_sigma,
        a.growth,
        a.prompt_tokens,
        a.prefill,
        a.per_token,
        a.jitter,
        a.seed,
    )
    write_trace(a.out, rows)
    print(f"{a.out}: {len(rows)} rows")


if __name__ == "__main__":
    main()
