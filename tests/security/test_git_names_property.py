"""Property: wikiq refuses a path segment exactly when the installed git flags a tree that holds it.

Segments are drawn from an alphabet rich in what git's checks look at (dots, spaces, ``g i t`` in both
cases, ``~``, digits, ``:``, ``$``, the code points HFS+ ignores, the letters of ``modules`` and
``attributes``), from the spellings git matches (case-flipped, cut short, sprinkled with ignorable code
points, given NTFS tails), and from random text. Per example, every segment goes
into one repository: alone in trees of its own (as a file of hostile content and as a folder) so one
``git fsck --strict`` says which segments it flags; and the accepted ones together in a wiki commit on
``main`` (as pages and as folders under ``wiki/``), which fsck and a protected checkout must take.

Control characters and the backslash are left out of the alphabet: the contract refuses them in every
path although git itself does not, so for them the equivalence is one-way by design.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from tests.security.gitcheck import ObjectWriter, attribute, bare, checkout_refuses, fsck_messages, git
from tests.security.names import HFS_IGNORED_CODE_POINTS
from worker.engine.paths import MAX_SEGMENT_BYTES, segment_problem

HFS_IGNORED = [chr(cp) for cp in HFS_IGNORED_CODE_POINTS]
DANGEROUS = ".giGItT~1:$ " + "".join(HFS_IGNORED) + "modulesattrbMODULESATTRB0234789x"
# Names git's checks match, and near misses of them: drawn, then case-flipped, cut, and sprinkled with
# ignorable code points and NTFS tails by ``spellings``.
CORES = [
    ".git",
    ".git",
    ".git",
    "git~1",
    "git~1",
    ".gitmodules",
    ".gitattributes",
    "gitmod~1",
    "gitmod~4",
    "gitatt~2",
    "gi7eba~1",
    "gi7eba~9",
    "gi7d29~3",
    "gi7eb~12",
    "gi7d~123",
    "g~123456",
    "~1234567",
    "gitmod~5",
    "gi7eba~0",
    "git~2",
    ".gitignore",
    ".mailmap",
    "gitign~1",
    ".gitkeep",
    ".github",
    "git",
]
# Mostly what Windows drops or reads as a stream (so the name still matches), some that break the match.
TAILS = ["", "", "", ".", " ", ". .", " . ", ":", ":x", "::$INDEX_ALLOCATION", ".:$DATA", ".md", " x", "x~1"]


@st.composite
def spellings(draw: st.DrawFn) -> str:
    """A known name, its letters' case flipped at random, maybe cut short, with ignorables and a tail."""
    chars = [ch.swapcase() if draw(st.booleans()) else ch for ch in draw(st.sampled_from(CORES))]
    if draw(st.sampled_from(["keep", "keep", "keep", "cut"])) == "cut":
        del chars[draw(st.integers(0, len(chars) - 1))]
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(HFS_IGNORED)))
    return "".join(chars) + draw(st.sampled_from(TAILS)) or "x"


segments = st.one_of(
    spellings(),
    spellings(),
    spellings(),
    spellings(),
    st.text(alphabet=DANGEROUS, min_size=1, max_size=14),
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"), exclude_characters="/\\"),
        min_size=1,
        max_size=12,
    ),
)


# No shrinking: every step would run git again, and the assertion already names the offending segments.
@settings(max_examples=60, deadline=None, database=None, phases=(Phase.explicit, Phase.generate))
@given(st.lists(segments, min_size=20, max_size=60, unique=True))
def test_wikiq_refuses_a_segment_exactly_when_git_flags_it(names: list[str]) -> None:
    """Accepted segments pass git fsck --strict and a protected checkout; refused ones are flagged by fsck."""
    assert all(len(name.encode()) <= MAX_SEGMENT_BYTES for name in names)
    accepted = [name for name in names if segment_problem(name) is None]
    with tempfile.TemporaryDirectory() as tmp:
        repo = bare(Path(tmp) / "repo.git")
        writer = ObjectWriter()
        owner = writer.names_alone(names)
        wiki = writer.wiki_tree(accepted)
        head = writer.commit(wiki)
        writer.write(repo)
        git("--git-dir", str(repo), "update-ref", "refs/heads/main", head)
        flags, about_wiki = attribute(fsck_messages(repo), owner)
        checkout = checkout_refuses(repo, wiki)
    wrongly_accepted = {ascii(name): flags[name] for name in accepted if flags[name]}
    wrongly_refused = [ascii(name) for name in names if name not in accepted and not flags[name]]
    assert wrongly_accepted == {}, f"git fsck flags names wikiq accepts: {wrongly_accepted}"
    assert wrongly_refused == [], f"wikiq refuses names git takes: {wrongly_refused}"
    assert about_wiki == [], f"git fsck flags the wiki commit of accepted names: {about_wiki}"
    assert checkout is None, f"a protected checkout of the accepted names fails: {checkout}"
