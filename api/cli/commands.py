"""The client commands of ``wikiq`` (wikis, pages, read, outline, search, backlinks, submit, job, cancel,
jobs, log, mcp).

Each talks to the API at ``--url`` / ``WIKIQ_URL`` with ``--token`` / ``WIKIQ_TOKEN``. Tables and the live
status line are for people; ``--json`` prints only JSON on stdout, for scripts (an error too, as the
contract's ``{"error": {...}}``). Exit codes: 0 success, 1 refused (a batch refused or a job that failed or
was cancelled, or any other refusal of the API), 2 bad usage, 3 server unreachable.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from api.client import Client, ClientError, ConnectionFailed, SearchOptions, settings_from_env
from worker.schema.answers import Answer, Job, JobResult, Proposal

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
POLL = 2.0  # seconds of each long-poll while a status line is shown: it wakes at once when the job ends

Url = Annotated[
    str | None,
    typer.Option("--url", envvar="WIKIQ_URL", help="API address (default http://127.0.0.1:8080)"),
]
Token = Annotated[
    str | None, typer.Option("--token", envvar="WIKIQ_TOKEN", help="bearer token", show_default=False)
]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON only, for scripts")]
Wiki = Annotated[str, typer.Argument(help="wiki id")]


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console.width = 240  # piped output: never fold paths and ids at 80 columns
    return console


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _dump(model: Answer) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_unset=True)


def _fail(exc: ClientError, as_json: bool, code: int) -> NoReturn:
    if as_json:
        _print_json({"error": exc.error.model_dump(mode="json")})
    else:
        where = f" at edit {exc.index}" if exc.index is not None else ""
        _console(stderr=True).print(f"[red]wikiq: {exc.code}{where}:[/red] {escape(exc.message)}")
    raise typer.Exit(code)


@contextmanager
def _client(url: str | None, token: str | None, as_json: bool) -> Iterator[Client]:
    """A client for the command; API refusals exit 1, an unreachable server exits 3."""
    base, _ = settings_from_env(url, token)
    if not base.startswith(("http://", "https://")):
        typer.echo(f"wikiq: --url must start with http:// or https://, not {base!r}", err=True)
        raise typer.Exit(EXIT_USAGE)
    try:
        with Client(url, token) as client:
            yield client
    except ConnectionFailed as exc:
        _fail(exc, as_json, EXIT_UNREACHABLE)
    except ClientError as exc:
        _fail(exc, as_json, EXIT_REFUSED)


def _short(value: str | None, n: int = 12) -> str:
    return "-" if value is None else value[:n]


def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ignore")
    return table


def _show_job(job: Job) -> None:
    """Print a job for people: its status, then the commit and applied table, or the error."""
    out = _console()
    color = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(job.status, "cyan")
    dry = " (dry run)" if job.dry_run else ""
    out.print(f"job {job.job_id} [{color}]{job.status}[/{color}]{dry} on {job.wiki or '?'}")
    if job.error is not None:
        where = f" at edit {job.error.index}" if job.error.index is not None else ""
        out.print(f"[red]{job.error.code}{where}:[/red] {escape(job.error.message)}")
    if job.result is not None:
        out.print(f"commit {job.result.commit}" if job.result.commit else "no commit (dry run)")
        table = _table("#", "op", "path", "version", "count")
        for entry in job.result.applied:
            path = f"{entry.path} -> {entry.new_path}" if entry.new_path else entry.path
            count = "" if entry.count is None else str(entry.count)
            table.add_row(str(entry.index), entry.op, escape(path), _short(entry.version), count)
        out.print(table)
        _show_review(out, job.result)
        if job.result.plan:
            out.print(f"commit exactly this with: wikiq commit-plan {job.wiki} {job.result.plan}")
    if job.proposal:
        out.print(
            f"proposal {job.proposal}: it lands once approved; follow it with: wikiq proposal {job.proposal}"
        )


def _show_review(out: Console, result: JobResult) -> None:
    """A dry run's diff (colored unified diff per file) and warnings."""
    for entry in result.diff or []:
        title = f"{entry.old_path} -> {entry.path}" if entry.old_path else entry.path
        out.rule(escape(title), align="left", style="dim")
        if entry.diff:
            out.print(
                Syntax(entry.diff, "diff", theme="ansi_dark", background_color="default", word_wrap=True)
            )
        if entry.truncated:
            out.print("[yellow](diff cut: the answer's diff budget is spent)[/yellow]")
    if result.warnings is None:
        return
    if not result.warnings:
        out.print("[green]no warnings[/green]")
        return
    table = _table("warning", "path", "line", "message")
    for warning in result.warnings:
        line = "" if warning.line is None else str(warning.line)
        table.add_row(f"[yellow]{warning.code}[/yellow]", escape(warning.path), line, escape(warning.message))
    out.print(table)


def _watch(client: Client, job: Job) -> Job:
    """Long-poll ``job`` until it is finished, with a live status line on stderr."""
    started = time.monotonic()
    with _console(stderr=True).status(f"job {job.job_id}: {job.status}") as status:
        while not job.finished:
            job = client.job(job.job_id, wait=POLL)
            status.update(f"job {job.job_id}: {job.status} ({time.monotonic() - started:.0f} s)")
    return job


def _finish(job: Job, as_json: bool) -> None:
    """Print the job and exit 1 when its batch was not applied (failed or cancelled)."""
    if as_json:
        _print_json(_dump(job))
    else:
        _show_job(job)
    if job.status in ("failed", "cancelled"):
        raise typer.Exit(EXIT_REFUSED)


def wikis(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """List the wikis you may read, with their head commits."""
    with _client(url, token, as_json) as client:
        found = client.list_wikis()
    if as_json:
        _print_json({"wikis": [_dump(w) for w in found]})
        return
    table = _table("wiki", "head", "remote", "published")
    for wiki in found:
        problems = f" ({len(wiki.problems)} problems)" if wiki.problems else ""
        table.add_row(wiki.id, _short(wiki.head), (wiki.remote or "-") + problems, wiki.published_at or "-")
    _console().print(table)


def create_wiki(
    wiki: Wiki,
    remote: Annotated[
        str | None,
        typer.Option(
            "--remote", help="attach to this remote of the server's remotes file (a name, not a URL)"
        ),
    ] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Create a wiki (index.md, log.md and schema.md in one initial commit), or attach it to a git remote."""
    with _client(url, token, as_json) as client:
        made = client.create_wiki(wiki, remote)
    if as_json:
        _print_json(_dump(made))
    elif remote is not None:
        _console().print(f"attached {made.id} to remote {remote} at {made.head}")
        for problem in made.problems or []:
            _console().print(f"[yellow]problem:[/yellow] {escape(problem)}")
    else:
        _console().print(f"created {made.id} at {made.head}")


def pages(
    wiki: Wiki,
    prefix: Annotated[str, typer.Option(help="only paths starting with this")] = "",
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List the files at a wiki's head with their sizes and versions."""
    with _client(url, token, as_json) as client:
        found = list(client.iter_pages(wiki, prefix))
    if as_json:
        _print_json({"pages": [_dump(p) for p in found]})
        return
    table = _table("path", "size", "version")
    for page in found:
        table.add_row(escape(page.path), str(page.size), _short(page.version))
    _console().print(table)


def read(
    wiki: Wiki,
    path: Annotated[str, typer.Argument(help="file path, e.g. wiki/redis.md")],
    raw: Annotated[bool, typer.Option("--raw", help="write the file's exact bytes, nothing else")] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print a file at a wiki's head (its version and commit on stderr)."""
    with _client(url, token, as_json) as client:
        page = client.read_page(wiki, path)
    if as_json:
        _print_json(_dump(page))
        return
    if not raw:
        note = f"{page.path} version {page.version}, {page.size} bytes, commit {page.commit}"
        _console(stderr=True).print(f"[dim]{escape(note)}[/dim]")
        if page.encoding != "utf-8":
            _console(stderr=True).print("not UTF-8 text: use --raw to write its bytes")
            return
    sys.stdout.buffer.write(page.data())
    sys.stdout.flush()


def outline(
    wiki: Wiki,
    path: Annotated[str, typer.Argument(help="file path, e.g. wiki/redis.md")],
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print a page's heading tree: each section's lines, address (a section op's heading) and version."""
    with _client(url, token, as_json) as client:
        page = client.read_page(wiki, path, sections=True)
    if as_json:
        _print_json(
            {"path": page.path, "version": page.version, "sections": [_dump(s) for s in page.sections or []]}
        )
        return
    _console(stderr=True).print(f"[dim]{escape(page.path)} version {page.version}[/dim]")
    table = _table("lines", "level", "address", "version")
    for section in page.sections or []:
        lines = f"{section.line}-{section.end_line}"
        table.add_row(lines, "#" * section.level, escape(section.address), _short(section.version))
    _console().print(table)


def search(
    wiki: Wiki,
    query: Annotated[
        str, typer.Argument(help="text to find (literal, ASCII case ignored), or an RE2 pattern")
    ],
    limit: Annotated[int, typer.Option(help="at most this many matches")] = 100,
    regex: Annotated[
        bool, typer.Option("--regex", help="the query is an RE2 pattern (^ $ at line ends)")
    ] = False,
    case_sensitive: Annotated[
        bool, typer.Option("--case-sensitive", help="match letter case exactly")
    ] = False,
    prefix: Annotated[str, typer.Option(help="only files whose path starts with this")] = "",
    cursor: Annotated[str | None, typer.Option(help="resume where an earlier search stopped")] = None,
    outside_code: Annotated[
        bool, typer.Option("--outside-code", help="only in prose: never in code, HTML or front matter")
    ] = False,
    multiline: Annotated[bool, typer.Option("--multiline", help="a pattern's match may span lines")] = False,
    count: Annotated[
        bool,
        typer.Option("--count", help="matches per page as replace_across counts them, and their total"),
    ] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print the lines at a wiki's head that match, as path:line: text, or with --count each page's
    matches as path: count and the total (the cursor for more on stderr)."""
    options = SearchOptions(
        regex=regex,
        case_sensitive=case_sensitive,
        prefix=prefix,
        cursor=cursor,
        outside_code=outside_code,
        multiline=multiline,
        count=count,
    )
    with _client(url, token, as_json) as client:
        found = client.search_page(wiki, query, limit, options)
    if as_json:
        _print_json(_dump(found))
        return
    for match in found.matches:
        typer.echo(f"{match.path}:{match.line}: {match.text}")
    for page in found.pages or ():
        typer.echo(f"{page.path}: {page.count}")
    if count:
        typer.echo(f"total: {found.total}")
    if found.next_cursor:
        typer.echo(f"more: --cursor {found.next_cursor}", err=True)


def backlinks(
    wiki: Wiki,
    path: Annotated[str, typer.Argument(help="the page linked to, e.g. wiki/redis.md")],
    limit: Annotated[int, typer.Option(help="at most this many links")] = 1000,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print every link to a page (outside code), as path:line: link."""
    with _client(url, token, as_json) as client:
        found = client.backlinks(wiki, path, limit)
    if as_json:
        _print_json(_dump(found))
        return
    for link in found.backlinks:
        typer.echo(f"{link.path}:{link.line}: {link.text}")
    if found.truncated:
        typer.echo(f"more than {limit} links; raise --limit", err=True)


def _load_batch(source: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"wikiq: cannot read {source}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    try:
        batch = json.loads(text)
    except json.JSONDecodeError as exc:
        typer.echo(f"wikiq: {source} is not JSON: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if not isinstance(batch, dict):
        typer.echo(f"wikiq: {source} must hold a JSON object {{message, edits}}", err=True)
        raise typer.Exit(EXIT_USAGE)
    return batch


def submit(
    wiki: Wiki,
    batch_file: Annotated[str, typer.Argument(metavar="BATCH.json", help="the batch as JSON; - for stdin")],
    wait: Annotated[bool, typer.Option("--wait", help="wait for the job, with a live status line")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="check only: show the diff and warnings, commit nothing")
    ] = False,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="same key + same batch = same job")
    ] = None,
    propose: Annotated[
        bool, typer.Option("--propose", help="a proposal: it lands once someone else approves it")
    ] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit a batch of edits; with --wait, show its commit and applied edits (exit 1 if refused); with
    --dry-run, check it and show the colored diff of every file and the warnings (implies --wait). A
    token holding only propose (or --propose) makes it a proposal, shown by ``wikiq proposal``."""
    batch = _load_batch(batch_file)
    if dry_run:
        batch["dry_run"], wait = True, True
    if propose:
        batch["propose"] = True
    _submit_and_show(wiki, batch, idempotency_key, wait, url, token, as_json)


def commit_plan(
    wiki: Wiki,
    plan: Annotated[str, typer.Argument(help="the plan a dry run printed (submit --dry-run)")],
    message: Annotated[str | None, typer.Option(help="the commit message (default: the dry run's)")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="wait for the job, with a live status line")] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Commit exactly what a dry run checked, without sending the batch again (exit 1 with --wait if it
    fails, e.g. PLAN_STALE when a file it touches changed since)."""
    body: dict[str, Any] = {"plan": plan}
    if message is not None:
        body["message"] = message
    _submit_and_show(wiki, body, None, wait, url, token, as_json)


def _submit_and_show(
    wiki: str,
    body: dict[str, Any],
    idempotency_key: str | None,
    wait: bool,
    url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Submit ``body``; show the finished job (waiting for it with ``wait``), or how to follow it."""
    with _client(url, token, as_json) as client:
        job = client.submit(wiki, body, idempotency_key=idempotency_key)
        if wait and not job.finished:
            job = client.job(job.job_id, wait=True) if as_json else _watch(client, job)
    if wait or job.finished:
        _finish(job, as_json)
    elif as_json:
        _print_json(_dump(job))
    else:
        _console().print(f"job {job.job_id} {job.status}; follow it with: wikiq job {job.job_id} --watch")


def job(
    job_id: Annotated[str, typer.Argument(help="job id")],
    watch: Annotated[bool, typer.Option("--watch", help="wait until the job is finished")] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show a job (exit 1 if it failed or was cancelled); --watch waits for it with a live status line."""
    with _client(url, token, as_json) as client:
        found = client.job(job_id)
        if watch and not found.finished:
            found = client.job(job_id, wait=True) if as_json else _watch(client, found)
    _finish(found, as_json)


def cancel(
    job_id: Annotated[str, typer.Argument(help="job id")],
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Cancel a job that has not started (exit 1 with NOT_CANCELLABLE once it has)."""
    with _client(url, token, as_json) as client:
        done = client.cancel(job_id)
    if as_json:
        _print_json(_dump(done))
    else:
        _console().print(f"job {done.job_id} {done.status}")


def jobs(
    wiki: Wiki,
    status: Annotated[str | None, typer.Option(help="only jobs with this status")] = None,
    limit: Annotated[int, typer.Option(help="at most this many jobs")] = 50,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List a wiki's recent jobs, newest first."""
    with _client(url, token, as_json) as client:
        found = client.jobs(wiki, status, limit)
    if as_json:
        _print_json({"jobs": [_dump(j) for j in found]})
        return
    table = _table("job", "status", "submitted", "outcome")
    for item in found:
        if item.error is not None:
            where = f" at edit {item.error.index}" if item.error.index is not None else ""
            outcome = item.error.code + where
        elif item.result is not None:
            outcome = f"commit {_short(item.result.commit)}" if item.result.commit else "dry run ok"
        else:
            outcome = ""
        table.add_row(item.job_id, item.status, item.submitted_at or "", outcome)
    _console().print(table)


def log(
    wiki: Wiki,
    limit: Annotated[int, typer.Option(help="at most this many commits")] = 50,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List a wiki's commits, newest first, with the job that made each."""
    with _client(url, token, as_json) as client:
        commits = client.commits(wiki, limit)
    if as_json:
        _print_json({"commits": [_dump(c) for c in commits]})
        return
    table = _table("commit", "time", "author", "job", "message")
    for commit in commits:
        subject = commit.message.splitlines()[0] if commit.message else ""
        author = escape(commit.author.name)
        table.add_row(_short(commit.commit), commit.time, author, commit.job_id or "-", escape(subject))
    _console().print(table)


def mcp(url: Url = None, token: Token = None) -> None:
    """Serve wikiq's MCP tools over stdin/stdout for a local agent host (calls the API at --url)."""
    from api.mcp.stdio import run_stdio
    from worker.settings import SettingsError, load_settings

    try:  # the descriptions state the batch limits: the same WIKIQ_MAX_* variables the server reads
        limits = load_settings().limits
    except SettingsError as exc:
        typer.echo(f"wikiq: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    run_stdio(url, token, limits)


ProposalId = Annotated[str, typer.Argument(help="proposal id (prop-...)")]
Comment = Annotated[str | None, typer.Option(help="a comment for its author")]


def proposal(
    proposal_id: ProposalId,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Show a proposal: its state, author, message, each check and the decision; the diff of its latest
    check."""
    with _client(url, token, as_json) as client:
        found = client.proposal(proposal_id)
    _show_proposal(found, as_json)


def approve(
    proposal_id: ProposalId,
    comment: Comment = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Approve an open proposal: it lands exactly as checked (then ``landed``), or turns ``stale``."""
    with _client(url, token, as_json) as client:
        found = client.approve(proposal_id, comment)
    _show_proposal(found, as_json)


def reject(
    proposal_id: ProposalId,
    comment: Comment = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Reject a proposal (its author withdraws it so): nothing lands."""
    with _client(url, token, as_json) as client:
        found = client.reject(proposal_id, comment)
    _show_proposal(found, as_json)


def _show_proposal(found: Proposal, as_json: bool) -> None:
    if as_json:
        _print_json(_dump(found))
        return
    out = _console()
    out.print(
        f"proposal {found.proposal_id} [cyan]{found.state}[/cyan] on {found.wiki}, by {found.author.name}"
    )
    out.print(escape(found.message.splitlines()[0] if found.message else ""))
    for revision in found.revisions:
        out.print(f"check {revision.revision}: job {revision.job_id} {revision.status}")
    if found.decision is not None:
        verdict = "approved" if found.decision.approved else "rejected"
        note = f": {escape(found.decision.comment)}" if found.decision.comment else ""
        out.print(f"{verdict} by {found.decision.by.name}{note}")
    if found.commit:
        out.print(f"commit {found.commit}")
    if found.stale_paths:
        out.print(f"[yellow]stale:[/yellow] {escape(', '.join(found.stale_paths))} changed since the check")
    latest = found.revisions[-1].result if found.revisions else None
    if latest is not None:
        _show_review(out, latest)
    out.print(f"review it at: {found.review_url}")


def register(app: typer.Typer) -> None:
    """Add the client commands to the ``wikiq`` typer app."""
    commands = (
        wikis,
        create_wiki,
        pages,
        read,
        outline,
        search,
        backlinks,
        submit,
        commit_plan,
        job,
        cancel,
        jobs,
        proposal,
        approve,
        reject,
        log,
        mcp,
    )
    for command in commands:
        app.command(command.__name__.replace("_", "-"))(command)
