"""Many principals, one service of real processes: what only processes show of tokens and rights.

Start-up refusals (a public bind without tokens, a malformed tokens file), ``wikiq token new``, the status
page's cookie, and rights over job ids and refactor ops through a real server. The access table, path
prefixes, identities and the rate limit are tests/service/test_rights.py (the table over processes too).
"""

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
