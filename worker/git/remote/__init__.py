"""Wikis whose system of record is a branch of a git remote (CONTRACT section 6): the building blocks.

    config        Remote (one declared remote), load_remotes(path): the operator's TOML file
    registry      RemoteRegistry: the declared remotes, re-read when the file changes
    credentials   read_credentials(remote): secrets read at use time, never stored
    redact        redact(text, remote): secrets and URL userinfo scrubbed from git's words
    gitcommand    how one git command is run: clean environment, askpass, ssh options, deadline
    porcelain     reading ``git push --porcelain``: Accepted / Moved / Rejected
    transport     remote_head, fetch, push_cas, push_branch, clone_or_init_cache
    forges        compare_url: a forge's page comparing two branches (GitHub, GitLab, Gitea/Forgejo)
    errors        RemoteNotFound, RemoteUnavailable, RemoteRejected

Nothing here knows about jobs, Redis or the API; the job pipeline composes these.
"""

from worker.git.remote.config import Remote, load_remotes
from worker.git.remote.errors import RemoteError, RemoteNotFound, RemoteRejected, RemoteUnavailable
from worker.git.remote.forges import compare_url
from worker.git.remote.porcelain import Accepted, Moved, PushResult, Rejected
from worker.git.remote.redact import redact
from worker.git.remote.registry import RemoteRegistry
from worker.git.remote.transport import (
    clone_or_init_cache,
    fetch,
    push_branch,
    push_cas,
    remote_head,
    tracking_ref,
)

__all__ = [
    "Accepted",
    "Moved",
    "PushResult",
    "Rejected",
    "Remote",
    "RemoteError",
    "RemoteNotFound",
    "RemoteRegistry",
    "RemoteRejected",
    "RemoteUnavailable",
    "clone_or_init_cache",
    "compare_url",
    "fetch",
    "load_remotes",
    "push_branch",
    "push_cas",
    "redact",
    "remote_head",
    "tracking_ref",
]
