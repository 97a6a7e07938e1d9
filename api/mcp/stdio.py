"""``wikiq mcp``: the MCP tools over stdin/stdout, backed by the Python client against the API at ``url``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp.server.mcpserver import Context

from api.client import AsyncClient, ClientError, SearchOptions
from api.mcp.tools import Backend, Refused, build_server
from worker.schema.answers import BacklinkList, Job, MatchList, Page, PageList, PageSet, Proposal, WikiList
from worker.schema.edits import Batch, Limits, PlanSubmission


class ClientBackend:
    """The tools' backend over HTTP: each call is one API request (a refusal becomes ``Refused``)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def _call(self, call: Any) -> Any:
        try:
            return await call
        except ClientError as exc:
            raise Refused(exc.error) from None

    async def list_wikis(self) -> WikiList:
        return WikiList(wikis=await self._call(self.client.list_wikis()))

    async def list_pages(self, wiki: str, prefix: str, limit: int, cursor: str | None) -> PageList:
        found: PageList = await self._call(self.client.list_pages(wiki, prefix, limit, cursor))
        return found

    async def read_page(self, wiki: str, path: str, sections: bool) -> Page:
        found: Page = await self._call(self.client.read_page(wiki, path, sections=sections))
        return found

    async def read_pages(self, wiki: str, paths: list[str], sections: bool, cursor: str | None) -> PageSet:
        found: PageSet = await self._call(
            self.client.read_pages(wiki, paths, sections=sections, cursor=cursor)
        )
        return found

    async def backlinks(self, wiki: str, path: str, limit: int, cursor: str | None) -> BacklinkList:
        found: BacklinkList = await self._call(self.client.backlinks(wiki, path, limit, cursor))
        return found

    async def search(
        self,
        wiki: str,
        query: str,
        limit: int,
        regex: bool,
        case_sensitive: bool,
        prefix: str,
        cursor: str | None,
        *,
        outside_code: bool = False,
        multiline: bool = False,
        count: bool = False,
    ) -> MatchList:
        options = SearchOptions(regex, case_sensitive, prefix, cursor, outside_code, multiline, count)
        found: MatchList = await self._call(self.client.search_page(wiki, query, limit, options))
        return found

    async def submit(
        self, wiki: str, batch: Batch | PlanSubmission, wait: float, idempotency_key: str | None
    ) -> Job:
        job: Job = await self._call(
            self.client.submit(
                wiki,
                batch.model_dump(mode="json", exclude_none=True)
                if isinstance(batch, PlanSubmission)
                else batch,
                wait=wait or False,
                idempotency_key=idempotency_key,
            )
        )
        return job

    async def job(self, job_id: str, wait: float) -> Job:
        found: Job = await self._call(self.client.job(job_id, wait=wait))
        return found

    async def cancel(self, job_id: str) -> Job:
        found: Job = await self._call(self.client.cancel(job_id))
        return found

    async def proposal(self, proposal_id: str) -> Proposal:
        found: Proposal = await self._call(self.client.proposal(proposal_id, diffs=False))
        return found


def run_stdio(url: str | None = None, token: str | None = None, limits: Limits | None = None) -> None:
    """Serve the MCP tools over stdin/stdout against the API at ``url`` (``WIKIQ_URL`` / ``WIKIQ_TOKEN``);
    ``limits`` are the batch limits the descriptions state (the caller reads them from ``WIKIQ_MAX_*``)."""
    holder: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def pool(_: Any) -> AsyncIterator[None]:
        async with httpx.AsyncClient() as http:
            holder["http"] = http
            yield

    def backend_for(_: Context) -> Backend:
        return ClientBackend(AsyncClient(url, token, http=holder["http"]))

    build_server(backend_for, limits or Limits(), lifespan=pool).run("stdio")
