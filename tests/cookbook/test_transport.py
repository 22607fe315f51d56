"""Regression tests for the 45-second result-poll stall (root cause in stall_repro.py and
api/conn.go): the server closes the connection after /client/config, and the SDK scenario
that stalled every time before the fix now finishes in seconds."""

import http.client
import os
import subprocess
import sys

from conftest import HERE, MODEL


def test_client_config_reply_closes_connection():
    host, port = os.environ["TINKER_BASE_URL"].removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("POST", "/api/v1/client/config", body='{"sdk_version":"0.38.0"}',
              headers={"Content-Type": "application/json", "X-API-Key": os.environ["TINKER_API_KEY"],
                       "Connection": "keep-alive"})
    r = c.getresponse()
    r.read()
    assert r.status == 200
    assert r.getheader("Connection", "").lower() == "close"
    assert r.will_close


def test_sdk_poll_after_collected_config_client(fig):
    """stall_repro.py, 2 rounds: a collected config client must not stall a poll (every round stalled 45 s before the fix)."""
    p = subprocess.run([sys.executable, str(HERE / "stall_repro.py"), "--model", MODEL, "--rounds", "2"],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("round", "stall_repro"))]
    fig(rounds="; ".join(lines))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
