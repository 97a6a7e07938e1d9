"""worker.git.remote.transport against real servers, for every transport (git://, http + Basic auth, file://,
ssh): first push to an empty remote, compare-and-swap pushes (accepted, moved, rejected by a hook),
fetch, an unreachable server, refused credentials and a deadline.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

from tests.integration.remote.conftest import HTTP_PASSWORD_ENV, Site
from tests.integration.remote.repos import (
    branch_head,
    commit,
    git,
    make_bare,
    push_as_someone_else,
    refuse_pushes,
)
from tests.integration.remote.servers import SilentServer
from worker.git.remote import (
    Accepted,
    Moved,
    Rejected,
    Remote,
    RemoteUnavailable,
    clone_or_init_cache,
    fetch,
    push_cas,
    remote_head,
    tracking_ref,
)


def published(site: Site, cache: Path) -> tuple[Path, Remote, str]:
    """A served repository whose ``main`` holds one commit pushed by wikiq, its remote and that commit."""
    repo, remote = site.new_repo()
    assert clone_or_init_cache(cache, remote) is None
    first = commit(cache, None, "first")
    assert push_cas(cache, remote, first, None) == Accepted(first)
    return repo, remote, first


def test_first_push_to_an_empty_remote_creates_the_branch(site: Site, cache: Path) -> None:
    """An empty remote has no head; a push expecting no branch creates it, and every view agrees."""
    repo, remote = site.new_repo()
    assert clone_or_init_cache(cache, remote) is None
    assert remote_head(cache, remote) is None
    assert fetch(cache, remote) is None

    first = commit(cache, None, "first")
    assert push_cas(cache, remote, first, None) == Accepted(first, already=False)

    assert branch_head(repo) == first
    assert remote_head(cache, remote) == first
    assert git(cache, "rev-parse", tracking_ref(remote)) == first
    assert fetch(cache, remote) == first


def test_push_is_accepted_when_the_branch_is_where_we_expect(site: Site, cache: Path) -> None:
    """A descendant of the expected head moves the branch (twice in a row, a chain of two commits at once)."""
    repo, remote, first = published(site, cache)
    second = commit(cache, first, "second")
    assert push_cas(cache, remote, second, first) == Accepted(second)
    third = commit(cache, second, "third")
    fourth = commit(cache, third, "fourth")
    assert push_cas(cache, remote, fourth, second) == Accepted(fourth)
    assert branch_head(repo) == fourth
    assert git(repo, "rev-list", "--count", "main") == "4"


def test_push_is_moved_when_someone_else_pushed_meanwhile(site: Site, cache: Path, tmp_path: Path) -> None:
    """Another writer's push makes ours ``Moved``; the remote keeps theirs and fetch brings it."""
    repo, remote, first = published(site, cache)
    theirs = push_as_someone_else(repo, tmp_path, "their edit")
    ours = commit(cache, first, "our edit")

    result = push_cas(cache, remote, ours, first)

    assert isinstance(result, Moved)
    assert result.reason == "stale info"
    assert branch_head(repo) == theirs
    assert fetch(cache, remote) == theirs
    assert remote_head(cache, remote) == theirs
    # the caller re-checks on their head and publishes again: now it is the expected one
    again = commit(cache, theirs, "our edit again")
    assert push_cas(cache, remote, again, theirs) == Accepted(again)


def test_push_expecting_no_branch_is_moved_when_it_exists(site: Site, cache: Path) -> None:
    """``expected=None`` means "must not exist yet": a branch created meanwhile makes it ``Moved``."""
    repo, remote, first = published(site, cache)
    other = commit(cache, None, "another root")
    assert isinstance(push_cas(cache, remote, other, None), Moved)
    assert branch_head(repo) == first


def test_push_of_a_commit_already_there_is_accepted(site: Site, cache: Path) -> None:
    """Pushing again what the branch already holds (a lost answer, retried) is accepted as already there."""
    repo, remote, first = published(site, cache)
    second = commit(cache, first, "second")
    assert push_cas(cache, remote, second, first) == Accepted(second)
    assert push_cas(cache, remote, second, first) == Accepted(second, already=True)
    assert branch_head(repo) == second


def test_push_refused_by_a_hook_is_rejected(site: Site, cache: Path) -> None:
    """A pre-receive hook's refusal is ``Rejected`` with git's reason and the hook's words; nothing moves."""
    repo, remote, first = published(site, cache)
    refuse_pushes(repo, message="main is protected here")
    second = commit(cache, first, "second")

    result = push_cas(cache, remote, second, first)

    assert isinstance(result, Rejected)
    assert "pre-receive hook declined" in result.reason
    assert "main is protected here" in result.reason
    assert branch_head(repo) == first
    assert git(cache, "rev-parse", tracking_ref(remote)) == first


def test_a_hook_refusing_only_the_first_push_lets_the_retry_through(site: Site, cache: Path) -> None:
    """A hook that refuses once: ``Rejected`` then, pushed again unchanged, ``Accepted``."""
    repo, remote, first = published(site, cache)
    refuse_pushes(repo, times=1)
    second = commit(cache, first, "second")
    assert isinstance(push_cas(cache, remote, second, first), Rejected)
    assert push_cas(cache, remote, second, first) == Accepted(second)
    assert branch_head(repo) == second


def test_stopped_server_is_unavailable(site: Site, cache: Path) -> None:
    """With the server gone (the repository, for file://), every operation raises ``RemoteUnavailable``."""
    repo, remote, first = published(site, cache)
    second = commit(cache, first, "second")
    if site.transport == "file":
        shutil.rmtree(repo)
        kind = "not_found"
    else:
        site.stop()
        kind = "unreachable"

    for operation in (
        lambda: remote_head(cache, remote),
        lambda: fetch(cache, remote),
        lambda: push_cas(cache, remote, second, first),
    ):
        with pytest.raises(RemoteUnavailable) as raised:
            operation()
        assert raised.value.code == "REMOTE_UNAVAILABLE"
        assert raised.value.kind == kind, raised.value.message
        assert "'docs'" in raised.value.message
    assert git(cache, "rev-parse", tracking_ref(remote)) == first


def test_missing_repository_is_unavailable_not_found(site: Site, cache: Path) -> None:
    """A remote URL naming no repository on a live server is ``RemoteUnavailable`` of kind not_found."""
    _, remote = site.new_repo()
    clone_or_init_cache(cache, remote)
    missing = remote.model_copy(update={"url": remote.url.replace("wiki.git", "missing.git")})
    with pytest.raises(RemoteUnavailable) as raised:
        remote_head(cache, missing)
    assert raised.value.kind == "not_found", raised.value.message


def test_push_refuses_a_commit_that_does_not_descend_from_expected(site: Site, cache: Path) -> None:
    """A push that would rewrite the branch is a programming error, refused before anything is sent."""
    repo, remote, first = published(site, cache)
    unrelated = commit(cache, None, "unrelated root")
    with pytest.raises(ValueError, match="does not descend"):
        push_cas(cache, remote, unrelated, first)
    with pytest.raises(ValueError, match="object id"):
        push_cas(cache, remote, "main", first)
    assert branch_head(repo) == first


def test_clone_or_init_cache_is_idempotent_and_fetches(site: Site, cache: Path, tmp_path: Path) -> None:
    """Making the cache again keeps it and fetches the remote's current head; a non-repository is refused."""
    repo, remote, _first = published(site, cache)
    theirs = push_as_someone_else(repo, tmp_path, "their edit")
    assert clone_or_init_cache(cache, remote) == theirs
    assert git(cache, "rev-parse", "--is-bare-repository") == "true"
    assert git(cache, "cat-file", "-t", theirs) == "commit"
    not_a_repo = tmp_path / "not-a-repo"
    not_a_repo.mkdir()
    with pytest.raises(ValueError, match="not a bare git repository"):
        clone_or_init_cache(not_a_repo, remote)
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]  # no temporary left behind


def test_wrong_http_password_is_unavailable_auth(
    http_site: Site, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server refusing our credentials makes ls-remote, fetch and push ``RemoteUnavailable`` (auth)."""
    repo, remote, first = published(http_site, cache)
    second = commit(cache, first, "second")
    monkeypatch.setenv(HTTP_PASSWORD_ENV, "not-the-password")
    for operation in (
        lambda: remote_head(cache, remote),
        lambda: fetch(cache, remote),
        lambda: push_cas(cache, remote, second, first),
    ):
        with pytest.raises(RemoteUnavailable) as raised:
            operation()
        assert raised.value.kind == "auth", raised.value.message
    assert branch_head(repo) == first


def test_a_large_push_over_http_is_sent_chunked(http_site: Site, cache: Path) -> None:
    """A pack larger than git's http.postBuffer goes as a chunked request body, and still lands."""
    repo, remote, first = published(http_site, cache)
    noise = base64.b64encode(os.urandom(3 * 1024 * 1024)).decode()  # incompressible enough: ~4 MiB
    big = commit(cache, first, "big", {"raw/noise.txt": noise})
    assert push_cas(cache, remote, big, first) == Accepted(big)
    assert http_site.server.chunked_requests >= 1  # type: ignore[union-attr]
    assert branch_head(repo) == big
    assert git(repo, "cat-file", "-s", f"{big}:raw/noise.txt") == str(len(noise))


def test_http_without_credentials_is_unavailable_auth(http_site: Site, cache: Path) -> None:
    """A remote declaring no credentials gets the server's 401 as ``RemoteUnavailable`` (auth), no prompt."""
    _, remote = http_site.new_repo()
    make_bare(cache)
    bare = remote.model_copy(update={"username": None, "password_env": None})
    with pytest.raises(RemoteUnavailable) as raised:
        remote_head(cache, bare)
    assert raised.value.kind == "auth", raised.value.message


def test_unset_password_variable_is_unavailable_credentials(
    http_site: Site, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A credential variable that is not set is named in ``RemoteUnavailable`` (credentials); nothing runs."""
    _, remote = http_site.new_repo()
    monkeypatch.delenv(HTTP_PASSWORD_ENV)
    before = len(http_site.server.requests)  # type: ignore[union-attr]
    with pytest.raises(RemoteUnavailable) as raised:
        clone_or_init_cache(cache, remote)
    assert raised.value.kind == "credentials"
    assert HTTP_PASSWORD_ENV in raised.value.message
    assert len(http_site.server.requests) == before  # type: ignore[union-attr]


def test_unknown_ssh_host_key_is_unavailable_auth(ssh_site: Site, cache: Path, tmp_path: Path) -> None:
    """An ssh server whose host key is not in known_hosts is refused (no trust on first use)."""
    _, remote = ssh_site.new_repo()
    make_bare(cache)
    other_hosts = tmp_path / "other_known_hosts"
    other_hosts.write_text("")
    stranger = remote.model_copy(update={"known_hosts_file": other_hosts})
    with pytest.raises(RemoteUnavailable) as raised:
        remote_head(cache, stranger)
    assert raised.value.kind == "auth", raised.value.message


def test_silent_server_times_out(cache: Path, tmp_path: Path) -> None:
    """A server that never answers is ``RemoteUnavailable`` (timeout) once the deadline passes."""
    silent = SilentServer()
    try:
        remote = Remote(name="silent", url=f"git://127.0.0.1:{silent.port}/wiki.git")
        make_bare(cache)
        with pytest.raises(RemoteUnavailable) as raised:
            remote_head(cache, remote, timeout=1.0)
        assert raised.value.kind == "timeout"
        assert "1 s" in raised.value.message
    finally:
        silent.stop()
