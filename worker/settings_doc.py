"""Writes ``docs/configuration.md`` from the settings model, so the page cannot drift from the code.

``python -m worker.settings_doc`` rewrites the page; ``--check`` exits 1 when the page differs from what
would be written (``tests/docs/test_configuration_doc.py`` runs the same comparison). Names, types,
defaults and bounds come from ``worker.settings.Settings``; what each setting means, and the group it is
listed under, come from ``GROUPS`` below: a setting missing there, or a name there the model lacks, stops
the generator with a message naming it.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from worker.settings import Settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

# (group title, {field name: what it means}); the page lists the groups and their settings in this order.
GROUPS: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "Redis and acceptance",
        {
            "redis_url": "Redis (or Valkey) to use. `wikiq dev` / `make run` start an embedded server unless "
            "this or `WIKIQ_REDIS_SENTINELS` is set. A password in the URL is never printed.",
            "redis_sentinels": "`host:port,host:port,...` of Redis Sentinels; with "
            "`WIKIQ_REDIS_SENTINEL_MASTER` they replace `WIKIQ_REDIS_URL` (see deployment.md).",
            "redis_sentinel_master": "The name of the primary the sentinels watch; required with "
            "`WIKIQ_REDIS_SENTINELS`, refused without it.",
            "accept_durability": "What a `202` promises: `none` (the job is in Redis' memory), `local` "
            "(fsynced in its AOF, `WAITAOF`), `replica` (and received by a replica, `WAIT`). Redis must run "
            "with `appendfsync always` for `local` and `replica`.",
            "accept_timeout_seconds": "How long a submission waits for Redis to confirm it durable before "
            "answering `503 STORAGE_UNAVAILABLE`.",
        },
    ),
    (
        "Storage",
        {
            "data_dir": "Where wikis live (`<dir>/wikis/<id>.git`), with the embedded Redis' AOF "
            "(`<dir>/redis`) and the webhook secret `make run` creates; relative to the working directory.",
            "min_free_bytes": "Below this many free bytes in the data directory `/readyz` answers 503 and "
            "`wikiq doctor` warns.",
        },
    ),
    (
        "Workers and the queue",
        {
            "partitions": "Queue partitions; a wiki maps to one by a stable hash. Every process of a "
            "deployment must use the same number.",
            "lease_seconds": "A worker's lease on a partition; a dead worker's partitions move to another "
            "after this long.",
            "job_timeout_seconds": "arq's timeout for one run of a job.",
            "max_job_tries": "Runs of a job (after crashes or Redis outages) before it is reported `failed`.",
        },
    ),
    (
        "Access",
        {
            "tokens_file": "The bearer tokens file (TOML or YAML, see contract.md). Unset: single-user mode, "
            "and `wikiq api` refuses to listen beyond loopback.",
            "author_name": "Commit author in single-user mode.",
            "author_email": "Commit author's e-mail in single-user mode.",
            "rate_limit_submissions": "Submissions (and webhook redeliveries) one principal may make per "
            "window; `0` turns the limit off.",
            "rate_limit_window_seconds": "The rate limit's window.",
            "ui_login_attempts": "Sign-in attempts at `/ui/login` one client address may make per "
            "`WIKIQ_UI_LOGIN_WINDOW_SECONDS`, and as many with one token (right or wrong); beyond, `429 "
            "RATE_LIMITED` with `Retry-After` and no session. `0` turns the limit off.",
            "ui_login_window_seconds": "The sign-in limit's window.",
            "ui_sessions_per_token": "Status-page sessions one token keeps (each lives 12 hours); a new "
            "sign-in past it ends that token's oldest session.",
            "mcp_max_concurrent": "MCP requests one principal may have in flight at `/mcp` (`429` beyond).",
            "allowed_hosts": "Host names the API answers for besides its bind address's own (a loopback "
            "bind: `localhost` and loopback addresses; `0.0.0.0`: `localhost` and any IP address): exact "
            "names, `.example.org` for a domain and its subdomains, `*` for any. Another `Host` is `421 "
            "MISDIRECTED_HOST`, against DNS rebinding; `/healthz` and `/readyz` answer any.",
            "commit_secret": "The key of the `Wikiq-Proof` trailer that proves a commit is wikiq's own, so "
            "a pushed or hand-written `Wikiq-Job:` trailer is never taken for a job's commit. Every process "
            "of a deployment must share it; unset, one is generated once and kept in Redis (set it if Redis "
            "may lose its data: a job in flight could then be committed twice).",
            "trusted_proxies": "Proxies (addresses or networks) whose `X-Forwarded-Proto` and "
            "`X-Forwarded-For` are believed; `https` there makes the status page's cookie `Secure`.",
        },
    ),
    (
        "Limits of a batch and a request",
        {
            "max_edits": "Edits in one batch (`413 TOO_MANY_EDITS` beyond).",
            "max_content_bytes": "Decoded content of one batch's edits (`413 BATCH_TOO_LARGE` beyond).",
            "max_file_bytes": "No file a batch writes may be larger (`BATCH_TOO_LARGE` with the edit's "
            "index); no larger page is served whole by a read.",
            "max_batch_output_bytes": "New content one batch may produce in all (a `replace_all` or a "
            "`replace_across` multiplies its input).",
            "max_body_bytes": "Request body limit, enforced before the body is read.",
            "max_queued_bytes": "Batch bodies one principal may have waiting in the queue, plus the "
            "dry-run results Redis still keeps for it (`429 RATE_LIMITED`; a single batch over it is `413`); "
            "`0` turns the cap off.",
        },
    ),
    (
        "What one request may cost",
        {
            "cost_cpu_seconds": "CPU seconds one batch's check (and a dry run's review) or one read may "
            "spend; then `BATCH_TOO_COSTLY` (a dry run's review stops with a `TRUNCATED` warning) or "
            "`QUERY_TOO_COSTLY`.",
            "cost_scan_bytes": "Bytes of text one request may hand to RE2, the markdown parser and the YAML "
            "parser in all.",
            "cost_regex_work": "One RE2 search's worst case, program size times the bytes it scans: a "
            "search past it is refused before it runs (RE2's fallback automaton costs about 10 ns per byte "
            "and instruction).",
            "cost_re2_max_mem": "Memory RE2 may use for one compiled pattern; a pattern needing more is "
            "`PATTERN_INVALID`.",
            "cost_parse_lines": "Lines of a page the markdown parser takes at once; a longer page's links "
            "and sections are not read or edited.",
            "cost_yaml_bytes": "Bytes of one YAML front matter block the parser takes.",
            "cost_yaml_nodes": "Values one front matter may expand to, aliases repeated.",
            "cost_yaml_depth": "Levels of nesting one front matter may expand to.",
            "cost_output_bytes": "Bytes one read's answer may carry (a page, its sections).",
        },
    ),
    (
        "Jobs",
        {
            "job_retention_seconds": "How long job records are kept (without their batch bodies once "
            "finished).",
            "max_retained_bytes": "Bytes of finished job records (not dry runs) Redis keeps for one "
            "principal, each counted as its stored size plus 512 bytes for its index entries: past it, "
            "the principal's oldest finished records are dropped first (their jobs answer `404 "
            "JOB_NOT_FOUND` before `WIKIQ_JOB_RETENTION_SECONDS`). `0` turns the cap off.",
            "dry_run_retention_seconds": "How long a dry run's record, with its diff, is kept; a minute "
            "more once its submitter has read it, if that is sooner.",
            "proposal_retention_seconds": "How long an undecided proposal waits for review before it "
            "expires; its checks' diffs are kept that long (and count in the proposer's queued bytes).",
            "proposal_self_approve": "Let a proposal's author approve it (a team of one); single-user mode "
            "always may.",
            "proposal_sweep_seconds": "How often a worker removes the `refs/proposals/<id>` refs, and the "
            "remote branches, of the proposals decided or expired on the wikis it writes (and pushes again "
            "a branch whose push did not happen); right after a proposal lands, it does so at once.",
        },
    ),
    (
        "Webhooks",
        {
            "webhook_secret": "`whsec_<base64>`, the Standard Webhooks secret that signs every delivery. "
            "Without it, batches naming a webhook are refused. `make run` creates one in "
            "`<data dir>/webhook-secret`.",
            "webhook_allow_private": "Allow webhooks to loopback, private, link-local, CGNAT and reserved "
            "addresses (tests, trusted networks).",
            "webhook_retry_schedule": "Comma-separated seconds before each attempt; the length is the "
            "number of attempts. Each delay gets ±20 % jitter and is never shorter than a `Retry-After`.",
            "webhook_timeout": "Seconds a receiver has to answer 2xx.",
            "webhook_senders": "A worker always sends the first attempts of the jobs it finishes. The rest "
            "of the webhook outbox (a redelivery's first attempt, what a dead worker left): `false`, every "
            "worker takes it (and `wikiq webhooks` processes, if any run, share it); `true`, only `wikiq "
            "webhooks` processes do (run at least one: until one runs, that rest waits).",
            "redeliver_interval_seconds": "At most one manual redelivery per job per interval (`429`).",
        },
    ),
    (
        "Git remotes",
        {
            "remotes_file": "The TOML file declaring the git remotes wikis may live in (see remotes.md); "
            "re-read when it changes.",
            "remote_wait_seconds": "How long a job waits for an unreachable remote before failing "
            "`REMOTE_UNAVAILABLE`.",
            "remote_push_attempts": "Pushes refused (a hook, a protected branch) or lost to someone else's "
            "push before a job fails `REMOTE_REJECTED`.",
            "remote_push_interval_seconds": "Least time between two pushes to one remote (forges "
            "rate-limit pushes); batches arriving meanwhile join the next push.",
            "remote_coalesce_max": "Queued batches of one wiki published by one push.",
            "proposal_branch_prefix": "A proposal's latest revision is pushed to the branch "
            "`<prefix><proposal id>` of a remote-backed wiki's remote (deleted once the proposal is "
            "decided); a proposal answers the forge's compare page for it (GitHub, GitLab, Gitea/Forgejo).",
        },
    ),
    (
        "Logging",
        {
            "log_level": "Level of the structured logs on stderr: `debug`, `info`, `warning` or `error` "
            "(another word means `info`).",
        },
    ),
)

HEADER = """\
# Configuration

<!-- Generated by `python -m worker.settings_doc` from worker/settings.py: do not edit by hand. -->

Every wikiq process (`wikiq dev`, `api`, `worker`, `webhooks`, `doctor`, `mcp`) reads its settings from
the environment, prefix `WIKIQ_`. A bad value stops start-up with one line naming the variable, e.g.
`bad setting WIKIQ_PARTITIONS='many': Input should be a valid integer`. Every process of one deployment
should see the same values, `WIKIQ_PARTITIONS` above all.
"""

FOOTER = """\
## Client side

The CLI's client commands, `wikiq mcp` and the Python client (`api.client.Client`) read two more:

| variable | default | meaning |
|---|---|---|
| `WIKIQ_URL` | `http://127.0.0.1:8080` | the API to talk to (`--url`) |
| `WIKIQ_TOKEN` | unset | the bearer token to send (`--token`) |

`wikiq mcp` also reads the `WIKIQ_MAX_*` limits above, to state them in its tool descriptions: set them as
the server's are.

## Files the operator writes

- the tokens file (`WIKIQ_TOKENS_FILE`): see [contract.md](contract.md#tokens-rights-and-identities);
- the remotes file (`WIKIQ_REMOTES_FILE`): see [remotes.md](remotes.md);
- a wiki's zone policy override, `<data dir>/wikis/<id>.git/wikiq-zones.json`: the `ZonePolicy` model of
  `worker/engine/paths.py` (ordered zones of `pattern`, `ops`, `refusal`), read per repository.
"""


class SettingsDocError(Exception):
    """The settings model and ``GROUPS`` disagree; the message says what to add or remove."""


def _type(annotation: Any) -> str:
    """A short, reader-facing name of a field's type."""
    if get_origin(annotation) is not None and type(None) in get_args(annotation):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _type(inner[0]) if len(inner) == 1 else "text"
    origin = get_origin(annotation)
    if origin is tuple:
        args = get_args(annotation)
        if args and get_origin(args[0]) is tuple:
            return "host:port list"
        return "text list" if args and args[0] is str else "number list"
    if str(origin) == "typing.Literal":
        return " \\| ".join(f"`{value}`" for value in get_args(annotation))
    names = {bool: "boolean", int: "integer", float: "seconds", str: "text", Path: "path"}
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _default(field: FieldInfo) -> str:
    value = field.default
    if value is PydanticUndefined or value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        if value and isinstance(value[0], tuple):
            return "`" + ",".join(f"{host}:{port}" for host, port in value) + "`"
        return "`" + ",".join(_number(v) for v in value) + "`"
    if isinstance(value, int | float):
        text = _number(value)
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if isinstance(value, int) and value >= size and value % size == 0:
                return f"`{text}` ({value // size} {unit})"
        return f"`{text}`"
    return f"`{value}`"


def _bounds(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        for attr, symbol in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            if isinstance(item, getattr(annotated_types, attr.capitalize())):
                parts.append(f"{symbol} {_number(getattr(item, attr))}")
    return ", ".join(parts)


def _check(fields: dict[str, FieldInfo]) -> None:
    described = [name for _, group in GROUPS for name in group]
    missing = [name for name in fields if name not in described]
    unknown = [name for name in described if name not in fields]
    twice = sorted({name for name in described if described.count(name) > 1})
    problems = []
    if missing:
        problems.append("describe " + ", ".join(f"WIKIQ_{n.upper()}" for n in missing) + " in GROUPS")
    if unknown:
        problems.append("drop " + ", ".join(f"WIKIQ_{n.upper()}" for n in unknown) + " (not a setting)")
    if twice:
        problems.append("list once: " + ", ".join(f"WIKIQ_{n.upper()}" for n in twice))
    if problems:
        raise SettingsDocError("worker/settings_doc.py: " + "; ".join(problems))


def render() -> str:
    """The whole of ``docs/configuration.md`` for the current settings model."""
    fields = Settings.model_fields
    _check(fields)
    out = [HEADER]
    for title, group in GROUPS:
        out.append(f"## {title}\n")
        out.append("| variable | type | default | meaning |")
        out.append("|---|---|---|---|")
        for name, meaning in group.items():
            field = fields[name]
            kind = _type(field.annotation)
            bounds = _bounds(field)
            if bounds:
                kind += f" ({bounds})"
            out.append(f"| `WIKIQ_{name.upper()}` | {kind} | {_default(field)} | {meaning} |")
        out.append("")
    out.append(FOOTER)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Write the page, or with ``--check`` say whether it is current (exit 1 if not)."""
    try:
        text = render()
    except SettingsDocError as exc:
        print(exc, file=sys.stderr)
        return 2
    if "--check" in argv:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is out of date: run python -m worker.settings_doc", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
