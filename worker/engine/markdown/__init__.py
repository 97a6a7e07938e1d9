"""A pure markdown toolkit for refactor-grade edits (contract section 7): no I/O at all.

    document     the block structure of a page (markdown-it-py): lines, front matter, headings, inline blocks
    inline       code spans and link syntax inside one paragraph or heading
    links        find_links, resolve, backlinks, broken_links (wikiq's link resolution rule)
    rewrite      repoint_links, the one link walk of every refactor; rewrite_links after files moved
    anchors      which heading a link's fragment names, and how a link names one
    sections     outline and the five section ops
    frontmatter  read_frontmatter, set_frontmatter (YAML, line-exact)
    patterns     count_and_replace with a literal or an RE2 pattern
    bounds       TooLarge: a caller's bound on a result's size reached

Everything works on ``str`` (the caller decodes UTF-8 and skips pages that are not) and keeps every byte
it does not change. Refusals are ``worker.errors.BatchRejected`` carrying the failing edit's index.
"""

from worker.engine.markdown.bounds import TooLarge
from worker.engine.markdown.frontmatter import read_frontmatter, set_frontmatter
from worker.engine.markdown.links import (
    Backlink,
    BrokenLink,
    FileIndex,
    Link,
    Resolution,
    backlinks,
    broken_links,
    find_links,
    resolve,
    resolve_target,
)
from worker.engine.markdown.patterns import compile_pattern, count_and_replace
from worker.engine.markdown.rewrite import may_rewrite, rewrite_links
from worker.engine.markdown.sections import (
    Located,
    Section,
    append_section,
    blob_id,
    find_section,
    insert_section_after,
    locate,
    outline,
    remove_section,
    rename_section,
    replace_section,
)

__all__ = [
    "Backlink",
    "BrokenLink",
    "FileIndex",
    "Link",
    "Located",
    "Resolution",
    "Section",
    "TooLarge",
    "append_section",
    "backlinks",
    "blob_id",
    "broken_links",
    "compile_pattern",
    "count_and_replace",
    "find_links",
    "find_section",
    "insert_section_after",
    "locate",
    "may_rewrite",
    "outline",
    "read_frontmatter",
    "remove_section",
    "rename_section",
    "replace_section",
    "resolve",
    "resolve_target",
    "rewrite_links",
    "set_frontmatter",
]
