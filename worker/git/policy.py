"""Which zone policy a wiki uses: the default, or the override in ``<repo>/wikiq-zones.json``.

The override lives in the bare repository's directory, beside ``config`` (not in the wiki's tree), so only
the operator sets it. It is read again when the file changes.
"""

from __future__ import annotations

from pathlib import Path

from worker.engine.paths import DEFAULT_POLICY, ZonePolicy

OVERRIDE_FILE = "wikiq-zones.json"
_cache: dict[Path, tuple[float, ZonePolicy]] = {}


def policy_for(repo_path: Path) -> ZonePolicy:
    """The zone policy of the wiki at ``repo_path``."""
    file = repo_path / OVERRIDE_FILE
    try:
        mtime = file.stat().st_mtime
    except FileNotFoundError:
        return DEFAULT_POLICY
    cached = _cache.get(file)
    if cached is None or cached[0] != mtime:
        cached = (mtime, ZonePolicy.model_validate_json(file.read_bytes()))
        _cache[file] = cached
    return cached[1]
