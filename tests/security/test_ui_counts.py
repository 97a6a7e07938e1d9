"""Finding 8 (low), ``/ui`` counts: a partition's queue depth counted the jobs of every wiki on it, so a
reader of one wiki learnt how much work other, invisible wikis had queued. Now the depth is counted over
the wikis the caller may read."""

from __future__ import annotations

import re

from tests.e2e.service import Service
from tests.security.conftest import as_
from worker.jobs.ids import partition_of


def _neighbour(of: str, partitions: int) -> str:
    """A wiki id on the same partition as ``of``."""
    return next(
        f"hidden-{n}"
        for n in range(1000)
        if partition_of(f"hidden-{n}", partitions) == partition_of(of, partitions)
    )


def test_the_reader_sees_only_its_wikis_work(stalled: Service) -> None:
    """Three jobs queued on a wiki the reader cannot see, one on its own, same partition (no worker runs
    them): the reader's page says 1 queued, depth 1; the admin's says 4."""
    partitions = int(stalled.env["WIKIQ_PARTITIONS"])
    hidden = _neighbour("sec", partitions)
    stalled.create_wiki(hidden)
    for n, wiki in enumerate([hidden, hidden, hidden, "sec"]):
        batch = {"message": "m", "edits": [{"op": "create", "path": f"wiki/c{n}.md", "content": "x"}]}
        assert stalled.submit(wiki, batch).status_code == 202
    partition = partition_of("sec", partitions)
    with as_(stalled, "reader") as reader:
        page = reader.get("/ui/state").json()["parts"]["wikis"]
    assert hidden not in page
    assert re.search(r'<span class="queued">1 queued</span>', page), page
    assert f"p{partition}: 1<" in page, page
    admin = stalled.client.get("/ui/state").json()["parts"]["wikis"]
    assert f"p{partition}: 4<" in admin, admin
