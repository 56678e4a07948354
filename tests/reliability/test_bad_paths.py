"""Paths that used to be found bad late or never (issue 42, findings 6 and 8): ``check --report`` at
an impossible path is refused before any check runs; ``sandbox report`` on a directory that is not a
run's (``/``) stops after a bounded walk instead of reading the whole file system."""

from __future__ import annotations

from typer.testing import CliRunner

from sandbox.cli import app


def test_check_report_at_an_impossible_path_is_refused_before_the_checks(tmp_path, monkeypatch):
    import sandbox.checks.report as report

    def ran(*a, **k):
        raise AssertionError("the checks ran before --report was validated")

    monkeypatch.setattr(report, "run_checks", ran)
    (tmp_path / "file").write_text("x")
    for bad in ("/proc/x", str(tmp_path / "file")):
        res = CliRunner().invoke(app, ["check", "--quick", "--report", bad])
        assert res.exit_code == 2, res.output
        assert "--report" in res.output and res.exception is None or isinstance(res.exception, SystemExit)


def test_report_walks_a_bounded_part_of_a_directory(tmp_path, monkeypatch):
    import sandbox.report.html as html

    monkeypatch.setattr(html, "REPORT_MAX_DIRS", 50)
    for i in range(60):
        (tmp_path / "tree" / f"d{i}").mkdir(parents=True)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "tree")])
    assert res.exit_code == 2, res.output
    assert "over 50 directories" in " ".join(res.output.split())
    deep = tmp_path / "deep" / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (deep / "summary.json").write_text("{}")
    assert not html._summary_dirs(tmp_path / "deep")  # five levels down: not looked for
