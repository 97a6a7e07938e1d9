"""The import contracts of ``make lint`` hold, and fail loudly on a reverse import or an import cycle."""

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
    for package in ("api", "worker", "tools"):
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
    assert "never leads back to it KEPT" in " ".join(clean.stdout.split())
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


def _plant(tree: Path, module: str, text: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\n" + text + "\n")


def test_a_lazy_import_back_is_a_cycle_named_as_a_chain(tmp_path: Path) -> None:
    """An import inside a function that leads back to its importer breaks the cycle contract, which names
    the chain of modules and the line of each import on it."""
    tree = _copy(tmp_path)
    _plant(tree, "worker.git.objects", "def _planted() -> None:\n    from worker.git import repo  # noqa")
    broken = _lint(tree)
    assert broken.returncode != 0
    text = " ".join(broken.stdout.split())
    assert "never leads back to it BROKEN" in text
    assert "worker.git.objects -> worker.git.repo -> worker.git.objects" in text
    assert "worker.git.objects:" in text and "from worker.git import repo" in text


def test_an_import_for_types_only_counts_too(tmp_path: Path) -> None:
    """A module imported under ``TYPE_CHECKING`` that imports its importer back is a cycle as well."""
    tree = _copy(tmp_path)
    planted = "import typing\nif typing.TYPE_CHECKING:\n    import worker.jobs.queue"
    _plant(tree, "worker.jobs.payloads", planted)
    broken = _lint(tree)
    assert broken.returncode != 0
    cycle = "worker.jobs.payloads -> worker.jobs.queue -> worker.jobs.payloads"
    assert cycle in " ".join(broken.stdout.split())
