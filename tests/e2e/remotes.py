"""Helpers for end-to-end tests of remote-backed wikis: a remotes file from declared remotes, and a
deployment whose workers each have their own data directory (nothing shared but Redis and the remote)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.service import Service
from worker.git.remote import Remote


def remotes_toml(*remotes: Remote) -> str:
    """The TOML of a remotes file declaring ``remotes``."""
    blocks = []
    for remote in remotes:
        fields = remote.model_dump(exclude_none=True, mode="json")
        lines = ["[[remotes]]"] + [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def deployment(root: Path, *remotes: Remote, workers: int = 1, **env: str) -> Service:
    """A deployment declaring ``remotes``; each worker keeps its own data directory."""
    root.mkdir(parents=True, exist_ok=True)
    file = root / "remotes.toml"
    file.write_text(remotes_toml(*remotes))
    service = Service(root, WIKIQ_REMOTES_FILE=str(file), **env).start(workers=0)
    for number in range(workers):
        start_worker(service, number)
    return service


def start_worker(service: Service, number: int, **env: str) -> Any:
    """Start worker ``number`` with its own data directory ``<root>/worker-<number>``."""
    return service.start_worker(WIKIQ_DATA_DIR=str(service.root / f"worker-{number}"), **env)


def batch(message: str, *edits: dict[str, Any]) -> dict[str, Any]:
    """A batch body."""
    return {"message": message, "edits": list(edits)}


def create(path: str, content: str = "x\n") -> dict[str, Any]:
    """A create edit."""
    return {"op": "create", "path": path, "content": content}
