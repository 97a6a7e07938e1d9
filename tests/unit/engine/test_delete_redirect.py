"""delete with redirect_links_to, against the independent reference of the link-rewrite properties: after
the batch, every link that resolved to the deleted page resolves to the redirect target, every other link
resolves where it did, and code, labels, fragments and other text keep their bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.unit.engine.markdown.test_rewrite_properties import (
    code_and_links,
    masked_links,
    ref_resolve,
    wikis,
)
from worker.engine import DictHead, blob_id, check_static, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Edit, written_paths

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)


def delete(path: str, version: str, target: str) -> dict[str, Any]:
    return {"op": "delete", "path": path, "expected_version": version, "redirect_links_to": target}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_redirect_repoints_every_link_to_the_deleted_page(data: st.DataObject) -> None:
    """Links to the deleted page now resolve to the target; all else stays as it was."""
    files, texts = data.draw(wikis())
    pages = sorted(p for p in texts if p.startswith("wiki/"))
    if len(pages) < 2:
        return
    gone = data.draw(st.sampled_from(pages))
    target = data.draw(st.sampled_from([p for p in pages if p != gone]))
    head = DictHead({path: texts.get(path, "img").encode() for path in files})
    plan = preflight(head, [EDIT.validate_python(delete(gone, blob_id(texts[gone].encode()), target))])
    after_files = files - {gone}
    rewritten = {a.path: a.count for a in plan.applied if a.op == "rewrite_links"}
    for page, text in texts.items():
        if page == gone:
            continue
        file = plan.changes.get(page)
        new_text = text if file is None or file.data is None else file.data.decode()
        if not page.startswith("wiki/"):
            assert new_text == text, page  # raw/ and root pages are never rewritten
            continue
        code_before, links_before = code_and_links(text)
        code_after, links_after = code_and_links(new_text)
        assert code_after == code_before
        assert masked_links(new_text, links_after) == masked_links(text, links_before)
        changed = 0
        for old, new in zip(links_before, links_after, strict=True):
            assert (old.kind, old.embed, old.fragment, old.label) == (
                new.kind,
                new.embed,
                new.fragment,
                new.label,
            )
            was = ref_resolve(old, page, files)
            if was is None:
                assert text[old.start : old.end] == new_text[new.start : new.end]
                continue
            assert ref_resolve(new, page, after_files) == (target if was == gone else was), (old, new)
            changed += text[old.start : old.end] != new_text[new.start : new.end]
        assert changed == rewritten.get(page, 0), page


def test_redirect_target_must_exist_and_differ() -> None:
    """The target must be a file when the delete runs (NOT_FOUND) and another path (INVALID_BATCH);
    a redirecting delete may write anywhere (write-prefix rights see "")."""
    head = DictHead({"wiki/a.md": b"[[b]]\n", "wiki/b.md": b"# B\n"})
    version = blob_id(b"# B\n")
    with pytest.raises(BatchRejected) as info:
        preflight(head, [EDIT.validate_python(delete("wiki/b.md", version, "wiki/c.md"))])
    assert (info.value.code, info.value.index) == ("NOT_FOUND", 0)
    batch = Batch.model_validate({"message": "m", "edits": [delete("wiki/b.md", version, "wiki/b.md")]})
    with pytest.raises(BatchRejected) as same:
        check_static(batch)
    assert same.value.code == "INVALID_BATCH"
    create = {"op": "create", "path": "wiki/c.md", "content": "# C\n"}
    plan = preflight(
        head, [EDIT.validate_python(create), EDIT.validate_python(delete("wiki/b.md", version, "wiki/c.md"))]
    )
    a = plan.changes["wiki/a.md"]
    assert a is not None and a.data == b"[[c]]\n"
    assert written_paths(EDIT.validate_python(delete("wiki/b.md", version, "wiki/c.md"))) == ["wiki/b.md", ""]
