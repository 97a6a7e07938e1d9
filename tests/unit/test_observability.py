"""Pure pieces of metrics, logs and doctor: series fields, outcome labels, log lines, redaction."""

from __future__ import annotations

import io
import json
import logging

import structlog

from api.cli.doctor import Finding, _ranges, redacted, report
from worker.jobs import events as telemetry
from worker.schema.answers import Attempt
from worker.telemetry import logs
from worker.telemetry.metrics import bound_text, field, parse_field

AT = "2026-01-01T00:00:00.000Z"


def test_field_round_trips_and_cleans_separators() -> None:
    """A series field parses back to its name, labels and part; separators in values are replaced."""
    raw = field("wikiq_jobs_failed", (("code", "A|B,C=D"),), "le=" + bound_text(0.05))
    assert parse_field(raw) == ("wikiq_jobs_failed", (("code", "A_B_C_D"),), "le=0.05")
    assert parse_field(field("wikiq_jobs_accepted")) == ("wikiq_jobs_accepted", (), "")
    assert parse_field("not a field") is None


def test_webhook_outcomes() -> None:
    """Each recorded attempt maps to one outcome label."""
    cases = {
        200: "delivered",
        204: "delivered",
        302: "redirect",
        404: "http_4xx",
        410: "http_4xx",
        500: "http_5xx",
    }
    for status, outcome in cases.items():
        assert telemetry.webhook_outcome(Attempt(at=AT, status=status)) == outcome
    assert telemetry.webhook_outcome(Attempt(at=AT, error="timeout")) == "timeout"
    assert telemetry.webhook_outcome(Attempt(at=AT, error="ConnectError: refused")) == "network"


def test_log_lines_are_json_and_drop_content_keys() -> None:
    """Structured and standard-library lines are one JSON object each; content and secret keys are dropped."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("arq").level)
    logs.configure("info", stream)
    try:
        logs.get("wikiq.test").info("job.started", job_id="J1", content="PAGE", token="T", edit_count=2)
        logs.get("wikiq.test").debug("hidden", job_id="J2")
        logging.getLogger("wikiq.std").warning("partition %s: lease lost", 3)
    finally:
        structlog.reset_defaults()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("arq").setLevel(saved[2])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["job.started", "partition 3: lease lost"]
    assert lines[0]["job_id"] == "J1" and lines[0]["edit_count"] == 2 and lines[0]["logger"] == "wikiq.test"
    assert "content" not in lines[0] and "token" not in lines[0]
    assert lines[1]["level"] == "warning" and lines[1]["logger"] == "wikiq.std"
    assert all("timestamp" in line for line in lines)


def test_doctor_report_redacts_and_exits_by_failures() -> None:
    """Passwords never print, partition lists collapse to ranges, and only a failure makes exit 1."""
    assert redacted("redis://:hunter2@db:6379/0") == "redis://:***@db:6379/0"
    assert redacted("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert _ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    text, code = report([Finding("git", "ok", "git 2.39"), Finding("aof", "warn", "unknown", "check it")])
    assert code == 0 and "fix: check it" in text
    text, code = report([Finding("redis", "fail", "down", "start it")])
    assert code == 1 and text.splitlines()[0].startswith("FAIL  redis")
