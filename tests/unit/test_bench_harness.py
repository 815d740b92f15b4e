"""The benches' shared harness (scripts/bench/_harness.py): a node is started, waited for and stopped by PID with
whatever it left behind; the API client parses what it is given; a phase tells our CPU from the machine's; the
quiet wait only waits when asked and records each wait."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
import _harness
from _harness import QUIET, Api, BenchNode, Phase, role, wait_machine_quiet
from _procs import pid_alive

# Stands for `cairn --home H node start --api-port 0`: a "Kubo" child, an API on a free port, the runtime file, the
# Spark log's warm-up lines; on SIGTERM it exits at once and leaves its "Kubo" running (the harness must stop it).
FAKE_NODE = """
import http.server, json, os, signal, subprocess, sys
from pathlib import Path
from types import SimpleNamespace

home = Path(sys.argv[sys.argv.index("--home") + 1])
kubo = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({"kubo": {"pid": kubo.pid, "api": "/fake"}, "spark": {"state": "up"},
                           "auth": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
(home / "logs").mkdir(parents=True, exist_ok=True)
(home / "logs" / "spark.log").write_text("warm-up query took 12 ms\\nJIT warm-up took 34 ms\\n")
(home / "api.token").write_text("secret\\n")
api = f"http://127.0.0.1:{server.server_address[1]}"
(home / "node.json").write_text(json.dumps({"pid": os.getpid(), "api": api}))
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
server.serve_forever()
"""


def test_a_node_is_started_waited_for_and_stopped_with_what_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "fake_node.py"
    fake.write_text(FAKE_NODE)
    monkeypatch.setattr(_harness, "cairn_argv", lambda: [sys.executable, str(fake)])
    node = BenchNode(tmp_path / "home", dict(os.environ), name="A")
    try:
        node.start(timeout=30)
        assert node.api.startswith("http://127.0.0.1:") and node.log_path == tmp_path / "home.log"
        assert node.info()["auth"] == "Bearer secret"  # the keep-alive client carries the node's token
        kubo = node.kubo_pid
        assert kubo is not None and kubo in node.children
        spark = node.wait_spark(timeout=30)
        assert (spark["state"], spark["warmup_ms"], spark["jit_warmup_ms"]) == ("up", 12, 34)
    finally:
        node.stop(timeout=10, grace=0.5)
    assert node.proc is not None and node.proc.poll() is not None
    assert not pid_alive(kubo)  # stopped by its PID after the node left it behind


def test_a_node_never_started_stops_quietly(tmp_path: Path) -> None:
    node = BenchNode(tmp_path / "home", {})
    node.stop()
    with pytest.raises(RuntimeError, match="not started"):
        node.info()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the node's server

    def do_GET(self) -> None:
        kinds: dict[str, tuple[str, bytes]] = {
            "/json": ("application/json", json.dumps({"auth": self.headers.get("Authorization")}).encode()),
            "/events": ("text/event-stream", b"event: done\ndata: {}\n\n"),
            "/empty": ("application/json", b""),
        }
        ctype, body = kinds[self.path]
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_api_client_gives_json_text_or_none(server: str) -> None:
    api = Api(server, "tok")
    try:
        ms, status, obj = api.request("GET", "/json")
        assert status == 200 and ms > 0 and obj == {"auth": "Bearer tok"}
        assert api.get("/events") == "event: done\ndata: {}\n\n"  # an event stream stays text
        assert api.request("GET", "/empty")[2] is None
    finally:
        api.close()


def test_a_phase_counts_what_we_started_apart_from_the_machine() -> None:
    phases: dict[str, Any] = {}
    with Phase("spin", phases):  # a child that uses 0.3 s of CPU, then is waited for
        subprocess.run([sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass"], check=True)
    got = phases["spin"]
    assert set(got) == {
        "seconds",
        "loadavg_1m_before",
        "loadavg_1m_after",
        "cpu_seconds_ours",
        "cpu_seconds_ours_by_process",
        "cpu_seconds_other",
        "other_cpu_share",
    }
    assert got["cpu_seconds_ours_by_process"]["exited children"] >= 0.25  # clock ticks: a little slack
    assert got["cpu_seconds_ours"] >= 0.25 and got["cpu_seconds_other"] >= 0


def test_role_names_the_bench_and_its_waited_children() -> None:
    assert role(os.getpid()) == "bench"
    assert role(-1) == "exited children"


def test_the_machine_quiet_wait_waits_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(QUIET, "waits", {})
    monkeypatch.setitem(QUIET, "max_wait_s", 0.0)
    wait_machine_quiet("off")
    assert QUIET["waits"] == {}
    monkeypatch.setitem(QUIET, "max_wait_s", 1.0)
    wait_machine_quiet("on", window=0.2, windows=2)  # the machine's own clock and CPU counters
    got = QUIET["waits"]["on"]
    assert set(got) == {"waited_s", "quiet", "last_other_cpu_share"} and got["last_other_cpu_share"] >= 0


class _Clock:
    """The harness's ``time`` on a clock of our own: a sleep moves it on at once, and is recorded."""

    strftime = staticmethod(time.strftime)  # the hour on the harness's messages

    def __init__(self) -> None:
        self.now, self.slept = 0.0, list[float]()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


@pytest.mark.parametrize(
    "shares, windows_slept, record",
    [
        ([0.5] * 9, 4, {"waited_s": 1.0, "quiet": False, "last_other_cpu_share": 0.5}),  # at most S, then go on
        ([0.5, 0.0, 0.0], 3, {"waited_s": 0.8, "quiet": True, "last_other_cpu_share": 0.0}),  # quiet: at once
        ([0.0, 0.5, 0.0, 0.0], 4, {"waited_s": 1.0, "quiet": True, "last_other_cpu_share": 0.0}),  # in a row
    ],
    ids=["busy", "quiet-after-one", "busy-breaks-the-row"],
)
def test_the_machine_quiet_wait_ends_when_quiet_or_after_at_most_s(
    monkeypatch: pytest.MonkeyPatch, shares: list[float], windows_slept: int, record: dict[str, Any]
) -> None:
    """Windows of ``window`` s until ``windows`` in a row are under the threshold, or ``S`` seconds have gone:
    counted on a clock of the test's own, with the other work's share of each window given."""
    clock, given = _Clock(), iter(shares)
    monkeypatch.setattr(_harness, "time", clock)
    monkeypatch.setattr(_harness, "OtherCpu", lambda: SimpleNamespace(start=lambda: None, share=lambda: next(given)))
    monkeypatch.setitem(QUIET, "waits", {})
    monkeypatch.setitem(QUIET, "max_wait_s", 1.0)
    wait_machine_quiet("on", window=0.25, windows=2)
    assert clock.slept == [0.25] * windows_slept
    assert QUIET["waits"]["on"] == record
