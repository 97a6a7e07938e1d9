"""Bounds a caller may put on the toolkit's work: the exceptions raised when one is reached.

The toolkit itself has no limits (it is given a page and keeps every byte it does not change); the
engine passes ``max_size`` and ``stop`` where one edit could build a huge result or run long, and turns
these exceptions into its own refusals with the failing edit's index.
"""

from __future__ import annotations


class TooLarge(Exception):
    """The result would be longer than the caller's ``max_size``; nothing was returned."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the result would be at least {size} long")
        self.size = size


class OutOfBudget(Exception):
    """The caller's ``stop()`` said the work has taken too long; nothing was returned."""
