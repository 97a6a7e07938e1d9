"""The error-code table of docs/contract.md and the code agree both ways: every code of worker/errors.py
is listed once with the HTTP status api/server/errors.py gives it, and the table lists no other code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.server.errors import STATUS, error_response
from worker.errors import CODES

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
ROW = re.compile(r"^\| `([A-Z_]+)` \| (\d{3}) \| (.+) \|$")


def error_table(text: str) -> dict[str, int]:
    """``code -> HTTP status`` of the rows under the page's ``## Errors`` heading."""
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, int] = {}
    for line in section.splitlines():
        found = ROW.match(line)
        if found:
            assert found.group(1) not in rows, f"{found.group(1)} is listed twice"
            assert found.group(3).strip(), f"{found.group(1)} says nothing about what to do"
            rows[found.group(1)] = int(found.group(2))
    return rows


def test_every_code_is_listed_and_no_other() -> None:
    table = error_table(CONTRACT.read_text(encoding="utf-8"))
    assert set(table) - CODES == set(), "listed in docs/contract.md but not in worker/errors.py"
    assert CODES - set(table) == set(), "in worker/errors.py but missing from docs/contract.md's table"


def test_every_status_is_the_one_the_api_answers() -> None:
    table = error_table(CONTRACT.read_text(encoding="utf-8"))
    for code, status in table.items():
        assert error_response(code, "m").status_code == status, code


def test_the_status_map_names_only_known_codes() -> None:
    assert set(STATUS) <= CODES


def test_a_one_sided_change_is_caught() -> None:
    """The parser really reads the table: a row dropped, added or given another status is seen."""
    text = CONTRACT.read_text(encoding="utf-8")
    table = error_table(text)
    dropped = error_table(text.replace("| `WIKI_EXISTS` | 409 |", "| WIKI_EXISTS | 409 |"))
    assert set(table) - set(dropped) == {"WIKI_EXISTS"}
    added = error_table(
        text.replace("| `INTERNAL` | 500 |", "| `PLAN_GONE` | 410 | Ask again. |\n| `INTERNAL` | 500 |")
    )
    assert set(added) - CODES == {"PLAN_GONE"}
    moved = error_table(text.replace("| `WIKI_EXISTS` | 409 |", "| `WIKI_EXISTS` | 422 |"))
    assert moved["WIKI_EXISTS"] != error_response("WIKI_EXISTS", "m").status_code


@pytest.mark.parametrize(
    "page", [*sorted(CONTRACT.parent.parent.glob("docs/*.md")), CONTRACT.parent.parent / "README.md"]
)
def test_no_page_points_outside_the_repository(page: Path) -> None:
    """A clone is complete: no page sends the reader to ../shared."""
    assert "../shared" not in page.read_text(encoding="utf-8")
