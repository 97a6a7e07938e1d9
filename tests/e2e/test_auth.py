"""Many principals, one service: tokens, rights per wiki, path prefixes, identities, rate limits."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.service import Service

TOKENS = {
    "root": "tok-root",
    "alice": "tok-alice",
    "bob": "tok-bob",
    "carol": "tok-carol",
}
TOKENS_TOML = """
[[principals]]
name = "Root Admin"
email = "root@example.org"
token_sha256 = "{root}"
rights = {{ "*" = "admin" }}

[[principals]]
name = "Alice Agent"
email = "alice@example.org"
token_sha256 = "{alice}"
rights = {{ "wa" = "write" }}

[[principals]]
name = "Bob Reader"
email = "bob@example.org"
token_sha256 = "{bob}"
rights = {{ "wb" = "read" }}

[[principals]]
name = "Carol Team"
email = "carol@example.org"
token_sha256 = "{carol}"
rights = {{ "wa" = "write" }}
prefixes = {{ "wa" = ["wiki/team-a/"] }}
"""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with a tokens file and two wikis, wa and wb."""
    root = tmp_path_factory.mktemp("auth")
    tokens = root / "tokens.toml"
    tokens.write_text(TOKENS_TOML.format(**{name: _digest(tok) for name, tok in TOKENS.items()}))
    service = Service(root, WIKIQ_TOKENS_FILE=str(tokens)).start(workers=1)
    service.client.headers["authorization"] = "Bearer tok-root"
    service.create_wiki("wa")
    service.create_wiki("wb")
    yield service
    service.stop()


def _as(service: Service, who: str | None) -> httpx.Client:
    headers = {} if who is None else {"authorization": f"Bearer {TOKENS.get(who, who)}"}
    return httpx.Client(base_url=service.url, headers=headers, timeout=30)


def _batch(path: str = "wiki/x.md") -> dict[str, Any]:
    return {"message": "m", "edits": [{"op": "create", "path": path, "content": "x\n"}], "dry_run": True}


# principal, wiki, request, expected status
READS = [
    ("GET", "/v1/wikis/{w}/pages"),
    ("GET", "/v1/wikis/{w}/pages/index.md"),
    ("GET", "/v1/wikis/{w}/commits"),
    ("GET", "/v1/wikis/{w}/jobs"),
    ("GET", "/v1/wikis/{w}/search?q=index"),
]
TABLE: list[tuple[str | None, str, str, str, int]] = []
for _method, _path in READS:
    TABLE += [
        (None, "wa", _method, _path, 401),
        ("nobody", "wa", _method, _path, 401),
        ("root", "wa", _method, _path, 200),
        ("root", "missing", _method, _path, 404),
        ("alice", "wa", _method, _path, 200),
        ("alice", "wb", _method, _path, 404),
        ("alice", "missing", _method, _path, 404),
        ("bob", "wb", _method, _path, 200),
        ("bob", "wa", _method, _path, 404),
        ("carol", "wa", _method, _path, 200),
    ]
TABLE += [
    (None, "wa", "POST", "/v1/wikis/{w}/batches", 401),
    ("root", "wa", "POST", "/v1/wikis/{w}/batches", 202),
    ("alice", "wa", "POST", "/v1/wikis/{w}/batches", 202),
    ("alice", "wb", "POST", "/v1/wikis/{w}/batches", 404),
    ("bob", "wb", "POST", "/v1/wikis/{w}/batches", 403),
    ("bob", "wa", "POST", "/v1/wikis/{w}/batches", 404),
    ("carol", "wa", "POST", "/v1/wikis/{w}/batches", 403),
    ("root", "missing", "POST", "/v1/wikis/{w}/batches", 404),
]


@pytest.mark.parametrize(("who", "wiki", "method", "path", "status"), TABLE)
def test_access_table(
    secured: Service, who: str | None, wiki: str, method: str, path: str, status: int
) -> None:
    """Each principal x wiki x endpoint answers the expected 200/202/401/403/404 with the error object."""
    with _as(secured, who) as client:
        answer = client.request(method, path.format(w=wiki), json=_batch() if method == "POST" else None)
    assert answer.status_code == status, answer.text
    if status >= 400:
        error = answer.json()["error"]
        assert error["code"] == {401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "WIKI_NOT_FOUND"}[status]
    if status == 401:
        assert answer.headers["www-authenticate"] == "Bearer"


def test_denied_wiki_answers_like_a_missing_one(secured: Service) -> None:
    """For a caller who may not read it, an existing wiki gets the same status and code as a missing one."""
    with _as(secured, "alice") as client:
        existing = client.get("/v1/wikis/wb/pages/index.md")
        missing = client.get("/v1/wikis/nope/pages/index.md")
    assert existing.status_code == missing.status_code == 404
    assert existing.json()["error"]["code"] == missing.json()["error"]["code"]
    assert "exist" not in existing.json()["error"]["message"].replace("does not exist", "")


def test_wiki_list_shows_only_readable_wikis(secured: Service) -> None:
    """GET /v1/wikis lists only the wikis the caller may read."""
    with _as(secured, "alice") as client:
        assert [w["id"] for w in client.get("/v1/wikis").json()["wikis"]] == ["wa"]
    with _as(secured, "bob") as client:
        assert [w["id"] for w in client.get("/v1/wikis").json()["wikis"]] == ["wb"]


def test_creating_a_wiki_needs_admin(secured: Service) -> None:
    """Only a principal with admin may create a wiki; others get 403 whether or not it exists."""
    with _as(secured, "alice") as client:
        assert client.post("/v1/wikis", json={"id": "newone"}).status_code == 403
        assert client.post("/v1/wikis", json={"id": "wa"}).status_code == 403
    with _as(secured, "root") as client:
        assert client.post("/v1/wikis", json={"id": "newone"}).status_code == 201


def test_token_for_a_cannot_see_b_jobs_by_id(secured: Service) -> None:
    """A job of wiki wb is invisible (404) to a token that may not read wb, for GET, DELETE and redeliver."""
    answer = secured.submit(
        "wb", {"message": "m", "edits": [{"op": "create", "path": "wiki/j.md", "content": ""}]}
    )
    job_id = answer.json()["job_id"]
    secured.wait(job_id)
    with _as(secured, "alice") as client:
        for method, path in [
            ("GET", f"/v1/jobs/{job_id}"),
            ("DELETE", f"/v1/jobs/{job_id}"),
            ("POST", f"/v1/jobs/{job_id}/webhook/redeliver"),
        ]:
            answer = client.request(method, path)
            assert answer.status_code == 404, (method, answer.text)
            assert answer.json()["error"]["code"] == "JOB_NOT_FOUND"
    with _as(secured, "bob") as client:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 403


def test_each_principal_is_the_author_of_its_commits(secured: Service) -> None:
    """Two principals writing to one wiki: each commit carries its submitter as author; wikiq commits."""
    jobs = {}
    for who, path in [("alice", "wiki/by-alice.md"), ("carol", "wiki/team-a/by-carol.md")]:
        with _as(secured, who) as client:
            body = {"message": f"by {who}", "edits": [{"op": "create", "path": path, "content": who}]}
            jobs[who] = client.post("/v1/wikis/wa/batches", json=body).json()["job_id"]
    commits = {}
    for job_id in jobs.values():
        assert secured.wait(job_id)["status"] == "succeeded"
    for commit in secured.client.get("/v1/wikis/wa/commits").json()["commits"]:
        commits[commit["job_id"]] = commit
    assert commits[jobs["alice"]]["author"] == {"name": "Alice Agent", "email": "alice@example.org"}
    assert commits[jobs["carol"]]["author"] == {"name": "Carol Team", "email": "carol@example.org"}
    repo = secured.data / "wikis" / "wa.git"
    committer = subprocess.run(
        ["git", "--git-dir", str(repo), "log", "-1", "--format=%cn <%ce>", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert committer == "wikiq <wikiq@localhost>"


@pytest.mark.parametrize("path", ["wiki/team-b/x.md", "index.md", "wiki/team-ab/x.md"])
def test_path_prefix_refuses_the_whole_batch_without_naming_the_path(secured: Service, path: str) -> None:
    """A writer limited to wiki/team-a/ is refused (403) a batch touching another path, which is not named."""
    body = {
        "message": "m",
        "edits": [
            {"op": "create", "path": "wiki/team-a/fine.md", "content": ""},
            {"op": "create", "path": path, "content": ""},
        ],
    }
    with _as(secured, "carol") as client:
        before = client.get("/v1/wikis/wa/jobs").json()["jobs"]
        answer = client.post("/v1/wikis/wa/batches", json=body)
        after = client.get("/v1/wikis/wa/jobs").json()["jobs"]
    assert answer.status_code == 403
    error = answer.json()["error"]
    assert error["code"] == "FORBIDDEN" and error["index"] is None
    assert path not in answer.text and "team" not in error["message"]
    assert before == after


def test_rename_target_outside_prefix_is_refused(secured: Service) -> None:
    """A rename whose new_path leaves the caller's prefix is refused like any other denied path."""
    body = {
        "message": "m",
        "edits": [
            {
                "op": "rename",
                "path": "wiki/team-a/a.md",
                "new_path": "wiki/b.md",
                "expected_version": "0" * 40,
            }
        ],
    }
    with _as(secured, "carol") as client:
        assert client.post("/v1/wikis/wa/batches", json=body).status_code == 403


@pytest.mark.parametrize(
    ("edit", "status"),
    [
        ({"op": "rename", "path": "wiki/team-a/x", "new_path": "wiki/team-a/y"}, 202),
        ({"op": "rename", "path": "wiki/team-a/x", "new_path": "wiki/team-a/y", "rewrite_links": True}, 403),
        ({"op": "replace_across", "prefix": "wiki/team-a/", "old": "a", "new": "b"}, 202),
        ({"op": "replace_across", "prefix": "wiki/", "old": "a", "new": "b"}, 403),
        ({"op": "replace_across", "prefix": "wiki/team-a", "old": "a", "new": "b"}, 403),
    ],
    ids=["folder-rename", "rewrite-links", "across-inside", "across-wider", "across-partial-segment"],
)
def test_refactor_ops_respect_path_prefixes(secured: Service, edit: dict[str, Any], status: int) -> None:
    """rewrite_links may change any page, so a prefix-limited writer may not ask for it; replace_across
    is allowed when its prefix lies inside the writer's prefix."""
    with _as(secured, "carol") as client:
        answer = client.post("/v1/wikis/wa/batches", json={"message": "m", "edits": [edit], "dry_run": True})
    assert answer.status_code == status, answer.text


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    """Past the per-principal submission limit the API answers 429 RATE_LIMITED with Retry-After."""
    service = Service(tmp_path, WIKIQ_RATE_LIMIT_SUBMISSIONS="3", WIKIQ_RATE_LIMIT_WINDOW_SECONDS="30").start(
        0
    )
    try:
        service.create_wiki("rl")
        statuses = [service.submit("rl", _batch(f"wiki/r{i}.md")).status_code for i in range(3)]
        assert statuses == [202, 202, 202]
        answer = service.submit("rl", _batch("wiki/r9.md"))
        assert answer.status_code == 429
        assert answer.json()["error"]["code"] == "RATE_LIMITED"
        assert 1 <= int(answer.headers["retry-after"]) <= 30
    finally:
        service.stop()


def test_single_user_mode_refuses_a_public_bind(tmp_path: Path) -> None:
    """Without a tokens file, `wikiq api --host 0.0.0.0` stops at once with one line saying why."""
    env = {"WIKIQ_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "api", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "WIKIQ_TOKENS_FILE" in done.stderr and "loopback" in done.stderr


def test_malformed_tokens_file_stops_start_up(tmp_path: Path) -> None:
    """A tokens file with an unknown right stops the API with one line naming the file."""
    bad = tmp_path / "tokens.toml"
    bad.write_text(
        '[[principals]]\nname="x"\nemail="x@y"\ntoken_sha256="' + "0" * 64 + '"\nrights={a="god"}\n'
    )
    env = {"WIKIQ_DATA_DIR": str(tmp_path), "WIKIQ_TOKENS_FILE": str(bad), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "api"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "WIKIQ_TOKENS_FILE" in done.stderr


def test_token_new_prints_a_working_entry(tmp_path: Path) -> None:
    """`wikiq token new` prints a token whose SHA-256 is the token_sha256 of the TOML entry it prints."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "api.cli",
            "token",
            "new",
            "--name",
            "Dee",
            "--email",
            "d@x.org",
            "--wiki",
            "homelab:write",
            "--prefix",
            "homelab:wiki/team-a/",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    token = done.stdout.splitlines()[0].rsplit(" ", 1)[1]
    entry = done.stdout.split("(TOML):", 1)[1]
    import tomllib

    parsed = tomllib.loads(entry)["principals"][0]
    assert parsed["token_sha256"] == _digest(token)
    assert parsed["rights"] == {"homelab": "write"} and parsed["prefixes"] == {"homelab": ["wiki/team-a/"]}


def test_status_page_sign_in_sets_a_read_only_cookie(secured: Service) -> None:
    """/ui redirects to the sign-in form; a good token sets a /ui cookie that reads /ui but cannot write."""
    with httpx.Client(base_url=secured.url, timeout=30) as browser:
        first = browser.get("/ui")
        assert first.status_code == 303 and first.headers["location"] == "/ui/login"
        assert browser.post("/ui/login", data={"token": "wrong"}).status_code == 401
        signed = browser.post("/ui/login", data={"token": TOKENS["alice"]})
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        page = browser.get("/ui")
        assert page.status_code == 200 and "wa" in page.text and ">wb<" not in page.text
        forged = {"cookie": f"wikiq_ui_token={TOKENS['alice']}"}
        write = browser.post("/v1/wikis/wa/batches", json=_batch(), headers=forged)
        assert write.status_code == 401  # the cookie never authorises the API
