"""Python client of the wikiq HTTP API: ``Client`` (sync) and ``AsyncClient`` (async), the same methods.

    from api.client import Client

    with Client() as wikiq:                                  # WIKIQ_URL / WIKIQ_TOKEN, or arguments
        page = wikiq.read_page("homelab", "wiki/redis.md")
        job = wikiq.submit("homelab", batch, wait=True)      # a Job: job.result.commit, job.error

Every refusal raises ``ClientError`` carrying the contract's ``code``, ``message`` and ``index`` and the
HTTP ``status``; a server that cannot be reached raises its subclass ``ConnectionFailed``. A batch that the
worker refuses is not an exception: it is a ``Job`` with ``status == "failed"`` and its ``error``
(``raise_for_error(job)`` turns it into one).

Both clients build the same ``_Call`` descriptions and differ only in how they send them.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx

from worker.schema.answers import (
    BacklinkList,
    CommitInfo,
    ErrorInfo,
    Job,
    Match,
    MatchList,
    Page,
    PageInfo,
    PageList,
    PageSet,
    Proposal,
    WikiInfo,
)
from worker.schema.edits import Batch

DEFAULT_URL = "http://127.0.0.1:8080"
MAX_WAIT = 60.0  # the API answers a long-poll after at most this many seconds
_SLACK = 30.0  # read timeout over a long-poll's own wait
T = TypeVar("T")


class ClientError(Exception):
    """A refusal from the API: the contract's ``code``, ``message`` and ``index``, and the HTTP ``status``."""

    def __init__(
        self,
        code: str,
        message: str,
        index: int | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
        answered: ErrorInfo | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" + (f" (edit {index})" if index is not None else ""))
        self.code = code
        self.message = message
        self.index = index
        self.status = status
        self.details = details
        self.answered = answered

    @property
    def error(self) -> ErrorInfo:
        """The contract's error object: as the server answered it (every failing edit of a refused batch
        included), else made of code, message, index and ``details``."""
        if self.answered is not None:
            return self.answered
        error = ErrorInfo(code=self.code, message=self.message, index=self.index)
        if self.details is not None:
            error.details = self.details
        return error


class ConnectionFailed(ClientError):
    """The server could not be reached, or did not answer in time."""

    def __init__(self, message: str) -> None:
        super().__init__("UNREACHABLE", message)


def raise_for_error(job: Job) -> Job:
    """``job`` itself, or ``ClientError`` with the job's error when it failed."""
    if job.status == "failed":
        error = job.error or ErrorInfo(code="INTERNAL", message="the job failed without an error")
        raise ClientError(error.code, error.message, error.index, details=error.details, answered=error)
    return job


def settings_from_env(url: str | None, token: str | None) -> tuple[str, str | None]:
    """The server URL and token: the arguments, else ``WIKIQ_URL`` / ``WIKIQ_TOKEN``, else the defaults."""
    url = url or os.environ.get("WIKIQ_URL") or DEFAULT_URL
    token = token if token is not None else os.environ.get("WIKIQ_TOKEN") or None
    return url.rstrip("/"), token


def _budget(wait: float | bool) -> float | None:
    """Seconds to wait in all: None for ``True`` (until finished), 0 for ``False``."""
    if wait is True:
        return None
    if wait is False:
        return 0.0
    return max(float(wait), 0.0)


def _segment(value: str) -> str:
    return quote(value, safe="")


def _path(value: str) -> str:
    return quote(value, safe="/")


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One API request and how to read its answer."""

    method: str
    url: str
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None


def _wikis(body: Any) -> list[WikiInfo]:
    return [WikiInfo.model_validate(w) for w in body["wikis"]]


def _jobs(body: Any) -> list[Job]:
    return [Job.model_validate(j) for j in body["jobs"]]


def _commits(body: Any) -> list[CommitInfo]:
    return [CommitInfo.model_validate(c) for c in body["commits"]]


@dataclass(frozen=True)
class SearchOptions:
    """How to search: an RE2 pattern or literal text, letter case, a path prefix, a cursor to resume; only
    in prose (``outside_code``), a pattern's match across lines (``multiline``), or matches counted per
    page as ``replace_across`` counts them instead of lines (``count``)."""

    regex: bool = False
    case_sensitive: bool = False
    prefix: str = ""
    cursor: str | None = None
    outside_code: bool = False
    multiline: bool = False
    count: bool = False


def _dry(batch: Batch | Mapping[str, Any]) -> dict[str, Any]:
    body = batch.model_dump(mode="json", exclude_none=True) if isinstance(batch, Batch) else dict(batch)
    return {**body, "dry_run": True}


def _submitted(wiki: str) -> Callable[[Any], Job]:
    def parse(body: Any) -> Job:
        found = {"wiki": wiki, **body}
        if isinstance(found.get("proposal"), dict):  # a proposer's 202 names the proposal it became
            found["proposal"] = found["proposal"].get("proposal_id")
        return Job.model_validate(found)

    return parse


class _Calls:
    """The requests of every API operation, shared by the sync and async clients."""

    @staticmethod
    def list_wikis() -> _Call[list[WikiInfo]]:
        return _Call("GET", "/v1/wikis", _wikis)

    @staticmethod
    def create_wiki(wiki: str, remote: str | None = None) -> _Call[WikiInfo]:
        body = {"id": wiki} if remote is None else {"id": wiki, "remote": remote}
        return _Call("POST", "/v1/wikis", WikiInfo.model_validate, json=body)

    @staticmethod
    def list_pages(wiki: str, prefix: str, limit: int, cursor: str | None) -> _Call[PageList]:
        params: dict[str, Any] = {"prefix": prefix, "limit": limit}
        if cursor:
            params["cursor"] = cursor
        return _Call("GET", f"/v1/wikis/{_segment(wiki)}/pages", PageList.model_validate, params=params)

    @staticmethod
    def read_page(wiki: str, path: str, sections: bool = False) -> _Call[Page]:
        params = {"sections": "true"} if sections else None
        url = f"/v1/wikis/{_segment(wiki)}/pages/{_path(path)}"
        return _Call("GET", url, Page.model_validate, params=params)

    @staticmethod
    def read_pages(wiki: str, paths: list[str], sections: bool, cursor: str | None = None) -> _Call[PageSet]:
        body: dict[str, Any] = {"paths": paths, "sections": sections}
        if cursor:
            body["cursor"] = cursor
        return _Call("POST", f"/v1/wikis/{_segment(wiki)}/pages:read", PageSet.model_validate, json=body)

    @staticmethod
    def backlinks(wiki: str, path: str, limit: int, cursor: str | None) -> _Call[BacklinkList]:
        params: dict[str, Any] = {"path": path, "limit": limit}
        if cursor:
            params["cursor"] = cursor
        return _Call(
            "GET", f"/v1/wikis/{_segment(wiki)}/backlinks", BacklinkList.model_validate, params=params
        )

    @staticmethod
    def search(wiki: str, query: str, limit: int, options: SearchOptions) -> _Call[MatchList]:
        params: dict[str, Any] = {"q": query, "limit": limit}
        if options.regex:
            params["regex"] = "true"
        if options.case_sensitive:
            params["case_sensitive"] = "true"
        if options.prefix:
            params["prefix"] = options.prefix
        if options.cursor:
            params["cursor"] = options.cursor
        for flag in ("outside_code", "multiline", "count"):
            if getattr(options, flag):
                params[flag] = "true"
        return _Call("GET", f"/v1/wikis/{_segment(wiki)}/search", MatchList.model_validate, params=params)

    @staticmethod
    def commits(wiki: str, limit: int) -> _Call[list[CommitInfo]]:
        return _Call("GET", f"/v1/wikis/{_segment(wiki)}/commits", _commits, params={"limit": limit})

    @staticmethod
    def submit(wiki: str, batch: Batch | Mapping[str, Any], idempotency_key: str | None) -> _Call[Job]:
        body = batch.model_dump(mode="json", exclude_none=True) if isinstance(batch, Batch) else dict(batch)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        url = f"/v1/wikis/{_segment(wiki)}/batches"
        return _Call("POST", url, _submitted(wiki), json=body, headers=headers)

    @staticmethod
    def job(job_id: str, wait: float) -> _Call[Job]:
        wait = min(max(wait, 0.0), MAX_WAIT)
        params = {"wait": round(wait, 3)} if wait > 0 else None
        return _Call("GET", f"/v1/jobs/{_segment(job_id)}", Job.model_validate, params, timeout=wait + _SLACK)

    @staticmethod
    def cancel(job_id: str) -> _Call[Job]:
        return _Call("DELETE", f"/v1/jobs/{_segment(job_id)}", Job.model_validate)

    @staticmethod
    def proposal(proposal_id: str, diffs: bool) -> _Call[Proposal]:
        params = {"diffs": "true" if diffs else "false"}
        return _Call("GET", f"/v1/proposals/{_segment(proposal_id)}", Proposal.model_validate, params)

    @staticmethod
    def decide(proposal_id: str, verdict: str, comment: str | None) -> _Call[Proposal]:
        url = f"/v1/proposals/{_segment(proposal_id)}/{verdict}"
        return _Call("POST", url, Proposal.model_validate, json={"comment": comment})

    @staticmethod
    def jobs(wiki: str, status: str | None, limit: int) -> _Call[list[Job]]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        return _Call("GET", f"/v1/wikis/{_segment(wiki)}/jobs", _jobs, params=params)


def _headers(token: str | None) -> dict[str, str]:
    headers = {"User-Agent": "wikiq-client/0.1"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _answer(call: _Call[T], response: httpx.Response) -> T:
    if response.is_success:
        return call.parse(response.json())
    try:
        error = ErrorInfo.model_validate(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        text = response.text[:200].strip() or response.reason_phrase
        raise ClientError(f"HTTP_{response.status_code}", text, None, response.status_code) from None
    raise ClientError(error.code, error.message, error.index, response.status_code, error.details, error)


def _unreachable(url: str, exc: httpx.TransportError) -> ConnectionFailed:
    reason = str(exc) or type(exc).__name__
    return ConnectionFailed(f"cannot reach the wikiq API at {url}: {reason}")


class _Base:
    def __init__(self, url: str | None, token: str | None, timeout: float) -> None:
        self.url, self.token = settings_from_env(url, token)
        self.timeout = timeout

    def _send_kwargs(self, call: _Call[Any]) -> dict[str, Any]:
        headers = dict(_headers(self.token), **call.headers)
        timeout = call.timeout if call.timeout is not None else self.timeout
        kwargs: dict[str, Any] = {"params": call.params, "headers": headers, "timeout": timeout}
        if call.json is not None:
            kwargs["json"] = call.json
        return kwargs


class Client(_Base):
    """Synchronous client; use it as a context manager or call ``close()``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._own = http is None
        self.http = http if http is not None else httpx.Client()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (unless it was handed in)."""
        if self._own:
            self.http.close()

    def _run(self, call: _Call[T]) -> T:
        try:
            response = self.http.request(call.method, self.url + call.url, **self._send_kwargs(call))
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from exc
        return _answer(call, response)

    def list_wikis(self) -> list[WikiInfo]:
        """Every wiki the caller may read, with its head."""
        return self._run(_Calls.list_wikis())

    def create_wiki(self, wiki: str, remote: str | None = None) -> WikiInfo:
        """Create a wiki (index.md, log.md, schema.md in one initial commit), or attach it to ``remote``."""
        return self._run(_Calls.create_wiki(wiki, remote))

    def list_pages(
        self, wiki: str, prefix: str = "", limit: int = 1000, cursor: str | None = None
    ) -> PageList:
        """One page of the files at the head under ``prefix``, sorted by path."""
        return self._run(_Calls.list_pages(wiki, prefix, limit, cursor))

    def iter_pages(self, wiki: str, prefix: str = "", page_size: int = 1000) -> Iterator[PageInfo]:
        """Every file at the head under ``prefix``, following the cursors."""
        cursor: str | None = None
        while True:
            listing = self.list_pages(wiki, prefix, page_size, cursor)
            yield from listing.pages
            if not listing.next_cursor:
                return
            cursor = listing.next_cursor

    def read_page(self, wiki: str, path: str, *, sections: bool = False) -> Page:
        """A file at the head: content, encoding, version, size and commit; ``sections``: its heading tree
        with each section's address and version."""
        return self._run(_Calls.read_page(wiki, path, sections))

    def read_pages(
        self, wiki: str, paths: list[str], *, sections: bool = False, cursor: str | None = None
    ) -> PageSet:
        """Up to 100 files at one commit, in the order asked, and an error entry per path not read;
        ``next_cursor`` when the size budget left some unread (send the same paths with it as ``cursor``)."""
        return self._run(_Calls.read_pages(wiki, paths, sections, cursor))

    def read_bytes(self, wiki: str, path: str) -> bytes:
        """A file's exact bytes at the head."""
        return self.read_page(wiki, path).data()

    def backlinks(self, wiki: str, path: str, limit: int = 1000, cursor: str | None = None) -> BacklinkList:
        """Every link at the head (outside code) that resolves to ``path``, with its page and line,
        ``limit`` at a time after ``cursor`` (the answer's ``next_cursor``)."""
        return self._run(_Calls.backlinks(wiki, path, limit, cursor))

    def search(
        self,
        wiki: str,
        query: str,
        limit: int = 100,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        prefix: str = "",
    ) -> list[Match]:
        """Lines at the head holding ``query`` (literal, or an RE2 pattern with ``regex``), ASCII case
        ignored unless ``case_sensitive``, in files under ``prefix``: the first ``limit``."""
        options = SearchOptions(regex, case_sensitive, prefix)
        return self._run(_Calls.search(wiki, query, limit, options)).matches

    def search_page(
        self, wiki: str, query: str, limit: int = 100, options: SearchOptions | None = None
    ) -> MatchList:
        """One page of search hits (or of counts per page, with ``options.count``) and the ``next_cursor``
        (pass it in ``options.cursor`` for the next)."""
        return self._run(_Calls.search(wiki, query, limit, options or SearchOptions()))

    def commits(self, wiki: str, limit: int = 50) -> list[CommitInfo]:
        """Commits of ``main``, newest first."""
        return self._run(_Calls.commits(wiki, limit))

    def submit(
        self,
        wiki: str,
        batch: Batch | Mapping[str, Any],
        *,
        wait: float | bool = False,
        idempotency_key: str | None = None,
    ) -> Job:
        """Queue a batch; with ``wait`` (True, or seconds) long-poll its job until finished or that long."""
        job = self._run(_Calls.submit(wiki, batch, idempotency_key))
        return job if job.finished or _budget(wait) == 0 else self.job(job.job_id, wait=wait)

    def check(self, wiki: str, batch: Batch | Mapping[str, Any], *, wait: float | bool = True) -> Job:
        """Dry-run a batch (nothing is committed): its job's result has ``applied``, ``diff`` and
        ``warnings``, or its error is what the real batch would hit."""
        return self.submit(wiki, _dry(batch), wait=wait)

    def job(self, job_id: str, *, wait: float | bool = False) -> Job:
        """A job; with ``wait`` (True, or seconds) long-poll until it is finished or that long."""
        budget = _budget(wait)
        end = None if budget is None else time.monotonic() + budget
        while True:
            left = MAX_WAIT if end is None else min(MAX_WAIT, end - time.monotonic())
            job = self._run(_Calls.job(job_id, left))
            if job.finished or left <= 0 or (end is not None and time.monotonic() >= end):
                return job

    def cancel(self, job_id: str) -> Job:
        """Cancel a job that has not started (``NOT_CANCELLABLE`` once it has)."""
        return self._run(_Calls.cancel(job_id))

    def jobs(self, wiki: str, status: str | None = None, limit: int = 50) -> list[Job]:
        """A wiki's recent jobs, newest first."""
        return self._run(_Calls.jobs(wiki, status, limit))

    def proposal(self, proposal_id: str, *, diffs: bool = True) -> Proposal:
        """A proposal: its state, revisions (each check's diff with ``diffs``), decision and landing."""
        return self._run(_Calls.proposal(proposal_id, diffs))

    def approve(self, proposal_id: str, comment: str | None = None) -> Proposal:
        """Approve an open proposal: it lands as reviewed (state ``approved``, then ``landed`` or
        ``stale``)."""
        return self._run(_Calls.decide(proposal_id, "approve", comment))

    def reject(self, proposal_id: str, comment: str | None = None) -> Proposal:
        """Reject a proposal (its author withdraws it so): nothing lands."""
        return self._run(_Calls.decide(proposal_id, "reject", comment))


class AsyncClient(_Base):
    """Asynchronous client with the methods of ``Client``; use it with ``async with`` or ``aclose()``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._own = http is None
        self.http = http if http is not None else httpx.AsyncClient()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (unless it was handed in)."""
        if self._own:
            await self.http.aclose()

    async def _run(self, call: _Call[T]) -> T:
        try:
            response = await self.http.request(call.method, self.url + call.url, **self._send_kwargs(call))
        except httpx.TransportError as exc:
            raise _unreachable(self.url, exc) from exc
        return _answer(call, response)

    async def list_wikis(self) -> list[WikiInfo]:
        """Every wiki the caller may read, with its head."""
        return await self._run(_Calls.list_wikis())

    async def create_wiki(self, wiki: str, remote: str | None = None) -> WikiInfo:
        """Create a wiki (index.md, log.md, schema.md in one initial commit), or attach it to ``remote``."""
        return await self._run(_Calls.create_wiki(wiki, remote))

    async def list_pages(
        self, wiki: str, prefix: str = "", limit: int = 1000, cursor: str | None = None
    ) -> PageList:
        """One page of the files at the head under ``prefix``, sorted by path."""
        return await self._run(_Calls.list_pages(wiki, prefix, limit, cursor))

    async def iter_pages(self, wiki: str, prefix: str = "", page_size: int = 1000) -> AsyncIterator[PageInfo]:
        """Every file at the head under ``prefix``, following the cursors."""
        cursor: str | None = None
        while True:
            listing = await self.list_pages(wiki, prefix, page_size, cursor)
            for page in listing.pages:
                yield page
            if not listing.next_cursor:
                return
            cursor = listing.next_cursor

    async def read_page(self, wiki: str, path: str, *, sections: bool = False) -> Page:
        """A file at the head: content, encoding, version, size and commit; ``sections``: its heading tree
        with each section's address and version."""
        return await self._run(_Calls.read_page(wiki, path, sections))

    async def read_pages(
        self, wiki: str, paths: list[str], *, sections: bool = False, cursor: str | None = None
    ) -> PageSet:
        """Up to 100 files at one commit, in the order asked, and an error entry per path not read;
        ``next_cursor`` when the size budget left some unread (send the same paths with it as ``cursor``)."""
        return await self._run(_Calls.read_pages(wiki, paths, sections, cursor))

    async def read_bytes(self, wiki: str, path: str) -> bytes:
        """A file's exact bytes at the head."""
        return (await self.read_page(wiki, path)).data()

    async def backlinks(
        self, wiki: str, path: str, limit: int = 1000, cursor: str | None = None
    ) -> BacklinkList:
        """Every link at the head (outside code) that resolves to ``path``, with its page and line,
        ``limit`` at a time after ``cursor`` (the answer's ``next_cursor``)."""
        return await self._run(_Calls.backlinks(wiki, path, limit, cursor))

    async def search(
        self,
        wiki: str,
        query: str,
        limit: int = 100,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        prefix: str = "",
    ) -> list[Match]:
        """Lines at the head holding ``query`` (literal, or an RE2 pattern with ``regex``), ASCII case
        ignored unless ``case_sensitive``, in files under ``prefix``: the first ``limit``."""
        options = SearchOptions(regex, case_sensitive, prefix)
        return (await self._run(_Calls.search(wiki, query, limit, options))).matches

    async def search_page(
        self, wiki: str, query: str, limit: int = 100, options: SearchOptions | None = None
    ) -> MatchList:
        """One page of search hits (or of counts per page, with ``options.count``) and the ``next_cursor``
        (pass it in ``options.cursor`` for the next)."""
        return await self._run(_Calls.search(wiki, query, limit, options or SearchOptions()))

    async def commits(self, wiki: str, limit: int = 50) -> list[CommitInfo]:
        """Commits of ``main``, newest first."""
        return await self._run(_Calls.commits(wiki, limit))

    async def submit(
        self,
        wiki: str,
        batch: Batch | Mapping[str, Any],
        *,
        wait: float | bool = False,
        idempotency_key: str | None = None,
    ) -> Job:
        """Queue a batch; with ``wait`` (True, or seconds) long-poll its job until finished or that long."""
        job = await self._run(_Calls.submit(wiki, batch, idempotency_key))
        return job if job.finished or _budget(wait) == 0 else await self.job(job.job_id, wait=wait)

    async def check(self, wiki: str, batch: Batch | Mapping[str, Any], *, wait: float | bool = True) -> Job:
        """Dry-run a batch (nothing is committed): its job's result has ``applied``, ``diff`` and
        ``warnings``, or its error is what the real batch would hit."""
        return await self.submit(wiki, _dry(batch), wait=wait)

    async def job(self, job_id: str, *, wait: float | bool = False) -> Job:
        """A job; with ``wait`` (True, or seconds) long-poll until it is finished or that long."""
        budget = _budget(wait)
        end = None if budget is None else time.monotonic() + budget
        while True:
            left = MAX_WAIT if end is None else min(MAX_WAIT, end - time.monotonic())
            job = await self._run(_Calls.job(job_id, left))
            if job.finished or left <= 0 or (end is not None and time.monotonic() >= end):
                return job

    async def cancel(self, job_id: str) -> Job:
        """Cancel a job that has not started (``NOT_CANCELLABLE`` once it has)."""
        return await self._run(_Calls.cancel(job_id))

    async def jobs(self, wiki: str, status: str | None = None, limit: int = 50) -> list[Job]:
        """A wiki's recent jobs, newest first."""
        return await self._run(_Calls.jobs(wiki, status, limit))

    async def proposal(self, proposal_id: str, *, diffs: bool = True) -> Proposal:
        """A proposal: its state, revisions (each check's diff with ``diffs``), decision and landing."""
        return await self._run(_Calls.proposal(proposal_id, diffs))

    async def approve(self, proposal_id: str, comment: str | None = None) -> Proposal:
        """Approve an open proposal: it lands as reviewed."""
        return await self._run(_Calls.decide(proposal_id, "approve", comment))

    async def reject(self, proposal_id: str, comment: str | None = None) -> Proposal:
        """Reject a proposal: nothing lands."""
        return await self._run(_Calls.decide(proposal_id, "reject", comment))
