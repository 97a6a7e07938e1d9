"""A webhook receiver with the standard library only: it verifies each delivery's Standard Webhooks
signature, refuses stale ones, and prints the event.

    python examples/webhook_receiver.py [PORT]

PORT defaults to 8000 (0: any free port; the line it prints first says which). The secret is
WIKIQ_WEBHOOK_SECRET, else the one `make run` keeps in data/webhook-secret.
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

SECRET = os.environ.get("WIKIQ_WEBHOOK_SECRET") or Path("data/webhook-secret").read_text().strip()
# the HMAC key: the base64 bytes after whsec_ ("==" pads a secret written without padding)
KEY = base64.b64decode(SECRET.removeprefix("whsec_") + "==")
TOLERANCE = 5 * 60  # seconds: a timestamp further from our clock is a replayed delivery


def verified(headers, body: bytes) -> bool:
    """True when ``body`` (the raw bytes, before any JSON parsing) was signed with our key lately."""
    msg_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
    if not stamp.isdecimal() or abs(time.time() - int(stamp)) > TOLERANCE:
        return False
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest())
    signatures = headers.get("webhook-signature", "").split()  # "v1,<base64>", space-separated
    return any(
        hmac.compare_digest(s.removeprefix("v1,").encode(), expected)
        for s in signatures
        if s.startswith("v1,")
    )


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if not verified(self.headers, body):
            print("rejected: bad or stale signature", flush=True)
            self.send_response(401)  # wikiq never sends a bad signature: someone else does
            self.end_headers()
            return
        self.send_response(200)  # answer at once (within 15 s); do any slow work afterwards
        self.end_headers()
        event = json.loads(body)
        job = event["data"]
        outcome = f"commit {job['result']['commit']}" if job["result"] else f"error {job['error']['code']}"
        print(f"verified {event['type']} job {job['job_id']} {outcome}", flush=True)


if __name__ == "__main__":
    server = HTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8000), Handler)
    print(f"listening on http://127.0.0.1:{server.server_port}/", flush=True)
    server.serve_forever()
