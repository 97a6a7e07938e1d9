"""The size bound a caller may put on the toolkit's results: the exception raised when it is reached.

The toolkit itself has no size limits (it is given a page and keeps every byte it does not change); the
engine passes ``max_size`` where one edit could build a huge result, and turns ``TooLarge`` into its own
refusal with the failing edit's index. The work a call may do is bounded by ``worker.engine.budget``.
"""

from __future__ import annotations


class TooLarge(Exception):
    """The result would be longer than the caller's ``max_size``; nothing was returned."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the result would be at least {size} long")
        self.size = size
