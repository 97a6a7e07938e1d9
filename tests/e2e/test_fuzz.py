"""Fuzzing against the OpenAPI schema with schemathesis (every check, every phase, stateful included, and
``/mcp``): no server error, every request the schema allows is taken, every one it refuses is refused, every
answer as documented. ``schemathesis.toml`` says why two answers depend on state no schema describes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.service import Service


def test_schemathesis_finds_no_server_error(tmp_path: Path) -> None:
    """At least 500 generated requests and no failure of any check."""
    service = Service(tmp_path).start(workers=1)
    try:
        service.create_wiki("fuzz")
        examples = os.environ.get("WIKIQ_FUZZ_EXAMPLES", "30")
        schemathesis = Path(sys.executable).with_name("schemathesis")
        done = subprocess.run(
            [
                str(schemathesis),
                "run",
                f"{service.url}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "use_after_free",  # DELETE cancels a job, which stays readable (schemathesis.toml)
                "-n",
                examples,
                "--seed",
                "7",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=Path(__file__).resolve().parents[2],  # where schemathesis.toml is
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        generated = re.search(r"(\d+) generated", output)
        assert generated is not None, output[-2000:]
        assert int(generated[1]) >= 500, output[-2000:]
        assert "500 Internal" not in output
    finally:
        service.stop()
