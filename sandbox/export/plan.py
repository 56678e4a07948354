"""An export plan: the framework settings an exporter writes and, row by row, why.

Every leaf of a scenario ends up in exactly one kind of row, so nothing is dropped silently
(:meth:`Plan.uncovered` lists the leaves no row mentions; the tests require it to be empty):

========================  ===================================================================
kind                      meaning
========================  ===================================================================
``as_is``                 scenario value written unchanged under the framework's key
``converted``             written after a unit or convention conversion (the formula is given)
``pinned``                framework key the exporter writes to fix a convention (no scenario
                          source: e.g. the correction switched off explicitly, one optimizer
                          step per trainer step)
``implicit``              the framework behaves this way with no key (same value, nothing to
                          write)
``setup``                 describes the user's own setup (group size, prompts per step, response
                          length, rollout workers); written where the framework has a key, to be
                          checked against the real cluster and data
``scale``                 scale-dependent (learning rate, gradient clip): written only when
                          given on the export command line, otherwise listed "set it for your
                          model"
``sandbox_only``          describes the simulation itself (toy task, delay models, seeds,
                          outputs): nothing to export, the GPU cluster replaces it
``no_equivalent``         the framework cannot express it; the row says what to do instead. An
                          export with such rows is refused unless ``allow_partial``
========================  ===================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

RowKind = Literal["as_is", "converted", "pinned", "implicit", "setup", "scale", "sandbox_only", "no_equivalent"]

ROW_KINDS: tuple[str, ...] = get_args(RowKind)


class ExportError(ValueError):
    """Bad input to an export (unknown framework or version, missing variant, unreadable run
    directory, ...): one line naming what was expected."""


class ExportRefused(RuntimeError):
    """The scenario uses settings the framework cannot express and ``allow_partial`` is off."""

    def __init__(self, framework: str, rows: list[Row]):
        self.framework = framework
        self.rows = rows
        names = ", ".join(f"{r.source} = {_short(r.value)}" for r in rows)
        super().__init__(
            f"{framework} has no equivalent for {len(rows)} setting(s): {names}. "
            "Re-run with --allow-partial to write the rest and list these in PROMOTION.md."
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Row:
    """One line of PROMOTION.md: a scenario field (``source``, dotted; empty for pinned keys) and
    what became of it in the framework (``target`` key and ``target_value``, None if not written)."""

    kind: RowKind
    source: str
    value: Any
    target: str | None
    target_value: Any
    note: str


_UNSET = object()


@dataclass
class ExportPlan:
    """Builder used by every exporter. ``settings`` holds the written framework keys in the order
    they were set (dotted keys, flag names or dataclass fields, as the framework spells them)."""

    framework: str
    version: str
    release: str
    target: str
    settings: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    # --- written keys ------------------------------------------------------------------------
    def _write(self, key: str, value: Any) -> None:
        if key in self.settings and self.settings[key] != value:
            raise AssertionError(
                f"exporter bug: {self.framework} key {key} written twice ({self.settings[key]!r} then {value!r})"
            )
        self.settings[key] = value

    def as_is(self, source: str, value: Any, target: str, note: str = "") -> None:
        self._write(target, value)
        self.rows.append(Row("as_is", source, value, target, value, note))

    def converted(self, source: str, value: Any, target: str, target_value: Any, note: str) -> None:
        self._write(target, target_value)
        self.rows.append(Row("converted", source, value, target, target_value, note))

    def pinned(self, target: str, target_value: Any, note: str) -> None:
        self._write(target, target_value)
        self.rows.append(Row("pinned", "", None, target, target_value, note))

    def setup(self, source: str, value: Any, note: str, target: str | None = None, target_value: Any = _UNSET) -> None:
        tv = value if target_value is _UNSET else target_value
        if target is not None:
            self._write(target, tv)
        self.rows.append(Row("setup", source, value, target, tv if target is not None else None, note))

    # --- not written -------------------------------------------------------------------------
    def implicit(self, source: str, value: Any, note: str) -> None:
        self.rows.append(Row("implicit", source, value, None, None, note))

    def scale(self, source: str, value: Any, target: str | None, given: Any, note: str) -> None:
        """A scale-dependent value: written (``given``) only when the user gave it for the GPU run."""
        if given is not None and target is not None:
            self._write(target, given)
            self.rows.append(Row("scale", source, value, target, given, f"given on the command line. {note}".strip()))
        else:
            self.rows.append(Row("scale", source, value, None, None, note))

    def sandbox_only(self, source: str, value: Any, note: str) -> None:
        self.rows.append(Row("sandbox_only", source, value, None, None, note))

    def no_equivalent(self, source: str, value: Any, note: str) -> None:
        """``note`` says why, then what the user can do instead (a fork, a sandbox component, nothing)."""
        self.rows.append(Row("no_equivalent", source, value, None, None, note))

    # --- queries -----------------------------------------------------------------------------
    def gaps(self) -> list[Row]:
        return [r for r in self.rows if r.kind == "no_equivalent"]

    def counts(self) -> dict[str, int]:
        return {k: sum(r.kind == k for r in self.rows) for k in ROW_KINDS}

    def uncovered(self, leaves: list[str]) -> list[str]:
        """Scenario leaves that no row names (a row's source covers itself and everything below it;
        a row may name several sources separated by ' + ')."""
        sources = {s.strip() for r in self.rows for s in r.source.split("+") if s.strip()}
        return [
            leaf
            for leaf in leaves
            if not any(leaf == s or leaf.startswith(s + ".") or leaf.startswith(s + "[") for s in sources)
        ]
