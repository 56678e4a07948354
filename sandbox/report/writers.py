"""Optional metric writers: TensorBoard event files and Weights & Biases (offline mode).

Asked for in the scenario with ``run.writers = ["files", "tensorboard", "wandb"]``. The run
directory (``files``) is always written; the others are extra views of the same per-step metrics:

* ``tensorboard``: event files in ``<run>/tensorboard/`` (``tensorboard --logdir <run>``): every
  numeric metric as a scalar against the learner step, the summary under ``summary/``, the
  resolved scenario as text. Needs the ``tensorboard`` package (extra ``[tensorboard]``).
* ``wandb``: an offline W&B run in ``<run>/wandb/`` (upload later with ``wandb sync``): metrics
  logged per step, the scenario as the run config, the summary as the run summary. Needs the
  ``wandb`` package (extra ``[wandb]``); never touches the network. The W&B run is named after the
  scenario's ``title``, or when it has none after the run directory it ends up in (:func:`run_name`).

A writer that is asked for but not installed is an error raised before the simulation starts,
naming the install command.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

from ..outputs import is_transient_dir

WRITERS = ("files", "tensorboard", "wandb")
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


class WriterUnavailable(RuntimeError):
    """A writer was asked for in ``run.writers`` but its package is not installed."""


def install_hint(name: str) -> str:
    return f'pip install -c constraints-cpu.txt -e ".[{name}]"'


def check_writers(names) -> None:
    """Raise :class:`WriterUnavailable` if a requested writer's package is missing."""
    missing = [n for n in names if n in _PACKAGES and importlib.util.find_spec(_PACKAGES[n]) is None]
    if missing:
        lines = [f"run.writers asks for '{n}' but the {_PACKAGES[n]} package is not installed: {install_hint(n)}" for n in missing]
        raise WriterUnavailable("; ".join(lines) + " (or remove it from run.writers)")


def _scalars(row: dict) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k in ("step",) or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        v = float(v)
        if math.isfinite(v):
            out[k] = v
    return out


def _summary_scalars(summary: dict) -> dict[str, float]:
    return {k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def write_tensorboard(result, out: Path) -> Path:
    """Event files under ``out/tensorboard``."""
    check_writers(["tensorboard"])
    from torch.utils.tensorboard import SummaryWriter

    from ..scenario import dump_scenario

    log_dir = Path(out) / "tensorboard"
    writer = SummaryWriter(log_dir=str(log_dir))
    try:
        for row in result.metrics.to_dict("records"):
            step = int(row.get("step", 0))
            for k, v in _scalars(row).items():
                writer.add_scalar(k, v, global_step=step)
        for k, v in _summary_scalars(result.summary).items():
            writer.add_scalar(f"summary/{k}", v, global_step=0)
        writer.add_text("scenario", "```toml\n" + dump_scenario(result.scenario) + "\n```", global_step=0)
        writer.add_text("status", str(result.status), global_step=0)
    finally:
        writer.close()
    return log_dir


def run_name(scenario, out: str | Path) -> str:
    """The name a run shows in W&B: the scenario's ``title``, else the name of the directory the run
    ends up in. Runs are written into staging directories (``<dir>/.staging-*``, possibly nested: a
    run of ``sandbox run`` inside the command's own stage) that are moved into place once complete
    (:class:`sandbox.outputs.StagedDir`), so those path components are skipped."""
    if scenario.title:
        return scenario.title
    parts = [p for p in Path(out).absolute().parts if not is_transient_dir(p)]
    return parts[-1] if parts and parts[-1] != Path(parts[-1]).anchor else "run"


def write_wandb(result, out: Path, project: str = "async-rl-sandbox") -> Path:
    """An offline W&B run under ``out/wandb`` (``wandb sync`` uploads it later)."""
    check_writers(["wandb"])
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    scn = result.scenario
    run = wandb.init(
        mode="offline",
        dir=str(out),
        project=project,
        name=run_name(scn, out),
        config=scn.model_dump(mode="json", exclude={"variants"}),
        reinit=True,
    )
    try:
        for row in result.metrics.to_dict("records"):
            run.log(_scalars(row), step=int(row.get("step", 0)))
        run.summary.update({**_summary_scalars(result.summary), "status": result.status})
    finally:
        run.finish()
    return Path(out) / "wandb"


def write_extra(result, out: Path) -> list[Path]:
    """Run every writer the scenario asks for besides the run directory itself."""
    written = []
    for name in dict.fromkeys(result.scenario.run.writers):
        if name == "tensorboard":
            written.append(write_tensorboard(result, out))
        elif name == "wandb":
            written.append(write_wandb(result, out))
    return written


__all__ = ["WRITERS", "WriterUnavailable", "check_writers", "install_hint", "run_name", "write_extra", "write_tensorboard", "write_wandb"]
