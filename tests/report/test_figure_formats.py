"""``run.figure_formats``: a run writes its figures in the formats it asks for (PNG only by
default, SVG beside it on request), the option is validated with the field named, and the PNG that
``sandbox.run.plots._save`` cuts from one Agg draw is byte for byte the PNG ``savefig`` writes for the
tight box moved onto whole pixels (and the tight box itself when something lies past the canvas)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.transforms import Bbox
from PIL import Image

from sandbox.run import plots
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import ScenarioError, validate_scenario

TINY = {
    "title": "tiny",
    "task": {"name": "quadratic", "dim": 4, "eig_min": 0.1, "eig_max": 1.0, "noise_std": 0.05, "replicas": 2},
    "system": {
        "num_workers": 2,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.1},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 8, "eval_every": 4},
}


PNG = {"compress_level": plots.PNG_COMPRESS_LEVEL}


def _pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"), dtype=float)


def _figure(outside: bool, layout_pad: float = 1.08):
    fig, ax = plots.plt.subplots(figsize=(5, 3), dpi=plots.DPI)
    ax.plot([0, 1, 2], [0, 1, 0.5], color=plots.PALETTE[0], label="variant")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("reward")
    ax.set_title("a title")
    ax.legend()
    fig.tight_layout(pad=layout_pad)
    if outside:  # text below the canvas: only savefig can draw it
        fig.text(0.5, -0.15, "a note below the figure", ha="center")
    return fig


@pytest.mark.parametrize("layout_pad", [1.08, 0.3])  # 0.3: the box's padding reaches past the canvas
def test_the_png_is_the_tight_box_savefig_writes_on_whole_pixels(tmp_path, layout_pad):
    fig = _figure(outside=False, layout_pad=layout_pad)
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plots.plt.rcParams["savefig.pad_inches"])
    dpi, canvas_height = fig.dpi, fig.canvas.get_width_height()[1]
    w, h = int(box.width * dpi + 1e-6), int(box.height * dpi + 1e-6)  # the size savefig gives the tight box
    left, bottom = round(box.x0 * dpi), canvas_height - round(canvas_height - box.y0 * dpi - h) - h
    assert abs(left - box.x0 * dpi) <= 0.5 + 1e-9 and abs(bottom - box.y0 * dpi) <= 0.5 + 1e-9  # half a pixel at most
    whole_pixels = Bbox.from_bounds(left / dpi, bottom / dpi, w / dpi, h / dpi)
    fig.savefig(tmp_path / "ref.png", dpi=plots.DPI, bbox_inches=whole_pixels, pil_kwargs=PNG)
    plots.plt.close(fig)
    plots._save(_figure(outside=False, layout_pad=layout_pad), tmp_path / "cut.png", ("png",))
    assert (tmp_path / "cut.png").read_bytes() == (tmp_path / "ref.png").read_bytes()
    assert not (tmp_path / "cut.svg").exists()


@pytest.mark.parametrize("outside, layout_pad", [(True, 1.08), (False, 0.0)])  # 0: the frame touches the border
def test_something_past_the_canvas_or_on_its_border_is_in_the_png(tmp_path, outside, layout_pad):
    reference = _figure(outside, layout_pad)
    reference.savefig(tmp_path / "ref.png", dpi=plots.DPI, bbox_inches="tight", pil_kwargs=PNG)
    plots.plt.close(reference)
    plots._save(_figure(outside, layout_pad), tmp_path / "cut.png", ("png",))
    assert (tmp_path / "cut.png").read_bytes() == (tmp_path / "ref.png").read_bytes()
    if outside:
        assert _pixels(tmp_path / "cut.png").shape[0] > 3 * plots.DPI  # taller than the canvas: the note is in


def test_save_writes_exactly_the_formats_asked_for(tmp_path):
    plots._save(_figure(False), tmp_path / "both.png", ("png", "svg"))
    assert (tmp_path / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "a title" in (tmp_path / "both.svg").read_text()
    plots._save(_figure(False), tmp_path / "svg_only.png", ("svg",))
    assert (tmp_path / "svg_only.svg").exists() and not (tmp_path / "svg_only.png").exists()
    with pytest.raises(ValueError, match="subset of"):
        plots._save(_figure(False), tmp_path / "x.png", ("pdf",))


def test_a_run_writes_png_only_unless_svg_is_asked_for(tmp_path):
    run_scenario(validate_scenario(TINY), tmp_path / "default")
    figures = tmp_path / "default" / "figures"
    assert sorted(p.name for p in figures.iterdir()) == [
        "diagnostics.png",
        "learning_curves.png",
        "staleness_hist.png",
        "timeline.png",
    ]
    both = dict(TINY, run=dict(TINY["run"], figure_formats=["png", "svg"]))
    run_scenario(validate_scenario(both), tmp_path / "both")
    names = {p.name for p in (tmp_path / "both" / "figures").iterdir()}
    assert {n.replace(".png", ".svg") for n in names if n.endswith(".png")} <= names
    assert len(names) == 8


def test_the_comparison_of_variants_is_written_in_every_format_a_variant_asks_for():
    png = SimpleNamespace(run=SimpleNamespace(figure_formats=["png"]))
    svg = SimpleNamespace(run=SimpleNamespace(figure_formats=["svg", "png"]))
    assert plots.run_formats([png, png]) == ["png"]
    assert plots.run_formats([png, svg]) == ["png", "svg"]


@pytest.mark.parametrize(
    "value, expected",
    [(["png", "png"], "at most once"), ([], "at least 1"), (["pdf"], "'png' or 'svg'"), ("png", "valid list")],
)
def test_bad_figure_formats_name_the_field(value, expected):
    with pytest.raises(ScenarioError, match=r"run\.figure_formats") as err:
        validate_scenario(dict(TINY, run=dict(TINY["run"], figure_formats=value)))
    assert expected in str(err.value)


def test_an_svg_is_the_same_bytes_every_time(tmp_path):
    """Without a fixed hash salt matplotlib gives SVG elements random ids, and it stamps a creation
    date: two saves of the same figure would differ (determinism of the run directory)."""
    plots._save(_figure(False), tmp_path / "a.png", ("svg",))
    plots._save(_figure(False), tmp_path / "b.png", ("svg",))
    first = (tmp_path / "a.svg").read_bytes()
    assert first == (tmp_path / "b.svg").read_bytes()
    assert b"<dc:date>" not in first
