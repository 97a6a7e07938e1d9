"""worker.git.remote.config and .registry on real files in tmp_path: every credential style, the
refusals (each one ValueError naming the file, never echoing a secret), and re-reading on change."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from worker.git.remote import RemoteNotFound, RemoteRegistry, load_remotes
from worker.git.remote.config import Remote

GOOD = """
[[remotes]]
name = "team-docs"
url = "https://git.example.org/team/docs.git"
token_env = "TEAM_DOCS_TOKEN"

[[remotes]]
name = "gitlab-notes"
url = "https://gitlab.example.org/team/notes.git"
branch = "wiki/live"
username = "oauth2"
token_file = "secrets/gitlab-token"

[[remotes]]
name = "basic"
url = "https://git.example.org/basic.git"
username = "wiki-bot"
password_env = "BASIC_PASSWORD"

[[remotes]]
name = "basic-file"
url = "https://git.example.org/basic.git"
username = "wiki-bot"
password_file = "/run/secrets/basic"

[[remotes]]
name = "over-ssh"
url = "ssh://git@git.example.org:2222/team/docs.git"
ssh_key_file = "keys/id_ed25519"
known_hosts_file = "/etc/wikiq/known_hosts"

[[remotes]]
name = "scp-like"
url = "git@github.com:team/docs.git"
ssh_key_file = "/etc/wikiq/id_ed25519"
known_hosts_file = "/etc/wikiq/known_hosts"

[[remotes]]
name = "anonymous"
url = "git://git.example.org/docs.git"

[[remotes]]
name = "local"
url = "file:///srv/git/docs.git"

[[remotes]]
name = "loopback-http"
url = "http://127.0.0.1:8080/docs.git"
token_env = "LOCAL_TOKEN"
"""


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` and give it an mtime distinct from any earlier version's."""
    path.write_text(text)
    stamp = getattr(write, "stamp", 1_700_000_000_000_000_000) + 1_000_000_000
    write.stamp = stamp  # type: ignore[attr-defined]
    os.utime(path, ns=(stamp, stamp))
    return path


def one(body: str) -> str:
    """A remotes file holding one remote named "docs" with ``body`` (its TOML lines)."""
    return f'[[remotes]]\nname = "docs"\n{body}\n'


def test_every_credential_style_parses(tmp_path: Path) -> None:
    """Each declared style is read as written; relative files are taken from the file's folder."""
    remotes = load_remotes(write(tmp_path / "remotes.toml", GOOD))
    assert list(remotes) == [
        "team-docs",
        "gitlab-notes",
        "basic",
        "basic-file",
        "over-ssh",
        "scp-like",
        "anonymous",
        "local",
        "loopback-http",
    ]
    assert remotes["team-docs"].credential_style == "token"
    assert remotes["team-docs"].branch == "main"
    assert remotes["team-docs"].scheme == "https"
    assert remotes["gitlab-notes"].token_file == tmp_path / "secrets" / "gitlab-token"
    assert remotes["gitlab-notes"].ref == "refs/heads/wiki/live"
    assert remotes["basic"].credential_style == "password"
    assert remotes["basic-file"].password_file == Path("/run/secrets/basic")
    assert remotes["over-ssh"].credential_style == "ssh"
    assert remotes["over-ssh"].ssh_key_file == tmp_path / "keys" / "id_ed25519"
    assert remotes["scp-like"].scheme == "ssh"
    assert remotes["anonymous"].credential_style is None
    assert remotes["local"].scheme == "file"
    assert remotes["loopback-http"].scheme == "http"


def test_an_empty_file_declares_no_remotes(tmp_path: Path) -> None:
    """A file with nothing in it is valid and declares nothing."""
    assert load_remotes(write(tmp_path / "remotes.toml", "")) == {}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('url = "https://h/x.git"\ntoken = "s3cr3t-value"', "token: unknown field"),
        (
            'url = "https://h/x.git"\ntoken_env = "A"\npassword_env = "B"\nusername = "u"',
            "one credential style",
        ),
        ('url = "https://h/x.git"\ntoken_env = "A"\ntoken_file = "/t"', "not both"),
        ('url = "https://h/x.git"\npassword_env = "B"', "need a username"),
        ('url = "https://h/x.git"\nusername = "u"', "username needs"),
        ('url = "https://bot:s3cr3t-value@h/x.git"', "must not carry credentials"),
        ('url = "https://s3cr3t-value@h/x.git"', "must not carry credentials"),
        ('url = "ssh://git:s3cr3t-value@h/x.git"', "must not carry credentials"),
        ('url = "git:s3cr3t-value@h:x.git"', "must not carry credentials"),
        ('url = "https://h/x.git"\nssh_key_file = "/k"\nknown_hosts_file = "/kh"', "need an ssh"),
        ('url = "ssh://git@h/x.git"\nssh_key_file = "/k"', "go together"),
        ('url = "ssh://git@h/x.git"\ntoken_env = "A"', "need an https"),
        ('url = "http://git.example.org/x.git"\ntoken_env = "A"', "clear text"),
        ('url = "ext::sh -c touch% /tmp/pwned"', "spaces"),
        ('url = "ext::ssh"', "remote helpers"),
        ('url = "ftp://h/x.git"', "scheme must be"),
        ('url = "HTTPS://h/x.git"', "lowercase"),
        ('url = "/srv/git/x.git"', "scp-like"),
        ('url = "file://h/x.git"', "absolute path"),
        ('url = "ssh://-oProxyCommand=x/y.git"', "invalid host"),
        ('url = "-oProxyCommand=x:y"', "must not start with '-'"),
        ('url = "https://h/x.git"\nbranch = "../main"', "branch"),
        ('url = "https://h/x.git"\nbranch = "-f"', "branch"),
        ('url = "https://h/x.git"\ntoken_env = "NOT A NAME"', "environment variable"),
    ],
)
def test_refusals_name_the_file_and_the_problem(tmp_path: Path, body: str, problem: str) -> None:
    """A bad remote is one ValueError naming the file, the remote and the problem, never the secret."""
    path = write(tmp_path / "remotes.toml", one(body))
    with pytest.raises(ValueError) as raised:
        load_remotes(path)
    message = str(raised.value)
    assert str(path) in message
    assert problem in message
    assert "s3cr3t-value" not in message
    assert "(docs)" in message


def test_file_level_refusals(tmp_path: Path) -> None:
    """Bad TOML, an unknown top-level key, a bad name, a duplicate and a missing file are refused."""
    cases = {
        'remotes = "x" = 1': "not valid TOML",
        'secret = "s3cr3t-value"': "secret: unknown field",
        '[[remotes]]\nname = "Docs"\nurl = "git://h/x.git"': "must match",
        one('url = "git://h/x.git"') + one('url = "git://h/y.git"'): "declared twice",
    }
    for text, problem in cases.items():
        path = write(tmp_path / "remotes.toml", text)
        with pytest.raises(ValueError, match=problem) as raised:
            load_remotes(path)
        assert "s3cr3t-value" not in str(raised.value)
    with pytest.raises(ValueError, match="cannot read"):
        load_remotes(tmp_path / "missing.toml")


def test_a_remote_shows_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model holds where secrets live, never a secret: its repr and JSON are safe to log."""
    monkeypatch.setenv("TEAM_DOCS_TOKEN", "s3cr3t-value")
    remote = load_remotes(write(tmp_path / "remotes.toml", GOOD))["team-docs"]
    assert "s3cr3t-value" not in repr(remote)
    assert "s3cr3t-value" not in remote.model_dump_json()


def test_registry_rereads_the_file_when_it_changes(tmp_path: Path) -> None:
    """An edit is picked up on the next lookup; an unknown name lists the declared ones."""
    path = write(tmp_path / "remotes.toml", one('url = "git://h/x.git"'))
    registry = RemoteRegistry(path)
    assert registry.lookup("docs").url == "git://h/x.git"

    write(path, one('url = "git://h/moved.git"') + '[[remotes]]\nname = "notes"\nurl = "git://h/n.git"\n')
    assert registry.lookup("docs").url == "git://h/moved.git"
    assert set(registry.remotes()) == {"docs", "notes"}

    with pytest.raises(RemoteNotFound) as raised:
        registry.lookup("nope")
    assert raised.value.code == "REMOTE_NOT_FOUND"
    assert "declared: docs, notes" in raised.value.message


def test_registry_keeps_the_last_good_set_on_a_bad_edit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad edit or a deleted file keeps the last good remotes and logs one warning per bad version."""
    path = write(tmp_path / "remotes.toml", one('url = "git://h/x.git"'))
    registry = RemoteRegistry(path)
    caplog.set_level(logging.WARNING, logger="wikiq.remote")

    write(path, one('url = "https://bot:s3cr3t-value@h/x.git"'))
    for _ in range(3):
        assert registry.lookup("docs").url == "git://h/x.git"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0].getMessage()
    assert "keeping the 1 remotes" in warnings[0].getMessage()
    assert "s3cr3t-value" not in warnings[0].getMessage()

    path.unlink()
    assert registry.lookup("docs").url == "git://h/x.git"
    assert registry.lookup("docs").url == "git://h/x.git"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "gone" in warnings[1].getMessage()

    write(path, one('url = "git://h/fixed.git"'))
    assert registry.lookup("docs").url == "git://h/fixed.git"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_registry_refuses_a_bad_file_at_start(tmp_path: Path) -> None:
    """At start-up a bad or missing file is an error: the caller refuses to start."""
    with pytest.raises(ValueError, match="unknown field"):
        RemoteRegistry(write(tmp_path / "remotes.toml", one('url = "git://h/x.git"\nbogus = 1')))
    with pytest.raises(ValueError, match="cannot read"):
        RemoteRegistry(tmp_path / "missing.toml")


def test_registry_without_a_file_declares_nothing() -> None:
    """No remotes file: every lookup is REMOTE_NOT_FOUND saying none are declared."""
    with pytest.raises(RemoteNotFound, match="no remotes are declared"):
        RemoteRegistry(None).lookup("docs")


def test_remote_names_follow_the_wiki_id_rule() -> None:
    """Names are wiki-id-like: lowercase start, up to 63 characters, no trailing newline."""
    assert Remote(name="a.b-c_1", url="git://h/x.git").name == "a.b-c_1"
    for bad in ("", "-a", "A", "a" * 64, "a\n", "a b"):
        with pytest.raises(ValueError):
            Remote(name=bad, url="git://h/x.git")
