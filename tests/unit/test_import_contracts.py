"""The import-direction contracts of ``make lint`` hold, and fail loudly on a reverse import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("api", "worker"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120
    )


def test_contracts_hold_and_a_reverse_import_breaks_them(tmp_path: Path) -> None:
    """The tree as it is keeps every contract; the engine importing the server breaks two of them."""
    tree = _copy(tmp_path)
    clean = _lint(tree)
    assert clean.returncode == 0, clean.stdout[-2000:]
    assert "0 broken" in clean.stdout
    engine = tree / "worker" / "engine" / "preflight.py"
    engine.write_text(engine.read_text() + "\nimport api.server.app  # noqa: E402,F401  (planted)\n")
    broken = _lint(tree)
    assert broken.returncode != 0
    assert "Layers: each package imports only the ones below it BROKEN" in " ".join(broken.stdout.split())
    assert "worker.engine.preflight -> api.server.app" in broken.stdout


def test_the_client_may_not_reach_into_the_server(tmp_path: Path) -> None:
    """The Python client importing the service layer breaks the client contract."""
    tree = _copy(tmp_path)
    client = tree / "api" / "client" / "http.py"
    client.write_text(client.read_text() + "\nimport worker.service  # noqa: E402,F401  (planted)\n")
    broken = _lint(tree)
    assert broken.returncode != 0
    assert "depend on neither the server nor worker internals BROKEN" in " ".join(broken.stdout.split())
