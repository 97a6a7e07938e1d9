"""Reading wikis: the list of wikis, a wiki's files, one page or many, search, and the commit log.

Every read is at the head of ``main`` and needs the ``read`` right on the wiki (a wiki the caller may not
read answers exactly like one that does not exist). Git work runs in a worker thread. What one answer may
return is bounded: a page over ``max_file_bytes`` is refused (clone the repository to read it), a read of
many pages takes at most ``MAX_PAGES_READ`` paths and ``max_file_bytes`` of content in all (it stops at the
first page past that budget: that page and the rest are answered as errors, and ``next_cursor`` resumes
there), and a search line is cut to ``MATCH_TEXT_CHARS`` characters around the match.

An answer cut short says so one way: ``next_cursor`` is set (a listing, a search, a count, backlinks, a
read of many pages), and the same call with ``cursor=next_cursor`` answers the rest.

A page read with ``sections`` also answers its heading tree (``markdown.outline``): each section's level,
heading, ancestor path, address (what a section op's ``heading`` takes), lines and version (a section op's
``expected_section_version``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

import anyio.to_thread

from worker.engine.budget import Budget, OverBudget, active, current
from worker.engine.markdown import outline
from worker.engine.paths import ZonePolicy, path_problem
from worker.engine.state import check_zone
from worker.errors import AccessDenied, BatchRejected, QueryTooCostly, WikiExists, WikiqError
from worker.git import WIKI_ID, GitStore, WikiRepo
from worker.git.search import SearchHit, count_matches, search
from worker.git.snapshot import Snapshot
from worker.jobs.clock import iso
from worker.jobs.registry import WikiEntry
from worker.jobs.wikis import Head, Wikis
from worker.schema.answers import (
    Author,
    CommitInfo,
    CommitList,
    Match,
    MatchList,
    Page,
    PageCount,
    PageError,
    PageInfo,
    PageList,
    PageSet,
    SectionInfo,
    WikiInfo,
    WikiList,
)
from worker.schema.edits import Costs
from worker.service.caller import Principal
from worker.settings import Settings

_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
MATCH_TEXT_CHARS = 1000  # characters of a matching line an answer carries
MATCH_TEXT_BEFORE = 200  # ... of which before the match, when the line is cut
MAX_PAGES_READ = 100  # paths one read of many pages may name
T = TypeVar("T")


async def in_thread(work: Callable[[], T], costs: Costs | None = None) -> T:
    """``work()`` in a worker thread (git reads block), under one budget of ``costs``
    (``worker.engine.budget``): crossing it is ``QUERY_TOO_COSTLY``."""

    def run() -> T:
        with active(Budget(costs)):
            try:
                return work()
            except OverBudget as over:
                raise QueryTooCostly(over.message) from None

    return await anyio.to_thread.run_sync(run)


def encode_cursor(path: str) -> str:
    """The opaque cursor that resumes a listing after ``path``."""
    return base64.urlsafe_b64encode(path.encode()).decode()


def decode_cursor(cursor: str | None) -> str:
    """The path a cursor resumes after (empty for none); ``INVALID_BATCH`` for one that is not base64url.

    Any base64url text is taken (padding may be left out; bytes that are not UTF-8 are replaced): a cursor
    only says where a sorted listing resumes, so a made-up one resumes somewhere, harmlessly.
    """
    if not cursor:
        return ""
    text = cursor.rstrip("=")
    if not text or any(ch not in _BASE64URL for ch in text):
        raise BatchRejected("INVALID_BATCH", "cursor is not one this API returned")
    if len(text) % 4 == 1:  # one character too many for any byte string: drop it
        text = text[:-1]
    raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=False)
    return raw.decode("utf-8", "replace")


def encode_search_cursor(path: str, line: int) -> str:
    """The opaque cursor that resumes a search after line ``line`` of ``path``."""
    return base64.urlsafe_b64encode(json.dumps([path, line]).encode()).decode()


def decode_search_cursor(cursor: str | None) -> tuple[str, int] | None:
    """The ``(path, line)`` a search cursor resumes after; ``INVALID_BATCH`` for one that is not base64url.

    A made-up base64url cursor resumes after the path its text names (like a listing's cursor).
    """
    if not cursor:
        return None
    text = decode_cursor(cursor)
    try:
        path, line = json.loads(text)
        if isinstance(path, str) and isinstance(line, int):
            return path, line
    except (ValueError, TypeError):
        pass
    return text, 0


def cut_line(text: str, column: int) -> tuple[str, bool]:
    """``text`` cut to ``MATCH_TEXT_CHARS`` around ``column`` (where the match starts), and if it was cut."""
    if len(text) <= MATCH_TEXT_CHARS:
        return text, False
    start = max(0, column - MATCH_TEXT_BEFORE)
    return text[start : start + MATCH_TEXT_CHARS], True


def page_answer(path: str, version: str, data: bytes, commit: str | None, sections: bool) -> Page:
    """A ``Page``: UTF-8 text as is, other bytes base64; with ``sections``, the heading tree of text."""
    try:
        content, text = data.decode("utf-8"), True
    except UnicodeDecodeError:
        content, text = base64.b64encode(data).decode(), False
    page = Page(
        path=path,
        version=version,
        content=content,
        encoding="utf-8" if text else "base64",
        size=len(data),
        commit=commit,
    )
    spend = current()
    spend.emit(len(page.content), f"reading {path!r}")
    if sections:
        page.sections = []
        for section in outline(content) if text else []:
            info = section.to_dict()
            spend.emit(len(info["path"]) + len(info["address"]) + len(info["heading"]) + 120, "the sections")
            page.sections.append(SectionInfo.model_validate(info))
    return page


class Reads:
    """Read operations of the service."""

    def __init__(self, settings: Settings, store: GitStore, wikis: Wikis) -> None:
        self.settings = settings
        self.store = store
        self.wikis = wikis

    async def at(self, caller: Principal, wiki: str, right: str = "read") -> Head:
        """``wiki`` at the head reads serve, once ``caller`` is known to hold ``right`` on it."""
        caller.require(wiki, right)
        return await self.wikis.head(wiki)

    async def repo(self, caller: Principal, wiki: str, right: str = "read") -> WikiRepo:
        """The repository (or cache) of ``wiki`` once ``caller`` is known to hold ``right`` on it."""
        return (await self.at(caller, wiki, right)).repo

    async def create_wiki(self, caller: Principal, wiki: str, remote: str | None = None) -> WikiInfo:
        """Create ``wiki`` with one initial commit of index.md, log.md and schema.md (admin only); with
        ``remote``, attach it to that declared git remote instead (see ``worker.jobs.wikis``)."""
        if not caller.may(wiki, "admin"):
            raise AccessDenied("creating wikis needs the admin right", code="FORBIDDEN")
        if not WIKI_ID.match(wiki):
            raise BatchRejected("INVALID_BATCH", "a wiki id matches ^[a-z0-9][a-z0-9._-]{0,62}$")
        if remote is not None:
            entry = await self.wikis.attach(wiki, remote)
            return _info(wiki, entry.head, entry)
        if await self.wikis.registry.get(wiki) is not None:
            raise WikiExists(f"wiki {wiki!r} already exists")
        head = await in_thread(lambda: self.store.create(wiki))
        return WikiInfo(id=wiki, head=head)

    async def list_wikis(self, caller: Principal) -> WikiList:
        """Every wiki the caller may read, with its head commit (and its remote, if it has one)."""
        entries = await self.wikis.registry.all()
        local = await in_thread(self.store.ids)
        readable = sorted(w for w in set(local) | set(entries) if caller.may(w, "read"))

        def collect() -> list[WikiInfo]:
            return [
                _info(w, entries[w].head, entries[w])
                if w in entries
                else WikiInfo(id=w, head=self.store.open(w).head())
                for w in readable
            ]

        return WikiList(wikis=await in_thread(collect))

    async def list_pages(
        self, caller: Principal, wiki: str, prefix: str = "", limit: int = 1000, cursor: str | None = None
    ) -> PageList:
        """Files at the head under ``prefix``, sorted by path, ``limit`` at a time after ``cursor``."""
        at = await self.at(caller, wiki)
        repo, head = at.repo, at.commit
        after = decode_cursor(cursor)

        def collect() -> PageList:
            files = [] if head is None else repo.list_files(head, prefix, after, limit + 1)
            page = files[:limit]
            more = len(files) > limit
            return PageList(
                pages=[PageInfo(path=f.path, version=f.version, size=f.size) for f in page],
                next_cursor=encode_cursor(page[-1].path) if more and page else None,
            )

        return await in_thread(collect, self.settings.costs)

    async def read_page(self, caller: Principal, wiki: str, path: str, sections: bool = False) -> Page:
        """One file at the head: content (UTF-8 text, or base64 for other bytes), version, size, commit;
        with ``sections``, its heading tree too."""
        _check_path(path)
        at = await self.at(caller, wiki)
        repo, head = at.repo, at.commit
        cap = self.settings.max_file_bytes

        def read() -> Page | None:
            if head is None:
                return None
            snapshot = repo.snapshot(head)
            version = snapshot.version(path)
            if version is None:
                return None
            size = repo.blob_size(version)
            if size > cap:
                raise _too_large(path, size, cap)
            return page_answer(path, version, snapshot.read(path), snapshot.commit, sections)

        page = await in_thread(read, self.settings.costs)
        if page is None:
            raise BatchRejected("NOT_FOUND", f"no file {path!r} at the head of {wiki!r}")
        return page

    async def read_pages(
        self,
        caller: Principal,
        wiki: str,
        paths: Sequence[str],
        sections: bool = False,
        cursor: str | None = None,
    ) -> PageSet:
        """Many files at one commit of the head, in the order asked (a path asked twice, once), from the
        path ``cursor`` names on: each as ``read_page`` answers it, or an error entry (INVALID_PATH,
        NOT_FOUND, BATCH_TOO_LARGE for a file over ``max_file_bytes``). The first page that does not fit
        in the ``max_file_bytes`` of content left stops the read: it and every path after it are
        BATCH_TOO_LARGE entries, and ``next_cursor`` resumes at it (the same paths again, with it as
        ``cursor``). A cursor that names none of ``paths`` is ``INVALID_BATCH``."""
        wanted = list(dict.fromkeys(paths))
        if not wanted or len(wanted) > MAX_PAGES_READ:
            raise BatchRejected(
                "INVALID_BATCH", f"give 1 to {MAX_PAGES_READ} paths; read more in several calls"
            )
        if cursor:
            start = decode_cursor(cursor)
            if start not in wanted:
                raise BatchRejected(
                    "INVALID_BATCH", "cursor names none of these paths: send the paths it was given with"
                )
            wanted = wanted[wanted.index(start) :]
        at = await self.at(caller, wiki)
        repo = at.repo
        budget = self.settings.max_file_bytes

        def read() -> PageSet:
            snapshot = view(repo, at.commit)
            answer = PageSet(commit=snapshot.commit, pages=[], errors=[])
            left = budget
            for number, path in enumerate(wanted):
                try:
                    page = self._one(repo, snapshot, path, left, sections)
                except _Unread:
                    answer.next_cursor = encode_cursor(path)
                    answer.errors += [_unread(rest) for rest in wanted[number:]]
                    break
                except WikiqError as exc:
                    answer.errors.append(PageError(path=path, code=exc.code, message=exc.message))
                    continue
                left -= page.size
                answer.pages.append(page)
            return answer

        return await in_thread(read, self.settings.costs)

    def _one(self, repo: WikiRepo, snapshot: Snapshot, path: str, left: int, sections: bool) -> Page:
        _check_path(path)
        version = snapshot.version(path)
        if version is None:
            raise BatchRejected("NOT_FOUND", f"no file {path!r} at the head")
        size = repo.blob_size(version)
        if size > left:
            if size > self.settings.max_file_bytes:
                raise _too_large(path, size, self.settings.max_file_bytes)
            raise _Unread
        return page_answer(path, version, snapshot.read(path), snapshot.commit, sections)

    async def commits(self, caller: Principal, wiki: str, limit: int = 50) -> CommitList:
        """Commits of ``main``, newest first, with author and the job that made each."""
        at = await self.at(caller, wiki)
        infos = [] if at.commit is None else await in_thread(lambda: at.repo.log(limit, start=at.commit))
        return CommitList(
            commits=[
                CommitInfo(
                    commit=info.commit,
                    message=info.message,
                    author=Author(name=info.author.name, email=info.author.email),
                    time=datetime.fromtimestamp(info.time, UTC).isoformat().replace("+00:00", "Z"),
                    job_id=info.job_id,
                )
                for info in infos
            ]
        )

    async def find(
        self,
        caller: Principal,
        wiki: str,
        q: str,
        limit: int = 100,
        *,
        count: bool = False,
        regex: bool = False,
        prefix: str = "",
        case_sensitive: bool = False,
        cursor: str | None = None,
        outside_code: bool = False,
        multiline: bool = False,
    ) -> MatchList:
        """The search the API and the MCP tools answer: lines at the head holding ``q`` (literal) or where
        a match of it starts (``regex``: RE2, with ``^``/``$`` at line ends, a match within one line unless
        ``multiline``), ASCII case ignored unless ``case_sensitive``, only in prose with ``outside_code``
        (never in code blocks, code spans, HTML blocks or front matter), in files under ``prefix``: each
        with its path, 1-based number and the page's version, in path then line order, ``limit`` at a time
        after ``cursor`` (``next_cursor`` when there are more).

        With ``count``, how many matches of ``q`` each page at the head holds instead, counted as
        ``replace_across`` with ``old=q`` (``pattern=q`` with ``regex``), ``prefix`` and ``outside_code``
        would replace them (``worker.git.search.count_matches``: case-sensitive, over the whole page, only
        where its zone lets it change a page; ``case_sensitive`` and ``multiline`` change nothing):
        ``pages`` (``limit`` at a time after ``cursor``, in path order, ``next_cursor`` when there are
        more), ``total`` over every page, and no ``matches``. ``total`` is the ``expected_count`` such an
        edit takes. ``outside_code`` with ``regex`` is ``INVALID_BATCH`` (``replace_across`` takes it with
        ``old`` only)."""
        _one_line(q)
        after = decode_search_cursor(cursor)
        at = await self.at(caller, wiki)
        repo, head = at.repo, at.commit
        max_file_bytes = self.settings.max_file_bytes
        if count:
            policy = (await self.wikis.target(wiki)).policy

            def counted() -> MatchList:
                found = (
                    []
                    if head is None
                    else count_matches(
                        repo,
                        head,
                        q,
                        regex=regex,
                        prefix=prefix,
                        outside_code=outside_code,
                        changeable=_changeable(policy),
                        max_file_bytes=max_file_bytes,
                    )
                )
                return _page_counts(found, limit, after[0] if after else "")

            return await in_thread(counted, self.settings.costs)

        def searched() -> MatchList:
            if head is None:
                return MatchList(matches=[])
            hits = search(
                repo,
                head,
                q,
                regex=regex,
                case_sensitive=case_sensitive,
                prefix=prefix,
                limit=limit + 1,
                after=after,
                max_file_bytes=max_file_bytes,
                outside_code=outside_code,
                multiline=multiline,
            )
            return _matches(hits, limit)

        return await in_thread(searched, self.settings.costs)


def _matches(hits: list[SearchHit], limit: int) -> MatchList:
    """The answer of a search that asked for ``limit + 1`` hits: the first ``limit``, each line cut around
    its match, and the cursor after the last when there are more."""
    matches = []
    for hit in hits[:limit]:
        shown, cut = cut_line(hit.text, hit.column)
        match = Match(path=hit.path, line=hit.line, text=shown, version=hit.version)
        if cut:
            match.truncated = True  # type: ignore[attr-defined]  # extra field, only when cut
        matches.append(match)
    more = len(hits) > limit
    last = hits[limit - 1] if more else None
    return MatchList(
        matches=matches, next_cursor=encode_search_cursor(last.path, last.line) if last else None
    )


def _page_counts(found: list[tuple[str, int]], limit: int, after: str) -> MatchList:
    """The answer of a count: the first ``limit`` pages of ``found`` after the path ``after``, the total of
    them all, and the cursor after the last page shown when there are more."""
    rest = [(path, count) for path, count in found if path > after]
    shown = rest[:limit]
    return MatchList(
        matches=[],
        pages=[PageCount(path=path, count=count) for path, count in shown],
        total=sum(count for _, count in found),
        next_cursor=encode_search_cursor(shown[-1][0], 0) if len(rest) > limit else None,
    )


def view(repo: WikiRepo, commit: str | None) -> Snapshot:
    """The engine's view of ``commit`` of ``repo`` (None: an empty wiki, no file at all)."""
    return repo.snapshot(commit) if commit is not None else Snapshot(repo, None, None)


class _Unread(Exception):
    """A page that does not fit in what is left of a read's size budget."""


def _unread(path: str) -> PageError:
    return PageError(
        path=path,
        code="BATCH_TOO_LARGE",
        message="not read: this answer's size budget is spent; send the same paths with cursor=next_cursor",
    )


def _one_line(q: str) -> None:
    if not q or any(ch in q for ch in "\x00\n\r"):
        raise BatchRejected("INVALID_BATCH", "q must be one line of text")


def _changeable(policy: ZonePolicy) -> Callable[[str], bool]:
    """Whether the zone policy lets ``replace_across`` change a page (as ``BatchState.zone_allows``)."""

    def allows(path: str) -> bool:
        try:
            check_zone(policy, "replace_across", path, None)
        except BatchRejected:
            return False
        return True

    return allows


def _check_path(path: str) -> None:
    problem = path_problem(path)
    if problem is not None:
        raise BatchRejected("INVALID_PATH", f"{problem}: {path[:200]!r}")


def _too_large(path: str, size: int, cap: int) -> BatchRejected:
    return BatchRejected(
        "BATCH_TOO_LARGE",
        f"{path!r} is {size} bytes, over the {cap}-byte limit of one answer; clone the repository to read it",
    )


def _info(wiki: str, head: str | None, entry: WikiEntry) -> WikiInfo:
    """The answer of a remote-backed wiki."""
    return WikiInfo(
        id=wiki, head=head, remote=entry.remote, published_at=iso(entry.published_ms), problems=entry.problems
    )
