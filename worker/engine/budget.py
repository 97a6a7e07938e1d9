"""What one request may cost: one budget, accounted where the work happens.

Every batch (its preflight, and a dry run's review) and every read runs under one ``Budget`` made from
``Costs``. The parsers, matchers and readers charge it as they go:

- **CPU time** (``cpu_seconds``): the thread's CPU since the budget started, checked at every safe point
  (between pages, between matches, every few thousand YAML nodes, after each parse);
- **bytes scanned** (``scan_bytes``): text handed to RE2, to the markdown parser, to the YAML parser;
- **one call's worst case**, checked *before* the call, because a call into RE2 or markdown-it cannot be
  stopped halfway: an RE2 search costs at most its program size times the bytes it scans
  (``regex_work``; RE2 falls back to its NFA when its DFA runs out of memory, at roughly 10 ns per byte
  and instruction), one markdown parse takes at most ``parse_lines`` lines, one YAML block at most
  ``yaml_bytes`` bytes;
- **nodes built** (``yaml_nodes``, ``yaml_depth``): front matter values as they are expanded, so a chain
  of YAML aliases (``&a [*a, *a, ...]``) stops at the cap instead of growing tenfold a level;
- **output** (``output_bytes``): what an answer carries.

Crossing any of them raises ``OverBudget`` with a message a person can act on; the engine turns it into
``BATCH_TOO_COSTLY`` with the edit's index, the reads into ``QUERY_TOO_COSTLY``. Nothing is written or
kept by a refused request.

The budget in force is a context variable (``active``/``current``), so code deep in the markdown toolkit
charges the request it serves without every signature carrying it; code running with none in force gets
a fresh default budget per call, so nothing is ever unbounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from worker.schema.edits import Costs

_MB = 1024 * 1024
T = TypeVar("T")

__all__ = ["Budget", "Costs", "OverBudget", "Ticker", "active", "checked", "current"]


class OverBudget(Exception):
    """A request crossed one of its caps; ``message`` says which and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _size(count: int) -> str:
    return f"{count / _MB:.1f} MB" if count >= _MB else f"{count / 1024:.0f} KB"


class Budget:
    """The running account of one request against its ``Costs``."""

    def __init__(self, costs: Costs | None = None, clock: Callable[[], float] = time.thread_time) -> None:
        self.costs = costs or Costs()
        self._clock = clock
        self._thread = threading.get_ident()
        self._started = clock()
        self._carried = 0.0
        self._last = 0.0
        self.scanned = 0
        self.output = 0

    def cpu(self) -> float:
        """CPU seconds spent so far. A budget carried to another thread keeps what it had measured and
        counts on there (thread CPU time is per thread)."""
        thread = threading.get_ident()
        if thread != self._thread:
            self._carried += self._last
            self._thread = thread
            self._started = self._clock()
        self._last = self._clock() - self._started
        return self._carried + self._last

    def check(self, where: str) -> None:
        """``OverBudget`` when the CPU time is spent."""
        if self.cpu() > self.costs.cpu_seconds:
            raise OverBudget(
                f"{where} took over {self.costs.cpu_seconds:g} s of CPU, this request's budget; "
                "ask for less at once (a narrower prefix, fewer pages, a simpler pattern)"
            )

    def scan(self, count: int, where: str) -> None:
        """Charge ``count`` bytes of text about to be scanned."""
        self.scanned += count
        if self.scanned > self.costs.scan_bytes:
            raise OverBudget(
                f"{where}: this request would scan over {_size(self.costs.scan_bytes)} of text, its "
                "budget; narrow it (a prefix, fewer pages)"
            )
        self.check(where)

    def regex(self, program_size: int, count: int, where: str) -> None:
        """Before an RE2 search of (at most) ``count`` bytes with a program of ``program_size``
        instructions: refuse it when its worst case is over ``regex_work``. The caller charges the bytes
        the search went over (``scan``) once it has run."""
        work = program_size * count
        if work > self.costs.regex_work:
            most = max(self.costs.regex_work // max(program_size, 1), 1)
            raise OverBudget(
                f"{where}: the pattern compiles to {program_size} RE2 instructions, so one search may scan "
                f"at most {_size(most)}, and this text is {_size(count)}; use a simpler pattern (counted "
                "repetitions like [ab]{1000} make it large) or a literal 'old'"
            )
        self.check(where)

    def parse(self, lines: int, count: int, where: str) -> None:
        """Before a markdown parse of ``lines`` lines (``count`` bytes)."""
        if lines > self.costs.parse_lines:
            raise OverBudget(
                f"{where} has {lines} lines; pages of over {self.costs.parse_lines} lines are not parsed "
                "as markdown (their links and sections cannot be read or edited); split the page or use "
                "overwrite"
            )
        self.scan(count, where)

    def yaml(self, count: int, where: str) -> None:
        """Before a YAML parse of ``count`` bytes."""
        if count > self.costs.yaml_bytes:
            raise OverBudget(
                f"{where}: its front matter is {_size(count)}, over the {_size(self.costs.yaml_bytes)} "
                "this service parses; shorten it with replace or overwrite"
            )
        self.scan(count, where)

    def emit(self, count: int, where: str) -> None:
        """Charge ``count`` bytes of answer."""
        self.output += count
        if self.output > self.costs.output_bytes:
            raise OverBudget(
                f"{where}: the answer would be over {_size(self.costs.output_bytes)}; ask for less at once"
            )


_ACTIVE: ContextVar[Budget | None] = ContextVar("wikiq_budget", default=None)


@contextmanager
def active(budget: Budget) -> Iterator[Budget]:
    """Make ``budget`` the one in force for the code run inside."""
    token = _ACTIVE.set(budget)
    try:
        yield budget
    finally:
        _ACTIVE.reset(token)


def current() -> Budget:
    """The budget in force, or a fresh default one when none is (so no call is ever unbounded)."""
    found = _ACTIVE.get()
    return found if found is not None else Budget()


def checked(items: Iterable[T], where: str, every: int = 256) -> Iterator[T]:
    """``items``, with the CPU time of the budget in force checked every ``every`` of them: a loop over
    many links, lines or pages is a safe point to stop at."""
    spend = current()
    for number, item in enumerate(items, 1):
        if not number % every:
            spend.check(where)
        yield item


class Ticker:
    """A loop's safe point: ``tick()`` on every step checks the CPU time of the budget in force once in
    ``every`` steps (a loop over one huge line has no better place to stop)."""

    def __init__(self, where: str, every: int = 1024) -> None:
        self.spend = current()
        self.where = where
        self.every = every
        self.left = every

    def tick(self) -> None:
        """One step of the loop."""
        self.left -= 1
        if not self.left:
            self.left = self.every
            self.spend.check(self.where)
