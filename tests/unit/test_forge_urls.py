"""``compare_url``: the forge's page comparing a wiki's branch with a proposal's, from the remote's URL."""

from __future__ import annotations

import pytest

from worker.git.remote.forges import compare_url

BRANCH = "wikiq/proposals/prop-01J"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # GitHub: https, ssh and scp-like forms, .git or not, credentials and ports dropped
        ("https://github.com/acme/docs.git", "https://github.com/acme/docs/compare/main...{b}?expand=1"),
        ("https://github.com/acme/docs", "https://github.com/acme/docs/compare/main...{b}?expand=1"),
        ("https://github.com/acme/docs/", "https://github.com/acme/docs/compare/main...{b}?expand=1"),
        (
            "https://x-access-token@github.com/acme/docs.git",
            "https://github.com/acme/docs/compare/main...{b}?expand=1",
        ),
        ("git@github.com:acme/docs.git", "https://github.com/acme/docs/compare/main...{b}?expand=1"),
        ("ssh://git@github.com/acme/docs.git", "https://github.com/acme/docs/compare/main...{b}?expand=1"),
        ("ssh://git@GitHub.com:22/acme/docs", "https://github.com/acme/docs/compare/main...{b}?expand=1"),
        (
            "https://github.example.org/team/docs.git",
            "https://github.example.org/team/docs/compare/main...{b}?expand=1",
        ),
        # GitLab: nested groups, its /-/compare path; a self-hosted one by name, its https port kept
        ("https://gitlab.com/acme/docs.git", "https://gitlab.com/acme/docs/-/compare/main...{b}"),
        (
            "git@gitlab.com:acme/sub/group/docs.git",
            "https://gitlab.com/acme/sub/group/docs/-/compare/main...{b}",
        ),
        (
            "https://gitlab.example.org:8443/a/b.git",
            "https://gitlab.example.org:8443/a/b/-/compare/main...{b}",
        ),
        ("ssh://git@gitlab.example.org:2222/a/b.git", "https://gitlab.example.org/a/b/-/compare/main...{b}"),
        # Gitea and Forgejo
        ("https://codeberg.org/acme/docs.git", "https://codeberg.org/acme/docs/compare/main...{b}"),
        ("https://gitea.com/acme/docs", "https://gitea.com/acme/docs/compare/main...{b}"),
        ("git@git.forgejo.example:acme/docs.git", "https://git.forgejo.example/acme/docs/compare/main...{b}"),
        ("http://gitea.local:3000/acme/docs.git", "http://gitea.local:3000/acme/docs/compare/main...{b}"),
        # no compare page: unknown hosts, git:// and file://, paths a forge does not have
        ("https://git.example.org/acme/docs.git", None),
        ("git@host.example:acme/docs.git", None),
        ("git://github.com/acme/docs.git", None),
        ("file:///srv/git/docs.git", None),
        ("https://github.com/acme.git", None),
        ("https://github.com/acme/docs/extra.git", None),
        ("https://gitlab.com/docs.git", None),
        ("https://github.com:notaport/acme/docs", None),
    ],
)
def test_compare_url(url: str, expected: str | None) -> None:
    assert compare_url(url, "main", BRANCH) == (None if expected is None else expected.format(b=BRANCH))


def test_branch_names_are_quoted_but_keep_their_slashes() -> None:
    found = compare_url("https://github.com/a/b.git", "release/v1", "wikiq/p#1")
    assert found == "https://github.com/a/b/compare/release/v1...wikiq/p%231?expand=1"
