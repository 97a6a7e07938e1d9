"""The names the security tests try: the finding's six paths, git's other spellings of ``.git``,
``.gitmodules`` and ``.gitattributes`` (from path.c ``is_ntfs_dotgit`` / ``is_ntfs_dot_generic`` and utf8.c
``is_hfs_dotgit``), and near misses that git, and so wikiq, take.
"""

from __future__ import annotations

# The finding, verbatim.
FINDING = [
    "wiki/team-a/.git:x",
    ".git::$INDEX_ALLOCATION/config",
    "wiki/GIT~1:abc",
    "wiki/.git .:x",
    ".g\u200cit/config",
    ".git\ufeff/config",
]

# utf8.c next_hfs_char: the code points HFS+ ignores in names.
HFS_IGNORED_CODE_POINTS = [
    0x200C,
    0x200D,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x206A, 0x2070),
    0xFEFF,
]

# Segments git reads as ".git" (fsck: hasDotgit; checkout: "invalid path").
DOTGIT = [
    ".git",
    ".GIT",
    ".gIt",
    # NTFS drops trailing dots and spaces (is_ntfs_dotgit).
    ".git.",
    ".git ",
    ".git . ",
    ".git...",
    ".GIT. .",
    # The 8.3 short name of .git (is_ntfs_dotgit: only ~1, git puts .git first in a folder).
    "git~1",
    "GIT~1",
    "Git~1 .",
    # Alternate data streams: anything after ':' (is_ntfs_dotgit forbids them all).
    ".git:x",
    ".git::$INDEX_ALLOCATION",
    ".git::$DATA",
    ".git.:x",
    ".git :",
    "git~1:abc",
    "GIT~1::$INDEX_ALLOCATION",
    # HFS+ ignores these code points anywhere and folds case (is_hfs_dotgit, next_hfs_char).
    *[f".g{chr(cp)}it" for cp in HFS_IGNORED_CODE_POINTS],
    "\u200e.git",
    ".git\u200d",
    ".G\u202eI\u206aT",
    "\ufeff\ufeff.\u200cg\u200di\u200et\u200f",
]

# Segments git reads as .gitmodules or .gitattributes: fsck checks such a file's content (gitmodulesUrl,
# gitattributesLineLength, ...) and refuses such a folder (gitmodulesBlob, gitattributesBlob).
DOTFILES = [
    ".gitmodules",
    ".GitModules",
    ".gitmodules .",
    ".gitmodules:x",
    ".gitmodules::$DATA",
    "gitmod~1",
    "GITMOD~4",
    "gitmod~2. ",
    "gi7eba~1",
    "GI7EBA~9",
    "gi7eb~12",
    "g~123456",
    "~1234567",
    ".gitmodules\u200c",
    "\ufeff.gitmodules",
    ".git\u200dmodules",
    ".gitattributes",
    ".GITATTRIBUTES",
    ".gitattributes. ",
    ".gitattributes:stream",
    "gitatt~1",
    "gitatt~3",
    "gi7d29~1",
    "gi7d2~99",
    ".gitattrib\u200cutes",
    ".gitattributes\u206f",
]

# Names that look close but that git takes on every platform's checks it runs (so wikiq takes them too).
ACCEPTED = [
    "foo: bar.md",
    "a:b",
    "::$DATA",
    ".gitkeep",
    ".github",
    "git.md",
    "git",
    ".gitignore",
    ".mailmap",
    ".gitignore:x",
    "gitign~1",
    "mailma~1",
    ".git x",
    ".gitx",
    ".git.md",
    ".git-crypt",
    "x.git",
    "git~2",
    "git~1x",
    "git~12",
    " .git",
    "_git",
    ".gitmodules.md",
    ".gitmodulesx",
    ".gitattributes.txt",
    "gitmod~5",
    "gitmod~0",
    "gi7eba~0",
    "~123456",
    "~1234567.md",
    "~0234567",
    ".g\u200bit",  # ZERO WIDTH SPACE is not one HFS+ ignores
    ".g\u00a0it",
    ".g\u0131t",  # dotless i
    ".g\u0130t",  # capital I with dot
    ".\uff47\uff49\uff54",  # fullwidth letters
    "\u200c",
    "Straße",
    "日本語.md",
    "🦀 crab.md",
]
