"""A local Spark cluster from the installed pyspark package (docs/scaling.md "Real clusters"):
a standalone master and N workers, or a Spark Connect server with a token, on 127.0.0.1.

    .venv/bin/python scripts/spark_cluster.py start --state DIR [--workers N] [--connect] [--token T]
    .venv/bin/python scripts/spark_cluster.py status --state DIR
    .venv/bin/python scripts/spark_cluster.py stop --state DIR

``start`` waits until the cluster answers, writes each process's PID to ``DIR/<name>.pid`` and prints the node
settings to use (``spark.mode``, ``spark.master`` or ``spark.remote``) as JSON; ``stop`` ends those PIDs (and their
process groups) only. The tests' fixtures are the context managers below (tests/fixtures/spark_cluster.py).

NOTES.md "Spark": the pip package ships ``bin/spark-class`` and ``bin/spark-submit`` (no ``start-master.sh``), which
run in the foreground here, so each process is ours by PID and is stopped by PID (SIGTERM, then SIGKILL of its own
process group, which it leads: ``start_new_session``). Every port is a free one picked at start; every address is
127.0.0.1 (the Connect server answers on ``localhost``: the client sends a token without TLS only to that host).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark

from spark_worker.session import FORCED

SPARK_HOME = Path(pyspark.__file__).parent
READY_S = 120.0  # a JVM start on a loaded 2-core machine; polled, never slept through


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of the process group this process leads (its JVM children with it)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left in its group (the group is the one we made)


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_") and k != "_JAVA_OPTIONS"}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_PID_DIR=str(work),
        SPARK_CONF_DIR=str(work / "conf"),  # an empty one: no spark-defaults.conf from the host
        SPARK_SUBMIT_OPTS=f"-Djava.io.tmpdir={work / 'tmp'}",
        SPARK_NO_DAEMONIZE="1",
    )
    for sub in ("logs", "conf", "tmp"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    return env


def _spawn(cmd: list[str], work: Path, name: str) -> Proc:
    log = work / f"{name}.log"
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=work,
            env=_env(work),
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(proc, log)


def _wait_port(p: Proc, port: int, what: str) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if p.proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({p.proc.returncode}):\n{p.tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port} in {READY_S:.0f} s:\n{p.tail()}")


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 1) -> Iterator[str]:
    """A master and ``workers`` workers (1 core, 1g each) on 127.0.0.1; yields the master URL."""
    procs, url = start_standalone(work, workers)
    try:
        yield url
    finally:
        for p in reversed(procs):
            p.stop()


def start_standalone(work: Path, workers: int) -> tuple[list[Proc], str]:
    """Start a master and ``workers`` workers; return them (master first) once all are registered."""
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    # No REST submission port (6066 by default): nothing here submits through it.
    props = _properties(work, {"spark.master.rest.enabled": "false", "spark.ui.enabled": "false"})
    master = _spawn(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", str(ui), "--properties-file", str(props)],
        work,
        "master",
    )
    procs = [master]
    try:
        _wait_port(master, port, "the Spark master")
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            args = [url, "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(free_port())]
            cmd = [spark_class, "org.apache.spark.deploy.worker.Worker", *args, "--work-dir", str(work / f"work{i}")]
            procs.append(_spawn(cmd, work, f"worker-{i}"))
        _wait_registered(master, workers)
    except BaseException:
        for p in reversed(procs):
            p.stop()
        raise
    return procs, url


def _wait_registered(master: Proc, workers: int) -> None:
    deadline = time.monotonic() + READY_S
    while master.log.read_text(errors="replace").count("Registering worker") < workers:
        if master.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Spark master did not register {workers} worker(s):\n{master.tail()}")
        time.sleep(0.2)


def _properties(work: Path, props: dict[str, str]) -> Path:
    path = work / "cluster.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def connect_confs(token: str | None) -> list[str]:
    """``--conf`` arguments of a Connect server that runs with Cairn's forced settings (and ``token``)."""
    confs = {**FORCED, "spark.ui.enabled": "false", "spark.connect.grpc.binding.address": "127.0.0.1"}
    if token is not None:
        confs["spark.connect.authenticate.token"] = token
    out: list[str] = []
    for key, value in confs.items():
        out += ["--conf", f"{key}={value}"]
    return out


@contextlib.contextmanager
def connect_server(work: Path, token: str | None, extra: dict[str, str] | None = None) -> Iterator[int]:
    """A Spark Connect server (``local[2]``) with Cairn's forced settings and ``token``; yields its port."""
    server, port = start_connect(work, token, extra)
    try:
        yield port
    finally:
        server.stop()


def start_connect(work: Path, token: str | None, extra: dict[str, str] | None = None) -> tuple[Proc, int]:
    """Start a Connect server; return it and its port once it listens."""
    port = free_port()
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name",
        "cairn-test-connect",
        "--master",
        "local[2]",
        *connect_confs(token),
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        f"spark.local.dir={work / 'local'}",
        "--conf",
        f"spark.sql.warehouse.dir={work / 'warehouse'}",
    ]
    for key, value in (extra or {}).items():
        cmd += ["--conf", f"{key}={value}"]
    server = _spawn(cmd, work, "connect")
    try:
        _wait_port(server, port, "the Spark Connect server")
    except BaseException:
        server.stop()
        raise
    return server, port


# --- the command line: processes that outlive it, known by their PID files ------------------------------------


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :].split()[:1] != [b"Z"]


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM the process group ``pid`` leads (``start_new_session``), then SIGKILL it if it outlives
    ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not alive(pid):
            return


def cli_start(state: Path, workers: int, connect: bool, token: str | None) -> dict[str, str]:
    """Start the cluster, write its PID files, return the node settings to use."""
    state.mkdir(parents=True, exist_ok=True)
    if any(state.glob("*.pid")):
        raise SystemExit(f"error: {state} already holds a cluster's PID files: stop it first")
    if connect:
        server, port = start_connect(state, token)
        procs = [server]
        settings = {"spark.mode": "connect", "spark.remote": f"sc://localhost:{port}"}
        if token:
            settings["spark.token"] = "<the token you gave: CAIRN_SPARK_TOKEN>"
    else:
        procs, url = start_standalone(state, workers)
        settings = {"spark.mode": "standalone", "spark.master": url}
    for p in procs:
        (state / f"{p.log.stem}.pid").write_text(f"{p.proc.pid}\n")
    (state / "settings.json").write_text(json.dumps(settings))
    return settings


def cli_status(state: Path) -> dict[str, object]:
    pids = {p.stem: int(p.read_text()) for p in sorted(state.glob("*.pid"))}
    settings = json.loads((state / "settings.json").read_text()) if (state / "settings.json").exists() else {}
    return {"processes": {name: {"pid": pid, "alive": alive(pid)} for name, pid in pids.items()}, **settings}


def cli_stop(state: Path) -> dict[str, object]:
    stopped = {}
    for pid_file in sorted(state.glob("*.pid"), reverse=True):  # workers before their master
        pid = int(pid_file.read_text())
        stop_pid(pid)
        stopped[pid_file.stem] = pid
        pid_file.unlink()
    (state / "settings.json").unlink(missing_ok=True)
    return {"stopped": stopped}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("--state", type=Path, required=True, help="the cluster's folder: PID files, logs, work")
    parser.add_argument("--workers", type=int, default=1, help="standalone workers (1 core, 1g each)")
    parser.add_argument("--connect", action="store_true", help="a Spark Connect server instead of a cluster")
    parser.add_argument("--token", default=os.environ.get("CAIRN_SPARK_TOKEN"), help="Connect token")
    args = parser.parse_args(argv)
    state = args.state.absolute()
    if args.action == "start":
        out: dict[str, object] = dict(cli_start(state, args.workers, args.connect, args.token))
    elif args.action == "status":
        out = cli_status(state)
    else:
        out = cli_stop(state)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
