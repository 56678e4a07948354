"""Running checks, printing their table, and writing ``--report DIR`` (one figure per check and
a JSON summary)."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..outputs import atomic_write, write_json  # noqa: E402
from .base import CheckResult  # noqa: E402


def figure(result: CheckResult, path: Path) -> None:
    """Predicted values (line) against measured points with ±tolerance bars."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    series = sorted({p.series for p in result.points})
    for i, name in enumerate(series):
        pts = sorted((p for p in result.points if p.series == name), key=lambda p: p.x)
        x = np.array([p.x for p in pts], dtype=float)
        label = f" ({name})" if name else ""
        ax.plot(x, [p.predicted for p in pts], "-", color=f"C{i}", label=f"predicted (theory){label}")
        colors = ["tab:green" if p.ok else "tab:red" for p in pts]
        ax.errorbar(x, [p.measured for p in pts], yerr=[p.tolerance for p in pts], fmt="none", ecolor="gray", capsize=3)
        ax.scatter(x, [p.measured for p in pts], c=colors, zorder=3, label="measured ± tolerance" if i == 0 else None)
    x = np.array([p.x for p in result.points], dtype=float)
    if result.log_y and all(p.predicted > 0 and p.measured > 0 for p in result.points):
        ax.set_yscale("log")
    if result.log_x and (x > 0).all():
        ax.set_xscale("log")
    ax.set_xlabel(result.x_label)
    ax.set_ylabel(result.y_label)
    ax.set_title(f"{result.name}: {'PASS' if result.passed else 'FAIL'}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)


def run_checks(checks: dict, quick: bool, perturb: bool = False, on_done=None) -> list[tuple[CheckResult, float]]:
    out = []
    for check in checks.values():
        t = time.perf_counter()
        result = check.run(quick=quick, perturb=check.perturbation if perturb else 1.0)
        elapsed = time.perf_counter() - t
        out.append((result, elapsed))
        if on_done is not None:
            on_done(check, result, elapsed)
    return out


def write_report(results: list[tuple[CheckResult, float]], out: Path, quick: bool, perturb: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for result, _ in results:
        figure(result, out / f"{result.name}.png")
    write_json(
        out / "summary.json",
        {
            "quick": quick,
            "perturbed": perturb,
            "passed": all(r.passed for r, _ in results),
            "checks": [{**r.to_dict(), "seconds": round(s, 2)} for r, s in results],
        },
    )
