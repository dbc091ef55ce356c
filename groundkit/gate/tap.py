"""TAP output in the pgTAP style, and the counts the gate's JSON summary reports."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from pydantic import BaseModel, ConfigDict


class Counts(BaseModel):
    """What went wrong, by kind. Every kind except ``bad_inputs_tried`` must be zero to pass."""

    model_config = ConfigDict(extra="forbid")

    leaks: int = 0  # a hit the reader may not see
    resurrections: int = 0  # a tombstoned object came back
    missing: int = 0  # a visible object was not found
    stale: int = 0  # a hit at an old version of its object
    wrong_status: int = 0  # a write returned a status the rules do not give
    bad_inputs_failed: int = 0  # bad input with an unclear error, or that changed something
    integrity: int = 0  # derived state that is not a function of the log, partial writes
    privileges: int = 0  # a privilege that should (not) be there

    def add(self, other: Counts) -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int
    ok: bool
    description: str
    section: str
    diagnostics: tuple[str, ...] = ()
    todo: str | None = None
    skip: str | None = None


class Tap:
    """Numbered TAP lines as checks complete; ``not ok`` lines carry ``#`` diagnostics.

    A check marked ``todo`` is a known, reported problem: it is printed ``not ok … # TODO``
    and does not fail the run (TAP semantics); it is listed in the summary.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.results: list[CheckResult] = []
        self.counts = Counts()
        self.section = "gate"
        self.tallies: dict[str, int] = {}  # counts that are not failures, e.g. bad inputs tried

    def tally(self, name: str, n: int = 1) -> None:
        self.tallies[name] = self.tallies.get(name, 0) + n

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def header(self) -> None:
        self._write("TAP version 13")

    def comment(self, text: str) -> None:
        for line in text.splitlines() or [""]:
            self._write(f"# {line}")

    def check(self, ok: bool, description: str, diagnostics: Iterable[str] = (), *,
              todo: str | None = None, counts: Counts | None = None) -> bool:
        diag = tuple(diagnostics)
        number = len(self.results) + 1
        result = CheckResult(number=number, ok=ok, description=description, section=self.section,
                             diagnostics=diag, todo=todo)
        self.results.append(result)
        if counts is not None and not ok and todo is None:
            self.counts.add(counts)
        directive = f" # TODO {todo}" if todo else ""
        self._write(f"{'ok' if ok else 'not ok'} {number} - {description}{directive}")
        if not ok:
            self._write(f'#     Failed{" (TODO)" if todo else ""} test {number}: "{description}"')
            for line in diag[:40]:
                self._write(f"#         {line}")
            if len(diag) > 40:
                self._write(f"#         ... and {len(diag) - 40} more")
        return ok

    def skip(self, description: str, reason: str) -> None:
        number = len(self.results) + 1
        self.results.append(CheckResult(number=number, ok=True, description=description, section=self.section,
                                        skip=reason))
        self._write(f"ok {number} - {description} # SKIP {reason}")

    def plan(self) -> None:
        self._write(f"1..{len(self.results)}")

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok and r.todo is None]
