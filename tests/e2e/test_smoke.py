"""The shortest path through the service: create a wiki, submit a batch, see its commit."""

from __future__ import annotations

from tests.e2e.service import Service


def test_batch_becomes_one_commit(service: Service) -> None:
    """A two-edit batch is applied as one commit whose trailer names the job."""
    service.create_wiki("demo")
    index = service.page("demo", "index.md")
    job = service.apply(
        "demo",
        {
            "message": "first",
            "edits": [
                {"op": "create", "path": "wiki/a.md", "content": "# A\n"},
                {
                    "op": "overwrite",
                    "path": "index.md",
                    "content": "# I\n",
                    "expected_version": index["version"],
                },
            ],
        },
    )
    assert job["status"] == "succeeded", job
    commits = service.client.get("/v1/wikis/demo/commits").json()["commits"]
    assert commits[0]["commit"] == job["result"]["commit"]
    assert commits[0]["job_id"] == job["job_id"]
    assert service.page("demo", "wiki/a.md")["content"] == "# A\n"
