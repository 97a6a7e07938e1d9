"""A page's YAML front matter: reading it, and merging keys into it without disturbing anything else.

The front matter is the block ``document.front_matter_span`` finds: a first line ``---``, YAML, a closing
``---`` or ``...`` line. It must be a YAML mapping (or empty); anything else (a list, a scalar, YAML that
does not parse) is ``FRONTMATTER_INVALID``. Values are read as JSON-like data: mappings, lists, strings,
numbers, booleans, null; dates and times become ISO 8601 strings, other YAML types their string form.

``set_frontmatter`` edits lines, not the whole document (ruamel.yaml's round trip would re-indent lists,
drop ``~`` and move comments): each top-level key owns the lines from its own line to the next key's,
minus the blank and column-0 comment lines just before the next key (they describe that key). A changed
key's lines are replaced by ruamel.yaml's dump of the new ``key: value`` (lists indented under the key);
a single-line value keeps its end-of-line comment. An unset key's lines are removed, with the column-0
comment lines right above it (except above the first key); new keys are added at the end of the block.
A key set to the value it holds is not touched. Every other byte of the page is kept. The result is
parsed again and must hold exactly the expected merge, in order; if the line edit cannot give that
(anchors, a flow-style mapping), the block is written by ruamel.yaml's round trip instead, which keeps
comments but may reformat; if that fails too, ``FRONTMATTER_INVALID``. New lines use the line ending
of the block's first line (of the page's first line when the block is created).
"""

from __future__ import annotations

import datetime
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from worker.engine.budget import Budget, OverBudget, current
from worker.engine.markdown.document import front_matter_span, line_ending, split_lines
from worker.errors import BatchRejected

# Strings a YAML 1.1 reader (PyYAML, many static site generators) would take for booleans: quote them.
_BOOLISH = re.compile(r"y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF")
# Characters ruamel.yaml would write raw although YAML reads them as line breaks or refuses them (NEL,
# LS, PS, BOM, controls): strings holding one are written double-quoted, where they are escaped.
_UNSAFE = re.compile(
    "[^\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.allow_unicode = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def plain(value: Any) -> Any:
    """``value`` as loaded by ruamel.yaml, made JSON-like (dict, list, str, int, float, bool, None).

    YAML aliases are expanded, so the result may be far larger than the text; it is built under the
    budget in force: past ``yaml_nodes`` values or ``yaml_depth`` levels it is ``OverBudget`` (a chain
    of aliases ``&a [*a, *a, ...]`` grows tenfold a level)."""
    return _Expansion(current()).plain(value, 0)


class _Expansion:
    """One expansion of loaded YAML into plain values, counting nodes and depth against a budget."""

    def __init__(self, spend: Budget) -> None:
        self.spend = spend
        self.nodes = 0

    def plain(self, value: Any, depth: int) -> Any:
        self.nodes += 1
        costs = self.spend.costs
        if self.nodes > costs.yaml_nodes or depth > costs.yaml_depth:
            raise OverBudget(
                f"the front matter expands to over {costs.yaml_nodes} values or {costs.yaml_depth} levels "
                "(YAML aliases repeat what they point to); write the values out, or remove the aliases"
            )
        if not self.nodes % 4096:
            self.spend.check("reading the front matter")
        if isinstance(value, Mapping):
            return {self.key(key, depth): self.plain(item, depth + 1) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.plain(item, depth + 1) for item in value]
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, datetime.date | datetime.datetime):
            return value.isoformat()
        return str(value)

    def key(self, key: Any, depth: int) -> str:
        if isinstance(key, str):
            return str(key)
        value = self.plain(key, depth + 1)
        return json.dumps(value) if isinstance(key, bool) or key is None else str(value)


def _load(source: str, index: int | None) -> CommentedMap:
    current().yaml(len(source.encode()), "the page")
    try:
        data = _yaml().load(source)
    except Exception as error:  # ruamel raises YAMLError, but also ValueError on a bad date and others
        reason = " ".join(str(error).split())
        raise BatchRejected(
            "FRONTMATTER_INVALID", f"the front matter does not parse as YAML: {reason}", index
        ) from None
    if data is None:
        return CommentedMap()
    if not isinstance(data, CommentedMap):
        kind = "a list" if isinstance(data, list) else f"a single {type(plain(data)).__name__} value"
        raise BatchRejected(
            "FRONTMATTER_INVALID",
            f"the front matter is {kind}, not a mapping of keys; fix it with overwrite or replace",
            index,
        )
    return data


def read_frontmatter(text: str, index: int | None = None) -> dict[str, Any] | None:
    """The page's front matter as a JSON-like dict, None when it has none, ``FRONTMATTER_INVALID`` when it
    is not a mapping."""
    lines = split_lines(text)
    span = front_matter_span(lines)
    if span is None:
        return None
    result: dict[str, Any] = plain(_load("".join(lines[1 : span[1] - 1]), index))
    return result


def _check_value(value: Any, index: int | None, where: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BatchRejected("INVALID_BATCH", f"{where}: {value!r} is not a JSON number", index)
        return
    if isinstance(value, list):
        for item in value:
            _check_value(item, index, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise BatchRejected("INVALID_BATCH", f"{where}: mapping keys must be strings", index)
            _check_value(item, index, where)
        return
    raise BatchRejected("INVALID_BATCH", f"{where}: {type(value).__name__} is not a JSON value", index)


def _yaml_ready(value: Any) -> Any:
    if isinstance(value, str) and _UNSAFE.search(value):
        return DoubleQuotedScalarString(value)
    if isinstance(value, str) and _BOOLISH.fullmatch(value):
        return SingleQuotedScalarString(value)
    if isinstance(value, list):
        return [_yaml_ready(item) for item in value]
    if isinstance(value, dict):
        out = CommentedMap()
        for key, item in value.items():
            out[_yaml_ready(key)] = _yaml_ready(item)
        return out
    return value


def _dump(data: Mapping[str, Any]) -> str:
    out = CommentedMap()
    for key, value in data.items():
        out[_yaml_ready(key)] = _yaml_ready(value)
    stream = io.StringIO()
    _yaml().dump(out, stream)
    return stream.getvalue()


def _with_newline(text: str, newline: str) -> str:
    return text.replace("\n", newline) if newline != "\n" else text


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a) == json.dumps(b)


def set_frontmatter(
    text: str,
    set: Mapping[str, Any] | None = None,
    unset: Sequence[str] = (),
    *,
    index: int | None = None,
) -> str:
    """The page with ``set`` merged into its front matter and the keys in ``unset`` removed (a missing
    key is no change); the block is created before the content when the page has none and something is
    set. Keys not named keep their lines byte for byte."""
    updates = dict(set or {})
    for key, value in updates.items():
        if not isinstance(key, str):
            raise BatchRejected("INVALID_BATCH", "front matter keys must be strings", index)
        _check_value(value, index, f"set[{key!r}]")
    both = sorted(updates.keys() & {*unset})
    if both:
        raise BatchRejected("INVALID_BATCH", f"keys both set and unset: {both}", index)
    lines = split_lines(text)
    span = front_matter_span(lines)
    if span is None:
        if not updates:
            return text
        newline = (line_ending(lines[0]) if lines else "") or "\n"
        return "---" + newline + _with_newline(_dump(updates), newline) + "---" + newline + text
    close = span[1] - 1
    body = lines[1:close]
    newline = line_ending(lines[0])
    data = _load("".join(body), index)
    expected = plain(data)
    for key in unset:
        expected.pop(key, None)
    expected.update(updates)
    changed = {
        key: value for key, value in updates.items() if key not in data or not _same(plain(data[key]), value)
    }
    removed = [key for key in dict.fromkeys(unset) if key in data]
    if not changed and not removed:
        return text
    block = _spliced(body, data, changed, removed, newline)
    if block is None or not _holds(block, expected):
        block = _round_trip(data, changed, removed, newline)
        if not _holds(block, expected):
            raise BatchRejected(
                "FRONTMATTER_INVALID",
                "the front matter cannot take these changes without changing other keys (anchors?)",
                index,
            )
    return lines[0] + block + "".join(lines[close:])


def _holds(block: str, expected: dict[str, Any]) -> bool:
    current().yaml(len(block.encode()), "the new front matter")
    try:
        found = _yaml().load(block)
    except Exception:
        return False
    loaded = plain(found) if found is not None else {}
    return isinstance(loaded, dict) and _same(loaded, expected) and list(loaded) == list(expected)


def _key_lines(body: list[str], data: CommentedMap) -> dict[Any, tuple[int, int, int]] | None:
    """Each top-level key's lines in ``body``: ``(lead, start, end)``, where ``lead..start`` are the
    column-0 comment lines right above the key (not for the first key: those describe the block), or
    None when the keys do not each start a line of their own (a flow mapping)."""
    starts = []
    for key in data:
        try:
            starts.append((data.lc.key(key)[0], key))
        except (KeyError, TypeError, AttributeError):
            return None
    lines = [line for line, _ in starts]
    if len(set(lines)) != len(lines) or lines != sorted(lines):
        return None
    ranges: dict[Any, tuple[int, int, int]] = {}
    previous_end = 0
    for number, (start, key) in enumerate(starts):
        end = starts[number + 1][0] if number + 1 < len(starts) else len(body)
        while end > start + 1 and (not body[end - 1].strip() or body[end - 1].startswith("#")):
            end -= 1
        lead = start
        while number and lead > previous_end and body[lead - 1].startswith("#"):
            lead -= 1
        ranges[key] = (lead, start, end)
        previous_end = end
    return ranges


def _end_comment(data: CommentedMap, key: Any, line: str, number: int) -> str:
    """The end-of-line comment on ``line`` (with the blanks before it) that belongs to ``key``, or ""."""
    for token in data.ca.items.get(key) or []:
        if token is None or isinstance(token, list):
            continue
        column = getattr(token, "column", None)
        mark = getattr(token, "start_mark", None)
        if column is None or mark is None or mark.line != number or line[column : column + 1] != "#":
            continue
        start = column
        while start > 0 and line[start - 1] in " \t":
            start -= 1
        return line[start:].rstrip("\r\n")
    return ""


def _spliced(
    body: list[str], data: CommentedMap, changed: dict[str, Any], removed: list[str], newline: str
) -> str | None:
    """The block's lines with ``changed`` keys rewritten, ``removed`` ones (and their comment) gone and
    new keys added at the end; None when the keys cannot be told apart by lines."""
    ranges = _key_lines(body, data)
    if ranges is None:
        return None
    out = list(body)
    existing = [key for key in (*changed, *removed) if key in ranges]
    for key in sorted(existing, key=lambda k: ranges[k][1], reverse=True):
        lead, start, end = ranges[key]
        if key in removed:
            out[lead:end] = []
            continue
        dumped = _dump({key: changed[key]}).removesuffix("\n").split("\n")
        if end - start == 1 and len(dumped) == 1:
            dumped[0] += _end_comment(data, key, body[start], start)
        out[start:end] = [line + newline for line in dumped]
    new_keys = {key: value for key, value in changed.items() if key not in data}
    if new_keys:
        if out and not line_ending(out[-1]):
            out[-1] += newline
        out.append(_with_newline(_dump(new_keys), newline))
    return "".join(out)


def _round_trip(data: CommentedMap, changed: dict[str, Any], removed: list[str], newline: str) -> str:
    for key in removed:
        del data[key]
    for key, value in changed.items():
        data[_yaml_ready(key)] = _yaml_ready(value)
    stream = io.StringIO()
    _yaml().dump(data, stream)
    return _with_newline(stream.getvalue(), newline) if data else ""
