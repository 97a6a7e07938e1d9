"""The edit vocabulary: the ops of the contract (sections 3.1 and 7), a batch, and its limits.

One closed set of pydantic models, validated once at the edge and shared by the HTTP API, the worker and
the MCP tools (their JSON schema is what agents read: every field says what it does). Unknown fields are
refused. ``content`` is text (``encoding="utf-8"``) or base64 of bytes; ``decoded()`` turns it into the
exact bytes that will be written.

    whole files      create, overwrite, replace, delete, rename (a file or a folder; rewrite_links)
    in place         append, frontmatter, replace_section, append_section, insert_section_after,
                     remove_section, rename_section
    across pages     replace_across (every page under a prefix), retarget_links (links to a page or
                     heading), extract_section (a section to a new page, its links following it)
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from worker.errors import BatchRejected

HEX40 = r"^[0-9a-f]{40}$"
# an expected_version: a version id, or "batch" for the page as the earlier edits of this batch left it
BATCH_VERSION = "batch"
VERSION_OR_BATCH = r"^(?:[0-9a-f]{40}|batch)$"
# "minLength: 1" in the schema (what agents read), checked by ``check_static`` rather than by pydantic, so
# text that is not valid Unicode stays INVALID_ENCODING and an empty one INVALID_BATCH naming the edit.
NON_EMPTY: dict[str, JsonValue] = {"minLength": 1}
NULL: dict[str, JsonValue] = {"type": "null"}
Version = Annotated[
    str | None,
    Field(
        pattern=VERSION_OR_BATCH,
        description="The page's version: the one read_page or list_pages gave (its git blob id), the "
        'version an earlier edit of this batch gave the path (applied[].version), or "batch" for the '
        "page as earlier edits of this batch left it. Required to change a path that exists when the "
        "batch starts; ignored for a path created earlier in the batch.",
    ),
]
OptionalVersion = Annotated[
    str | None,
    Field(
        pattern=VERSION_OR_BATCH,
        description="Optional guard: refuse (VERSION_MISMATCH) unless the page is at this version (its "
        'version at the head, one an earlier edit of this batch gave it, or "batch"). Omit it to apply '
        "the edit to whatever the page holds when the batch runs: it then never conflicts.",
    ),
]
SectionVersion = Annotated[
    str | None,
    Field(
        pattern=HEX40,
        description="Instead of expected_version: the version of the addressed section (read_page with "
        "sections=true gives it). Only that section must be unchanged, so writers of other sections "
        "of the page do not conflict.",
    ),
]
Heading = Annotated[
    str,
    Field(
        json_schema_extra={"minLength": 1},
        description="The section's heading text (without '#'), or its address 'Parent > Child' when the "
        "text is not unique; read_page with sections=true lists every section's address.",
    ),
]
Encoding = Annotated[
    Literal["utf-8", "base64"],
    Field(description="utf-8 (default): content is the text itself; base64: content is base64 of the bytes"),
]
Content = Annotated[str, Field(description="The whole new file content (see encoding).")]
Text = Annotated[str, Field(description="Markdown text, written as given.")]


# Paths as far as a pattern can say them, in the schema only (``check_static`` enforces the rules with their
# own codes: INVALID_PATH, ZONE_FORBIDDEN, PROTECTED_PATH). A segment: no '/', backslash or control
# character, not '.' or '..', not '.git' (any case, with the trailing dots and spaces Windows drops) or its
# 8.3 name; the zones are the default policy's (an operator may override a wiki's).
_SEGMENT = (
    r"(?!\.\.?(?:/|$))(?!\.[gG][iI][tT][. ]*(?:[:/]|$))(?![gG][iI][tT]~1(?:[:/]|$))"
    r"[^/\\\u0000-\u001f\u007f-\u009f]{1,255}"
)
_UNDER = rf"(?:{_SEGMENT}/)*{_SEGMENT}"
_ROOT_FILES = r"(?:index|log|schema)\.md"
PAGE_PATH = rf"^{_UNDER}$"  # any file path (a read)
PATH_ANY_ZONE = rf"^(?:(?:wiki|raw)/{_UNDER}|{_ROOT_FILES})$"  # create
PATH_WRITABLE = rf"^(?:wiki/{_UNDER}|{_ROOT_FILES})$"  # changing an existing file
PATH_MOVABLE = rf"^wiki/{_UNDER}$"  # delete, rename
ANCHOR = r"^[^#]+(?:#.*\S.*)?$"  # retarget_links: a page, or page#heading (check_static checks the page)


def _prefixes(*names: str) -> list[str]:
    return sorted({name[:n] for name in names for n in range(len(name) + 1)})


# replace_across: '' or any start of a zone's name, or a path under wiki/ (raw/ itself takes no replace)
PREFIX = (
    rf"^(?:wiki/(?:{_SEGMENT}/)*(?:{_SEGMENT})?|"
    + "|".join(p.replace(".", r"\.") for p in _prefixes("wiki/", "raw", "index.md", "log.md", "schema.md"))
    + ")$"
)
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _path_schema(pattern: str, *fields: str) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` giving ``fields`` (default ``path``) the path ``pattern``."""

    def extra(schema: dict[str, Any]) -> None:
        for name in fields or ("path",):
            schema["properties"][name].update({"pattern": pattern, "maxLength": 4096})

    return extra


def _overwrite_schema(schema: dict[str, Any]) -> None:
    """An overwrite: a writable path, and base64 content when ``encoding`` says so."""
    _content_schema(schema)
    _path_schema(PATH_WRITABLE)(schema)


def _content_schema(schema: dict[str, Any]) -> None:
    """Content is base64 when ``encoding`` says so (a schema-only rule: the code answers INVALID_ENCODING)."""
    _path_schema(PATH_ANY_ZONE)(schema)
    schema["if"] = {"properties": {"encoding": {"const": "base64"}}, "required": ["encoding"]}
    schema["then"] = {"properties": {"content": {"pattern": BASE64}}}


class _Strict(BaseModel):
    # strict: JSON's false is a boolean, not 0; "1" is not a count (as the schema says); see also _whole
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _whole(value: object) -> object:
    """A JSON number without a fraction (``5.0``) as the integer it is, as JSON Schema's ``integer``
    allows; anything else (``5.5``, ``true``, ``"5"``) is left for strict validation to refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# after the constraints, so the schema still says minimum/maximum (pydantic renders them so only then)
Whole = BeforeValidator(_whole)
Count = Annotated[int, Field(ge=1), Whole]


class _Edit(_Strict):
    model_config = ConfigDict(json_schema_extra=_path_schema(PATH_WRITABLE))

    path: str = Field(description="The file's path inside the wiki, relative POSIX, e.g. wiki/redis.md.")


class Create(_Edit):
    """Create a file that does not exist yet (PATH_EXISTS if it does)."""

    model_config = ConfigDict(json_schema_extra=_content_schema)

    op: Literal["create"] = Field(description="The op: create.")
    content: Content
    encoding: Encoding = "utf-8"


class Overwrite(_Edit):
    """Replace the whole content of an existing file."""

    model_config = ConfigDict(json_schema_extra=lambda schema: _overwrite_schema(schema))

    op: Literal["overwrite"] = Field(description="The op: overwrite.")
    content: Content
    encoding: Encoding = "utf-8"
    expected_version: Version = None


class Replace(_Edit):
    """Replace byte-exact occurrences of ``old`` by ``new`` in an existing file."""

    op: Literal["replace"] = Field(description="The op: replace.")
    old: Annotated[
        str,
        Field(
            json_schema_extra=NON_EMPTY,
            description="Text matched byte for byte (copy it from the page's exact content).",
        ),
    ]
    new: Annotated[str, Field(description="The replacement text.")]
    expected_version: Version = None
    replace_all: Annotated[
        bool, Field(description="Replace every occurrence; false (default): old must occur exactly once.")
    ] = False
    expected_count: Annotated[
        Count | None,
        Field(
            description="Guard: refuse (COUNT_MISMATCH, details.actual_count the real one) unless old "
            "occurs exactly this many times. A count above 1 needs replace_all=true too.",
        ),
    ] = None


class Delete(_Edit):
    """Delete an existing file; with ``redirect_links_to``, every link to it is repointed to that page."""

    model_config = ConfigDict(json_schema_extra=_path_schema(PATH_MOVABLE))

    op: Literal["delete"] = Field(description="The op: delete.")
    expected_version: Version = None
    redirect_links_to: Annotated[
        str | None,
        Field(
            description="Another page (existing when this edit runs): every link to the deleted file, in "
            "every page, is rewritten to point there, as rename with rewrite_links does (never inside "
            "code; pages under raw/ are never changed). applied gets one rewrite_links entry per page."
        ),
    ] = None


class Rename(_Edit):
    """Move a file, or a folder with every file under it, to a path that does not exist yet."""

    model_config = ConfigDict(json_schema_extra=_path_schema(PATH_MOVABLE, "path", "new_path"))

    op: Literal["rename"] = Field(description="The op: rename.")
    path: str = Field(description="The file or folder to move, e.g. wiki/old.md or wiki/topic.")
    new_path: Annotated[str, Field(description="Where it moves (a file path, or a folder for a folder).")]
    expected_version: Annotated[
        str | None,
        Field(
            pattern=VERSION_OR_BATCH,
            description='The file\'s version (head, given by an earlier edit of this batch, or "batch"); '
            "required for a file that exists at the head. A folder takes none.",
        ),
    ] = None
    rewrite_links: Annotated[
        bool,
        Field(
            description="Also rewrite, in every page, the links to the moved file(s) so they point to the "
            "new place (wikilinks, embeds, relative markdown links; never inside code), and the relative "
            "links inside the moved pages so they still resolve. Pages under raw/ are never changed. "
            "applied gets one rewrite_links entry per rewritten page."
        ),
    ] = False


class Append(_Edit):
    """Add text at the end of an existing file (a line break first when the file does not end with one)."""

    op: Literal["append"] = Field(description="The op: append.")
    content: Annotated[
        str, Field(json_schema_extra=NON_EMPTY, description="The text to add, e.g. a log line ending '\\n'.")
    ]
    expected_version: OptionalVersion = None


class Frontmatter(_Edit):
    """Merge keys into a page's YAML front matter (created when absent); other keys, their order and
    comments, and the rest of the page stay byte for byte."""

    op: Literal["frontmatter"] = Field(description="The op: frontmatter.")
    set: Annotated[
        dict[str, JsonValue] | None,
        Field(description='Keys to set, with JSON values, e.g. {"status": "draft", "tags": ["a"]}.'),
    ] = None
    unset: Annotated[list[str] | None, Field(description="Keys to remove (a missing key is no change).")] = (
        None
    )
    expected_version: OptionalVersion = None


class _SectionEdit(_Edit):
    heading: Heading
    expected_version: Version = None
    expected_section_version: SectionVersion = None


class ReplaceSection(_SectionEdit):
    """Replace the body of a section (everything under its heading, subsections included)."""

    op: Literal["replace_section"] = Field(description="The op: replace_section.")
    content: Annotated[str, Field(description="The new body, without the heading line.")]


class AppendSection(_SectionEdit):
    """Add text at the end of a section, after its subsections."""

    op: Literal["append_section"] = Field(description="The op: append_section.")
    content: Text


class InsertSectionAfter(_SectionEdit):
    """Insert a new section right after a section (and its subsections)."""

    op: Literal["insert_section_after"] = Field(description="The op: insert_section_after.")
    new_heading: Annotated[str, Field(json_schema_extra=NON_EMPTY, description="The new heading's text.")]
    level: Annotated[int, Field(ge=1, le=6, description="The new heading's level: 1 for '#' to 6."), Whole]
    content: Annotated[str, Field(description="The new section's body, without the heading line.")] = ""


class RemoveSection(_SectionEdit):
    """Remove a section: its heading, body and subsections."""

    op: Literal["remove_section"] = Field(description="The op: remove_section.")


class RenameSection(_SectionEdit):
    """Change a section's heading text, keeping its level and style."""

    op: Literal["rename_section"] = Field(description="The op: rename_section.")
    new_heading: Annotated[
        str,
        Field(
            json_schema_extra=NON_EMPTY,
            description="The new heading text, without '#' (the heading keeps its level and style).",
        ),
    ]
    rewrite_links: Annotated[
        bool,
        Field(
            description="Also repoint every link to this section ([[page#Old]], [t](page.md#old), "
            "[[#Old]]) to the new heading, in every page but raw/, never in code. applied gets one "
            "rewrite_links entry per rewritten page."
        ),
    ] = False


class ExtractSection(_SectionEdit):
    """Move a section (with its subsections) to a new page, and repoint every link to it there."""

    model_config = ConfigDict(json_schema_extra=lambda schema: _extract_schema(schema))

    op: Literal["extract_section"] = Field(description="The op: extract_section.")
    new_path: Annotated[
        str,
        Field(
            description="The new page (must not exist): '# <title>' then the section's body, its "
            "subsections one level up per level the heading was below 1."
        ),
    ]
    title: Annotated[
        str | None,
        Field(json_schema_extra=NON_EMPTY, description="The new page's '# ' heading (default: the heading)."),
    ] = None
    leave_link: Annotated[
        bool, Field(description="Put a line [[new page]] where the section was (default: nothing).")
    ] = False


def _extract_schema(schema: dict[str, Any]) -> None:
    """An extract_section: a writable page, and a new page anywhere a create may put one."""
    _path_schema(PATH_WRITABLE)(schema)
    _path_schema(PATH_ANY_ZONE, "new_path")(schema)


AnchorPath = Annotated[
    str,
    Field(
        json_schema_extra={"pattern": ANCHOR, "maxLength": 4096},
        description="A page ('wiki/a.md') or a heading of one ('wiki/a.md#Redis failover': the address "
        "after the first '#', as the section ops take it).",
    ),
]


class RetargetLinks(_Strict):
    """Repoint every link to a page, or to a heading of it, to another page or heading, in every page."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
    )

    op: Literal["retarget_links"] = Field(description="The op: retarget_links.")
    source: AnchorPath = Field(
        alias="from",
        description="What the links point to now: a page ('wiki/a.md') or 'page#heading' (then only "
        "links whose fragment names that heading: [[a#Heading]], [x](a.md#heading-slug)).",
    )
    to: AnchorPath = Field(
        description="Where they point after (existing at this point of the batch): a page, or "
        "'page#heading' for a fragment naming it. Without one the fragment goes if from named a heading, "
        "else it stays. applied gets one rewrite_links entry per changed page (none when no link points "
        "to from)."
    )

    @property
    def path(self) -> str:
        """The page the links point to now (job summaries read ``path``)."""
        return split_anchor(self.source)[0]


def split_anchor(value: str) -> tuple[str, str | None]:
    """``page#heading`` as (page, heading), the heading cut at the first ``#``; (page, None) without."""
    page, hash_mark, heading = value.partition("#")
    return page, (heading if hash_mark else None)


class PageTests(_Strict):
    """Tests a page must pass to be picked: each one given must hold."""

    glob: Annotated[
        str | None,
        Field(
            max_length=4096,
            json_schema_extra=NON_EMPTY,
            description="And whose whole path (prefix included) matches: * and ? within a folder, ** "
            "across folders.",
        ),
    ] = None
    frontmatter: Annotated[
        dict[str, JsonValue] | None,
        Field(
            description="And whose front matter has each key at this value (null: absent), e.g. "
            '{"status": "archived"}.'
        ),
    ] = None
    contains: Annotated[
        str | None,
        Field(json_schema_extra=NON_EMPTY, description="And whose text holds this, case-sensitive."),
    ] = None
    outside_code: Annotated[
        bool,
        Field(
            description="contains counts only in prose, as replace_across's outside_code: not in code, HTML "
            "blocks, the front matter or a link's target."
        ),
    ] = False


class ReplaceAcross(_Strict):
    """One replace over every page under a prefix, as the batch left the pages; applied lists each
    changed page. Pages under raw/ and files that are not UTF-8 text are never changed."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["old"], "properties": {"old": {"type": "string"}, "pattern": {"type": "null"}}},
                {
                    "required": ["pattern"],
                    "properties": {"pattern": {"type": "string"}, "old": {"type": "null"}},
                },
            ]
        }
    )

    op: Literal["replace_across"] = Field(description="The op: replace_across.")
    prefix: Annotated[
        str,
        Field(
            json_schema_extra={"maxLength": 4096, "pattern": PREFIX},
            description="Only pages whose path starts with this, e.g. wiki/; '' for all.",
        ),
    ]
    old: Annotated[
        str | None, Field(json_schema_extra=NON_EMPTY, description="Exact text to replace (or give pattern).")
    ] = None
    pattern: Annotated[
        str | None,
        Field(
            json_schema_extra=NON_EMPTY,
            description="An RE2 regular expression instead of old (linear time; no look-around or "
            "backreferences; (?m) for ^ and $ at line ends); new may use \\1 or \\g<name>.",
        ),
    ] = None
    new: Annotated[str, Field(description="The replacement text.")]
    expected_count: Annotated[
        Count | None,
        Field(
            description="Guard: refuse (COUNT_MISMATCH, details.actual_count the real one) unless the "
            "total over all pages is this."
        ),
    ] = None
    outside_code: Annotated[
        bool,
        Field(
            description="Replace old only in prose: never in code blocks, inline code, HTML blocks, the "
            "front matter or a link's target and #fragment (its label and title are prose), so a word fixed "
            "in prose never breaks a link (with old, not pattern)."
        ),
    ] = False
    select: Annotated[
        PageTests | None,
        Field(description="Only the pages under prefix that pass these tests (as each's select)."),
    ] = None

    @model_validator(mode="after")
    def _one_of_old_and_pattern(self) -> ReplaceAcross:
        if (self.old is None) == (self.pattern is None):
            raise ValueError("give exactly one of 'old' and 'pattern'")
        if self.outside_code and self.old is None:
            raise ValueError("outside_code takes 'old', not 'pattern'")
        return self

    @property
    def path(self) -> str:
        """The prefix: where the edit writes (job summaries and write-prefix rights read ``path``)."""
        return self.prefix


class MergePages(_Edit):
    """Merge pages into one: each page's content (without its front matter) is appended to path, in
    order, under its own headings one level deeper (or kept); the pages are deleted and every link to them
    follows (to the heading their title became)."""

    op: Literal["merge_pages"] = Field(description="The op: merge_pages.")
    path: str = Field(description="The page they merge into: kept and extended, or created.")
    pages: Annotated[
        list[str],
        Field(min_length=1, max_length=100, description="The pages merged into path, in this order."),
    ]
    title: Annotated[
        str | None,
        Field(
            json_schema_extra=NON_EMPTY,
            description="path's '# ' heading when path is new (default: the first page's first '# ' "
            "heading, else its file name); INVALID_BATCH when path exists.",
        ),
    ] = None
    headings: Literal["demote", "keep"] = Field(
        default="demote", description="demote: each merged heading one level deeper; keep: as it is."
    )


class Selector(PageTests):
    """Which pages an ``each`` edit acts on: the .md files (as the batch left them) under ``prefix`` that
    pass every other test given."""

    prefix: Annotated[
        str,
        Field(
            json_schema_extra={"maxLength": 4096, "pattern": PREFIX},
            description="Pages whose path starts with this, e.g. wiki/projects/; '' for all.",
        ),
    ]


EACH_OPS = ("frontmatter", "append", "delete", "rename")


class Each(_Strict):
    """One op on every page a selector picks, as the batch left them, in path order; applied lists each
    page. expected_count guards the selection instead of each page's version: a batch that is written
    states it, unless it commits a checked plan (which guards every page it names); a dry run may omit
    it to learn the selection."""

    op: Literal["each"] = Field(description="The op: each.")
    select: Selector
    expected_count: Annotated[
        int | None,
        Field(
            ge=0,
            description="Pages the selector must pick, else COUNT_MISMATCH (details: actual_count, pages). "
            "Omit in a dry run (check_batch) to learn them; required to write without a plan.",
        ),
        Whole,
    ] = None
    do: Literal["frontmatter", "append", "delete", "rename"] = Field(
        description="The op for each page, with its fields below."
    )
    set: Annotated[dict[str, JsonValue] | None, Field(description="frontmatter: keys to set.")] = None
    unset: Annotated[list[str] | None, Field(description="frontmatter: keys to remove.")] = None
    content: Annotated[str | None, Field(json_schema_extra=NON_EMPTY, description="append: the text.")] = None
    new_path: Annotated[
        str | None,
        Field(
            description="rename: the folder the pages move into, e.g. wiki/archive, each under its file name "
            "(subfolders flattened: two pages of one name are PATH_EXISTS)."
        ),
    ] = None
    rewrite_links: Annotated[bool, Field(description="rename: repoint the links to the moved pages.")] = False
    redirect_links_to: Annotated[
        str | None, Field(description="delete: a page the links to the deleted pages point to after.")
    ] = None

    @property
    def path(self) -> str:
        """The selector's prefix: where the edit writes (job summaries and write-prefix rights)."""
        return self.select.prefix


SectionEdit = ReplaceSection | AppendSection | InsertSectionAfter | RemoveSection | RenameSection
EditModel = (
    Create
    | Overwrite
    | Replace
    | Delete
    | Rename
    | Append
    | Frontmatter
    | ReplaceSection
    | AppendSection
    | InsertSectionAfter
    | RemoveSection
    | RenameSection
    | ExtractSection
    | ReplaceAcross
    | RetargetLinks
    | Each
    | MergePages
)
Edit = Annotated[EditModel, Field(discriminator="op")]
# every op name, in the order of ``EditModel`` (each model's ``op`` is a one-value Literal)
OPS: tuple[str, ...] = tuple(
    get_args(model.model_fields["op"].annotation)[0] for model in get_args(EditModel)
)


_PORT = r"(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
WEBHOOK_URL = rf"^https?://[^\s/?#@\[\]:]+(?::{_PORT})?(?:[/?#]\S*)?$"


class Webhook(_Strict):
    url: Annotated[
        str,
        Field(
            min_length=1,
            max_length=2048,
            json_schema_extra={"pattern": WEBHOOK_URL},
            description="http(s) URL without credentials; hosts resolving to private addresses are refused "
            "unless the operator allows them",
        ),
    ]


class Batch(_Strict):
    """A batch: edits applied in order as one commit on ``main``, or not at all."""

    message: Annotated[str, Field(min_length=1, max_length=10_000, description="the commit message")]
    edits: Annotated[
        list[Edit], Field(description="applied in order, each to the state the earlier ones left")
    ]
    webhook: Annotated[Webhook | None, Field(description="POST the finished job here, signed")] = None
    dry_run: Annotated[bool, Field(description="check everything against the head, commit nothing")] = False
    propose: Annotated[
        bool,
        Field(
            description="check it and keep it as a proposal that lands only once another principal "
            "approves it (a token holding only propose always proposes)"
        ),
    ] = False
    # set only by a plan's submission (``PlanSubmission``): the ``applied`` list the dry run answered, which
    # the batch must produce again on the head it lands on, or fail ``PLAN_STALE``; never from a client
    expect: SkipJsonSchema[list[dict[str, JsonValue]] | None] = Field(
        default=None, exclude_if=lambda v: v is None
    )


# an edit's index in a batch, as a JSON object key: "0" is the first edit
EDIT_INDEX = r"^(?:0|[1-9][0-9]{0,8})$"


class PlanSubmission(_Strict):
    """Commit exactly what a dry run checked: ``plan`` is the token its result answered (its submitter
    only, while the dry run is kept). The batch is checked again on the head it lands on and committed only
    if it changes exactly what the dry run showed; else the job fails ``PLAN_STALE``.

    With ``amend``, the dry run's batch (of a failed dry run too: its ``error.plan``) with the edits at
    those indexes replaced, and indexes from its length on appended, is submitted as a new batch, checked
    in full like any other (``dry_run`` checks it only); nothing of the earlier check is expected of it."""

    plan: Annotated[
        str,
        Field(
            min_length=1,
            max_length=100,
            description="a dry run's result.plan (or, to amend it, a failed dry run's error.plan)",
        ),
    ]
    amend: Annotated[
        dict[Annotated[str, Field(pattern=EDIT_INDEX)], Edit] | None,
        Field(
            min_length=1,
            description='edits by index ("0" the first) replacing the dry run\'s; indexes from its length on '
            "append, in order. The result is a new batch, checked in full",
        ),
    ] = None
    dry_run: Annotated[bool, Field(description="with amend: check the amended batch, commit nothing")] = False
    message: Annotated[
        str | None,
        Field(min_length=1, max_length=10_000, description="the commit message (default: the dry run's)"),
    ] = None
    webhook: Annotated[Webhook | None, Field(description="POST the finished job here, signed")] = None

    @model_validator(mode="after")
    def _dry_run_amends(self) -> PlanSubmission:
        if self.dry_run and self.amend is None:
            raise ValueError("dry_run: only with amend (a plan commits what was checked)")
        return self


class ProposalDecision(_Strict):
    """An approval or rejection of a proposal, with an optional comment for its author."""

    comment: Annotated[str | None, Field(max_length=2000, description="why (shown to the author)")] = None


class ProposalRecheck(_Strict):
    """A re-check of a proposal on the head: its batch again, with ``amend``'s edits when given."""

    amend: Annotated[
        dict[Annotated[str, Field(pattern=EDIT_INDEX)], Edit] | None,
        Field(
            min_length=1,
            description='edits by index ("0" the first) replacing the proposal\'s; indexes from its length '
            "on append, in order",
        ),
    ] = None


def _submission_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "plan" if "plan" in value else "batch"
    return "plan" if isinstance(value, PlanSubmission) else "batch"


# What POST /v1/wikis/{wiki}/batches takes: a batch, or a plan (told apart by a "plan" field)
Submission = Annotated[
    Annotated[Batch, Tag("batch")] | Annotated[PlanSubmission, Tag("plan")], Discriminator(_submission_kind)
]


class Costs(BaseModel):
    """What one request may cost (``worker.engine.budget`` says how each is accounted): CPU seconds,
    bytes of text scanned, one RE2 search's worst case (program size x bytes), RE2's memory, lines of one
    markdown parse, bytes of one YAML front matter, YAML nodes and depth one front matter may expand to,
    and bytes of answer. The defaults keep the worst request near 2 s of CPU and well under 64 MB."""

    model_config = ConfigDict(frozen=True)

    cpu_seconds: float = 2.0
    scan_bytes: int = 256 * 1024 * 1024
    regex_work: int = 100_000_000
    re2_max_mem: int = 8 * 1024 * 1024
    parse_lines: int = 50_000
    yaml_bytes: int = 64 * 1024
    yaml_nodes: int = 100_000
    yaml_depth: int = 64
    output_bytes: int = 16 * 1024 * 1024


class Limits(BaseModel):
    """Per-batch limits; over one is ``413``.

    ``max_edits`` and ``max_content_bytes`` bound the request (contract rule 10); ``max_file_bytes`` and
    ``max_output_bytes`` bound what the batch produces (one file, and all new content together), so a small
    request cannot ask a worker to build a huge result (a ``replace_all`` multiplies its input, a
    ``replace_across`` or a rename with ``rewrite_links`` may touch every page). ``costs`` bound the work a
    batch may buy (CPU, bytes scanned, parser and matcher work): over them is ``BATCH_TOO_COSTLY``.
    """

    max_edits: int = 1000
    max_content_bytes: int = 8 * 1024 * 1024
    max_file_bytes: int = 8 * 1024 * 1024
    max_output_bytes: int = 64 * 1024 * 1024
    costs: Costs = Costs()


def utf8(text: str, index: int | None, what: str = "content") -> bytes:
    """``text`` as UTF-8 bytes; ``INVALID_ENCODING`` for text that has no UTF-8 form (lone surrogates)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BatchRejected(
            "INVALID_ENCODING", f"{what} is not valid Unicode text; send bytes as base64", index
        ) from None


def decoded(edit: Create | Overwrite, index: int) -> bytes:
    """The exact bytes ``edit.content`` stands for; ``INVALID_ENCODING`` when it cannot be decoded."""
    if edit.encoding == "utf-8":
        return utf8(edit.content, index)
    try:
        return base64.b64decode(edit.content, validate=True)
    except (binascii.Error, ValueError):
        raise BatchRejected("INVALID_ENCODING", "content is not valid base64", index) from None


_TEXTS = ("content", "old", "new", "pattern", "new_heading", "heading", "title")


@functools.cache
def text_fields(kind: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``_TEXTS`` an edit type has (asking a pydantic model for a field it lacks raises
    inside ``__getattr__``, ~20x the cost of reading one it has)."""
    return tuple(name for name in _TEXTS if name in kind.model_fields)


def texts(edit: EditModel) -> dict[str, str]:
    """The text fields of an edit that carry content, by name (paths and versions are not content)."""
    return {name: value for name in text_fields(type(edit)) if isinstance(value := getattr(edit, name), str)}


def content_size(edit: EditModel, index: int) -> int:
    """Decoded bytes an edit carries (content, old + new, headings, front matter values), counted
    against the batch limit."""
    if isinstance(edit, Create | Overwrite):
        return len(decoded(edit, index))
    if isinstance(edit, Delete | Rename | RetargetLinks):
        return 0
    size = sum(len(utf8(text, index, name)) for name, text in texts(edit).items())
    if isinstance(edit, Frontmatter | Each):
        size += len(utf8(json.dumps([edit.set, edit.unset], ensure_ascii=False), index, "set"))
    return size


def written_paths(edit: EditModel) -> list[str]:
    """The paths (or path prefixes) an edit may write, for write-prefix rights: a rename's both ends, a
    replace_across's prefix, and ``""`` (anywhere) for a rename or rename_section that rewrites links in
    every page, a delete that redirects them, retarget_links and extract_section (both rewrite links
    everywhere)."""
    if isinstance(edit, RetargetLinks):
        return [""]
    if isinstance(edit, MergePages):
        return [edit.path, *edit.pages, ""]
    if isinstance(edit, Each):
        links = [""] if edit.rewrite_links or edit.redirect_links_to is not None else []
        return [edit.select.prefix, *([edit.new_path] if edit.new_path is not None else []), *links]
    if isinstance(edit, ExtractSection):
        return [edit.path, edit.new_path, ""]
    if isinstance(edit, Rename):
        return [edit.path, edit.new_path, *([""] if edit.rewrite_links else [])]
    if isinstance(edit, Delete) and edit.redirect_links_to is not None:
        return [edit.path, ""]
    if isinstance(edit, RenameSection) and edit.rewrite_links:
        return [edit.path, ""]
    return [edit.path]


def batch_paths(batch: Batch) -> list[str]:
    """Every path (or path prefix) a batch may write (``written_paths`` of each edit, in order)."""
    return [path for edit in batch.edits for path in written_paths(edit)]


def check_limits(batch: Batch, limits: Limits) -> None:
    """Refuse an empty batch (BATCH_EMPTY) or one over a limit (TOO_MANY_EDITS, BATCH_TOO_LARGE)."""
    if not batch.edits:
        raise BatchRejected("BATCH_EMPTY", "the batch has no edits; add at least one")
    if len(batch.edits) > limits.max_edits:
        raise BatchRejected(
            "TOO_MANY_EDITS",
            f"{len(batch.edits)} edits is over the limit of {limits.max_edits}; split the batch",
        )
    sizes = [content_size(edit, index) for index, edit in enumerate(batch.edits)]
    total = sum(sizes)
    if total > limits.max_content_bytes:
        raise BatchRejected(
            "BATCH_TOO_LARGE",
            f"{total} bytes of content is over the limit of {limits.max_content_bytes}; split the batch",
        )
    for index, (edit, size) in enumerate(zip(batch.edits, sizes, strict=True)):
        if not isinstance(edit, Create | Overwrite | Append):
            continue
        if size > limits.max_file_bytes:
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"the content is {size} bytes, over the limit of {limits.max_file_bytes} bytes a file; "
                "split the page",
                index,
            )
