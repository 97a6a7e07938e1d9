"""A whole wikiq deployment in the test's event loop: the API app, a worker's consumers, real Redis and git.

Or the same ``Deployment`` over real processes (``processes``): an API, worker processes and a Redis server of
their own, started by ``tests.e2e.service.Service``, reached over loopback HTTP.

The API is ``create_app(settings)`` reached through ``httpx.ASGITransport`` with its lifespan entered here
(ASGITransport does not run it). Batches are consumed by one ``PartitionRunner`` per partition (arq's own
``Worker``, one job at a time) woken by the partition doorbells, exactly as a ``wikiq worker`` does, but as
tasks of this event loop: a submit → commit → long-poll round trip takes milliseconds and spawns nothing.

Each deployment gets a Redis database of its own (flushed at start) on the session's server, and a data
directory of its own, so modules never see each other's records. Pub/sub is shared between databases: a
long-poll woken by another deployment's job id just re-reads its record.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
from arq.connections import ArqRedis
from fastapi import FastAPI
from redis.exceptions import RedisError

from api.server.app import create_app
from tests.e2e.service import Service
from tests.gitutil import blob_id
from worker import keys
from worker.bootstrap import bootstrap, doorbells
from worker.jobs.connection import connect
from worker.jobs.consumer import PartitionRunner
from worker.jobs.context import JobContext
from worker.jobs.resources import Resources
from worker.redis_server import RedisServer
from worker.settings import Settings
from worker.tasks import cancel_and_wait

TEST_SECRET = "whsec_" + base64.b64encode(b"wikiq test secret, 32 bytes long").decode()
BASE_URL = "http://127.0.0.1:8080"
CEILING = 60.0  # seconds: only a hang takes this long; every wait ends on its event first
OWNER = "in-process-worker"
FINISHED = ("succeeded", "failed", "cancelled")
JOB_KEYS = {
    "job_id",
    "wiki",
    "status",
    "submitted_at",
    "started_at",
    "finished_at",
    "result",
    "error",
    "webhook",
}
INITIAL_FILES = {"index.md", "log.md", "schema.md"}

T = TypeVar("T")
_free_databases = set(range(1, 16))  # db 0 is left to the other tests; 16 databases by default
_serial = itertools.count()


def redis_url(server: RedisServer, db: int) -> str:
    """The URL of database ``db`` on ``server``."""
    return f"redis://127.0.0.1:{server.port}/{db}"


class InProcessWorker:
    """A worker's batch consumers as tasks of the running loop: one ``PartitionRunner`` per partition,
    holding that partition's lease, woken by one blocking pop over the doorbells (like ``wikiq worker``).

    ``paused()`` stops consuming, so a submitted job stays ``queued`` until the block ends.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runners: dict[int, PartitionRunner] = {}
        self.bells: asyncio.Task[None] | None = None
        self.held = contextlib.AsyncExitStack()  # its own resources, as a worker process has (bootstrap)
        self._resources: Resources | None = None
        self.bell_redis: ArqRedis | None = None

    @property
    def resources(self) -> Resources:
        """What job functions are handed (``ctx["resources"]``), once started."""
        assert self._resources is not None, "the worker was not started"
        return self._resources

    def context(self, job_try: int = 1) -> JobContext:
        """An arq ``ctx`` for calling a job function directly (``apply_batch(ctx, job_id)``)."""
        return {"resources": self.resources, "redis": self.resources.redis, "job_try": job_try}

    async def start(self) -> None:
        """Take every partition's lease and start its consumer and the doorbell loop."""
        if self._resources is None:
            self._resources = await self.held.enter_async_context(bootstrap(self.settings))
            self.bell_redis = await self.held.enter_async_context(doorbells(self.settings))
        resources = self.resources
        for partition in range(self.settings.partitions):
            await resources.redis.set(keys.lease(partition), OWNER)
            runner = PartitionRunner(partition, resources, OWNER)
            runner.start()
            self.runners[partition] = runner
        self.bells = asyncio.create_task(self._ring_loop(), name="in-process-doorbells")

    async def _ring_loop(self) -> None:
        assert self.bell_redis is not None
        names = [keys.bell(p) for p in self.runners]
        while True:
            try:
                popped = await cast(Awaitable[Any], self.bell_redis.blpop(names, timeout=1))
            except RedisError:
                await asyncio.sleep(0.2)  # back off while Redis is away (the runners re-check on their own)
                continue
            if popped is None:
                continue
            name = popped[0].decode() if isinstance(popped[0], bytes) else popped[0]
            runner = self.runners.get(int(name.rsplit(":", 1)[1]))
            if runner is not None:
                runner.wake.set()

    async def stop(self) -> None:
        """Stop consuming after the jobs in flight."""
        if self.bells is not None:
            await cancel_and_wait(self.bells)
            self.bells = None
        for runner in self.runners.values():
            await runner.stop(grace=CEILING)
            # stop() can return while a job it started in its last poll still runs: wait for that job too
            if runner.worker.tasks:
                await asyncio.wait(list(runner.worker.tasks.values()), timeout=CEILING)
        self.runners.clear()

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Within the block no job starts; afterwards consuming resumes, queued jobs first."""
        await self.stop()
        try:
            yield
        finally:
            await self.start()

    async def close(self) -> None:
        """Stop and let go of every resource."""
        await self.stop()
        await self.held.aclose()


class ProcessWorkers(InProcessWorker):
    """The worker processes of a ``Service`` behind ``InProcessWorker``'s interface: ``stop`` ends them
    gracefully (SIGTERM, their jobs in flight finish), ``start`` starts as many again, so ``paused()`` works
    alike; ``resources`` and ``context`` (a job function called in this process) have no process
    counterpart."""

    def __init__(self, service: Service, count: int) -> None:
        self.service = service
        self.count = count

    @property
    def resources(self) -> Resources:
        """Not available: the jobs run in other processes."""
        raise TypeError("a deployment of processes has no in-process worker resources")

    async def start(self) -> None:
        """Start the worker processes."""
        for _ in range(self.count - len(self.service.workers)):
            self.service.start_worker()

    async def stop(self) -> None:
        """End every worker process after its jobs in flight."""
        await asyncio.to_thread(self.service.stop_workers)

    async def close(self) -> None:
        """Nothing of its own: the service stops its processes."""


class Deployment:
    """The app, its HTTP clients and its worker, with the API helpers tests share.

    Over real processes (``processes``) there is no ``app``; clients talk HTTP to ``url`` instead.
    """

    def __init__(
        self,
        settings: Settings,
        app: FastAPI | None,
        worker: InProcessWorker,
        redis: ArqRedis,
        service: Service | None = None,
    ) -> None:
        self.settings = settings
        self._app = app
        self.worker = worker
        self.redis = redis
        self.service = service
        self.clients: list[httpx.AsyncClient] = []
        self.client = self.as_(None)

    @property
    def processes(self) -> bool:
        """Whether this deployment is real processes (else the app in this event loop)."""
        return self.service is not None

    @property
    def app(self) -> FastAPI:
        """The in-process app (a deployment of processes has none)."""
        if self._app is None:
            raise TypeError("a deployment of processes has no in-process app")
        return self._app

    @property
    def url(self) -> str:
        """The base URL its clients send to."""
        return BASE_URL if self.service is None else self.service.url

    @property
    def data(self) -> Path:
        """The data directory (wikis are ``<data>/wikis/<id>.git``)."""
        return Path(self.settings.data_dir)

    def repo(self, wiki: str) -> Path:
        """The bare repository of ``wiki``."""
        return self.data / "wikis" / f"{wiki}.git"

    def as_(self, token: str | None, raise_app_exceptions: bool = True) -> httpx.AsyncClient:
        """A client of the app sending ``Authorization: Bearer <token>`` (None: no header)."""
        headers = {} if token is None else {"authorization": f"Bearer {token}"}
        transport = None
        if self.service is None:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=raise_app_exceptions)
        client = httpx.AsyncClient(
            transport=transport, base_url=self.url, headers=headers, timeout=CEILING * 2
        )
        self.clients.append(client)
        return client

    async def close(self) -> None:
        """Close every client handed out."""
        for client in self.clients:
            await client.aclose()

    # -- API helpers ------------------------------------------------------------------------------

    async def new_wiki(self, stem: str) -> str:
        """Create a wiki with an id no other test uses; its id."""
        wiki = f"{stem}-{next(_serial)}"
        await self.create_wiki(wiki)
        return wiki

    async def create_wiki(self, wiki: str) -> str:
        """Create ``wiki``; its initial head."""
        answer = await self.client.post("/v1/wikis", json={"id": wiki})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["head"])

    async def submit(
        self,
        wiki: str,
        batch: dict[str, Any],
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """POST a batch (as ``client``, by default the deployment's own)."""
        return await (client or self.client).post(f"/v1/wikis/{wiki}/batches", json=batch, headers=headers)

    async def submit_ok(
        self, wiki: str, batch: dict[str, Any], client: httpx.AsyncClient | None = None
    ) -> str:
        """Submit a batch that must be accepted (202 queued, with its status URL); its job id."""
        answer = await self.submit(wiki, batch, client)
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert set(body) == {"job_id", "status", "status_url"}, body
        assert body["status"] == "queued", body
        assert body["status_url"] == f"/v1/jobs/{body['job_id']}", body
        return str(body["job_id"])

    async def wait(self, job_id: str, client: httpx.AsyncClient | None = None) -> dict[str, Any]:
        """Long-poll a job until it is finished; the ceiling only catches a hang."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CEILING
        while True:
            answer = await (client or self.client).get(f"/v1/jobs/{job_id}", params={"wait": 30})
            assert answer.status_code == 200, answer.text
            job = dict(answer.json())
            if job["status"] in FINISHED:
                return job
            assert loop.time() < deadline, f"job {job_id} did not finish: {job}"

    async def apply(self, wiki: str, batch: dict[str, Any]) -> dict[str, Any]:
        """Submit a batch and wait for its job."""
        return await self.wait(await self.submit_ok(wiki, batch))

    async def seed(self, wiki: str, files: dict[str, str]) -> dict[str, str]:
        """Create ``files`` in one batch; their versions by path."""
        edits = [{"op": "create", "path": p, "content": c} for p, c in files.items()]
        job = await self.apply(wiki, {"message": "seed", "edits": edits})
        assert job["status"] == "succeeded", job
        return {path: blob_id(content.encode()) for path, content in files.items()}

    async def page(self, wiki: str, path: str) -> dict[str, Any]:
        """A page at the head (asserting it exists)."""
        answer = await self.client.get(f"/v1/wikis/{wiki}/pages/{path}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    async def pages(self, wiki: str, **params: Any) -> dict[str, dict[str, Any]]:
        """Every file at the head (one unpaged listing), by path."""
        answer = await self.client.get(f"/v1/wikis/{wiki}/pages", params={"limit": 10_000, **params})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["next_cursor"] is None, body
        return {entry["path"]: entry for entry in body["pages"]}

    async def commits(self, wiki: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The wiki's commits, newest first."""
        answer = await self.client.get(f"/v1/wikis/{wiki}/commits", params={"limit": limit})
        assert answer.status_code == 200, answer.text
        return list(answer.json()["commits"])

    async def head(self, wiki: str) -> str:
        """The wiki's head commit."""
        return str((await self.commits(wiki, 1))[0]["commit"])

    async def jobs(self, wiki: str, **params: Any) -> list[dict[str, Any]]:
        """The wiki's recent jobs, newest first."""
        answer = await self.client.get(f"/v1/wikis/{wiki}/jobs", params=params)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["jobs"])


@contextlib.asynccontextmanager
async def deployment(server: RedisServer, root: Path, **overrides: Any) -> AsyncIterator[Deployment]:
    """A deployment on a fresh Redis database of ``server`` and a fresh data directory under ``root``, with
    ``settings_of`` (``overrides`` replacing any)."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    assert _free_databases, "more live deployments than Redis databases"
    db = min(_free_databases)
    _free_databases.remove(db)
    url = redis_url(server, db)
    try:
        settings = Settings(**settings_of(url, data, overrides))
        redis = await connect(url)
        try:
            await redis.flushdb()
            app = create_app(settings)
            worker = InProcessWorker(settings)
            async with app.router.lifespan_context(app):
                try:
                    await worker.start()
                    deployed = Deployment(settings, app, worker, redis)
                    try:
                        yield deployed
                    finally:
                        await deployed.close()
                finally:
                    await worker.close()
        finally:
            await redis.aclose()
    finally:
        _free_databases.add(db)


def settings_of(url: str, data: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """The settings of a test deployment: those of the process-level tests (private webhook hosts allowed,
    a webhook secret, no rate limit) with two partitions and no webhook sender process (worker processes
    take first attempts from the outbox, as ``WIKIQ_WEBHOOK_SENDERS=false`` has them do; in process the
    tests drive a taker themselves); ``overrides`` replace any."""
    return {
        "redis_url": url,
        "data_dir": data,
        "partitions": 2,
        "webhook_allow_private": True,
        "webhook_secret": TEST_SECRET,
        "rate_limit_submissions": 0,
        "redeliver_interval_seconds": 0,
        "webhook_senders": False,
        **overrides,
    }


def environment(values: dict[str, Any]) -> dict[str, str]:
    """``values`` of ``Settings`` as the ``WIKIQ_*`` variables a process reads them from."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple | list):
            return ",".join(text(part) for part in value)  # a list setting is read comma-separated
        return str(value)

    return {f"WIKIQ_{name.upper()}": text(value) for name, value in values.items() if value is not None}


class Services:
    """Deployments of real processes (``Service``), started on first use and shared by every module asking
    for the same settings (each test works on wikis of its own); all stopped by ``stop``."""

    WORKERS = 2  # so that work is split between worker processes

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[str, tuple[Service, Settings]] = {}

    def get(self, overrides: dict[str, Any]) -> tuple[Service, Settings]:
        """The running service with ``settings_of`` these overrides, and those settings."""
        key = repr(sorted(overrides.items()))
        if key not in self.started:
            service = Service(self.root / f"processes-{len(self.started)}")
            values = settings_of(service.redis.url, service.data, overrides)
            settings = Settings(**values)
            own = ("WIKIQ_REDIS_URL", "WIKIQ_DATA_DIR")  # the service's own, already set
            service.env.update({k: v for k, v in environment(values).items() if k not in own})
            self.started[key] = (service.start(self.WORKERS, int(settings.webhook_senders)), settings)
        return self.started[key]

    def stop(self) -> None:
        """Stop every service started, all at once (each waits for its processes to end)."""
        services = [service for service, _ in self.started.values()]
        with ThreadPoolExecutor(max(1, len(services))) as pool:
            list(pool.map(Service.stop, services))


@contextlib.asynccontextmanager
async def process_deployment(services: Services, **overrides: Any) -> AsyncIterator[Deployment]:
    """A deployment of real processes (one API, ``Services.WORKERS`` workers, a webhook sender if the
    settings want one, their own Redis) with the settings ``deployment`` gives, passed as variables."""
    service, settings = await asyncio.to_thread(services.get, overrides)
    redis = await connect(service.redis.url)
    try:
        deployed = Deployment(settings, None, ProcessWorkers(service, services.WORKERS), redis, service)
        try:
            yield deployed
        finally:
            await deployed.close()
    finally:
        await redis.aclose()


@contextlib.asynccontextmanager
async def hosted(manager: contextlib.AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """``manager`` entered and exited by a task of its own.

    The app's lifespan holds anyio task groups (the MCP session manager), which must be exited by the task
    that entered them; pytest-asyncio sets a fixture up and tears it down in different tasks.
    """
    entered: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    leave = asyncio.Event()

    async def host() -> None:
        try:
            async with manager as value:
                entered.set_result(value)
                await leave.wait()
        except BaseException as exc:
            if entered.done():
                raise
            entered.set_exception(exc)

    task = asyncio.create_task(host(), name="deployment-host")
    try:
        yield await entered
    finally:
        leave.set()
        await task


# -- assertions on answers -------------------------------------------------------------------------------


def expect_error(answer: httpx.Response, status: int, code: str, index: int | None = None) -> dict[str, Any]:
    """Assert ``answer`` is the contract's error object with this status, code and index; the error."""
    error = expect_error_shape(answer, status)
    assert error["code"] == code, answer.text
    assert error["index"] == index, answer.text
    return error


def expect_error_shape(answer: httpx.Response, status: int) -> dict[str, Any]:
    """Assert ``answer`` has this status and exactly the contract's error object, no trace; the error."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    body = answer.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    check_error_object(error)
    assert isinstance(error["code"], str) and error["code"], body
    assert isinstance(error["message"], str) and error["message"], body
    assert error["index"] is None or isinstance(error["index"], int), body
    assert "Traceback" not in answer.text and 'File "' not in answer.text, body
    return dict(error)


# details: some refusals; errors, unchecked: batches; plan: a failed check, to amend (its submitter)
OPTIONAL_ERROR_KEYS = {"details", "errors", "unchecked", "plan"}


def check_error_object(error: dict[str, Any]) -> None:
    """Assert ``error`` is the contract's error object: code, message, index, and the optional keys; a
    batch's ``errors`` lists failing edits in order, the first being the error itself."""
    assert set(error) - OPTIONAL_ERROR_KEYS == {"code", "message", "index"}, error
    assert isinstance(error.get("details", {}), dict), error
    if "errors" in error:
        listed = error["errors"]
        assert listed and all(set(e) - {"details"} == {"code", "message", "index"} for e in listed), error
        assert (listed[0]["code"], listed[0]["index"]) == (error["code"], error["index"]), error
    assert isinstance(error.get("unchecked", 0), int), error
    assert str(error.get("plan", "plan-")).startswith("plan-"), error


def check_job(job: dict[str, Any], wiki: str, status: str) -> None:
    """Assert the job object has the contract's fields, this wiki and status, and ordered timestamps."""
    assert set(job) >= JOB_KEYS, job
    assert job["wiki"] == wiki, job
    assert job["status"] == status, job
    submitted = datetime.fromisoformat(job["submitted_at"])
    if status in ("succeeded", "failed"):
        assert job["started_at"] is not None and job["finished_at"] is not None, job
        started = datetime.fromisoformat(job["started_at"])
        finished = datetime.fromisoformat(job["finished_at"])
        assert submitted <= started <= finished, job
    if status == "succeeded":
        assert job["error"] is None, job
        # a dry run also answers a diff per changed file, warnings, the batch's checks and (to its
        # submitter) a plan
        dry = {"diff", "warnings", "checks", "plan"} if job.get("dry_run") else set()
        assert (
            {"commit", "applied"} | (dry - {"plan"}) <= set(job["result"]) <= {"commit", "applied"} | dry
        ), job
    if status == "failed":
        assert job["result"] is None, job
        check_error_object(job["error"])
    if status in ("queued", "cancelled"):
        assert job["started_at"] is None and job["result"] is None, job


def create(path: str, content: str = "x\n") -> dict[str, Any]:
    """A create edit."""
    return {"op": "create", "path": path, "content": content}
