"""Fuzzing against the OpenAPI schema with schemathesis: no server error, every answer as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.service import Service


def test_schemathesis_finds_no_server_error(tmp_path: Path) -> None:
    """At least 500 generated requests: no 5xx, every status and body conform to the schema."""
    service = Service(tmp_path).start(workers=1)
    try:
        service.create_wiki("fuzz")
        examples = os.environ.get("WIKIQ_FUZZ_EXAMPLES", "30")
        checks = "not_a_server_error,response_schema_conformance,status_code_conformance"
        schemathesis = Path(sys.executable).with_name("schemathesis")
        done = subprocess.run(
            [
                str(schemathesis),
                "run",
                f"{service.url}/openapi.json",
                "-c",
                checks,
                "-n",
                examples,
                "--seed",
                "7",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        generated = re.search(r"(\d+) generated", output)
        assert generated is not None, output[-2000:]
        assert int(generated[1]) >= 500, output[-2000:]
        assert "500 Internal" not in output
    finally:
        service.stop()
