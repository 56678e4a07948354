"""examples/plain_torch_loop.py: the method library in a plain torch loop prints finite diagnostics
(it once read a metric the optimizer never returns and printed ``cos_prev +nan`` on every line)."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plain_torch_loop.py"


def test_plain_torch_loop_prints_finite_gac_cosines(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("plain_torch_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "STEPS", 26)
    module.main()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert [int(line.split()[1]) for line in lines] == [0, 25]
    assert "nan" not in " ".join(lines)
    assert "no reference gradient yet" in lines[0]
    cos = float(re.search(r"gac cos ([+-][0-9.]+)", lines[1]).group(1))
    assert math.isfinite(cos) and -1.0 <= cos <= 1.0
