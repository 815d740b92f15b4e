"""Every shell command shown in README.md and docs/*.md runs, and prints what the doc shows: a doc whose commands no
longer run, or print something else, is caught here rather than by a reader.

`tests/docs_blocks.py` extracts the blocks and compares output shapes. Here each block belongs to one *session*:
a fresh `$HOME` (so `~/.cairn` is the default home, `~/.cairn-1` another), a `cairn` on `PATH` and `.venv` beside
it (so `cairn …` and `.venv/bin/cairn …` both run this checkout), the nodes the doc says are running, and what the
prose around a block says was done before it (`setup`). The commands then run through bash in the order shown,
as a user types them: their exit status (an `error:` line or `# exit N` means a failure is expected) and their
output (when the doc shows any) are checked. Values the doc shows that belong to its own run (a dataset's head,
a key, an address) are learnt from the matching line of this run and replaced in the commands that follow, as a
user copies them; `captures` name the few that the doc elides (`RECEIPT…`).

`test_every_block_is_run` fails on a block no session runs, so a new command in a doc needs a session here. What
cannot run here is in `ELSEWHERE`, each with the test that runs it instead and why.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs_blocks import ROOT, Block, Step, align, blocks, learn, matches, shape
from tests.fixtures.nodes import NodeProcess, poll

# Runs elsewhere, with the reason.
ELSEWHERE = {
    "README.md › Demo: three nodes, real data #1": "tests/integration/test_demo.py runs scripts/demo.sh (80 s)",
    "demo.md › Demo: three nodes, one answer #1": (
        "`make setup` is the first thing `make test` runs; tests/integration/test_demo.py runs scripts/demo.sh"
    ),
    "scaling.md › A local cluster to try it #1": (
        "starts JVMs (a master and workers, or a Connect server): tests/integration/test_spark_modes.py's `cluster` "
        "fixture runs this script's start, status and stop, and its `connect_port` fixture the same with `--connect`"
    ),
    "container.md › Three nodes: `docker-compose.yml` #1": (
        "no Docker daemon or compose plugin on these machines: tests/integration/test_container_steps.py runs "
        "the image's steps as a script and lints the Dockerfile with hadolint"
    ),
}


@dataclass(frozen=True)
class Session:
    blocks: tuple[str, ...]
    nodes: tuple[str, ...] = ("~/.cairn",)  # homes whose node is running before the first command
    setup: tuple[str, ...] = ()  # what the prose says was done before (not shown as commands)
    env: dict[str, str] = field(default_factory=dict)  # NAME: a shell command whose output is $NAME
    captures: dict[str, str] = field(default_factory=dict)  # NAME…: a regex over the outputs so far (group 1)
    exact: str = r"^$"  # lines whose CIDs are the content's, the same on every node: compared as they are
    cwd_repo: bool = False  # run in the checkout (make), not in $HOME
    ports: dict[str, str] = field(default_factory=lambda: {"7420": "~/.cairn"})  # the doc's API ports: whose
    spark: bool = False  # the nodes start their Spark worker at once (as `make run` does), not at the first query


CITIES = r"printf 'id,city,pop\n1,Paris,2100000\n2,Lyon,520000\n3,Nice,340000\n' > cities.csv"
SALES = r"printf 'region,amount\nnorth,10\nsouth,7\nnorth,3\n' > sales.csv"
ADDDATA_OF_SALES = "cairn log sales --json | jq -r '[.[] | select(.event.kind == \"AddData\")][-1].cid'"
SALES_SQL = '"SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"'
# A type made as the doc's cities-type.json, from the structure of towns.
TOWNS_TYPE = (
    "S=$(cairn log towns --json | jq -r '.[] | select(.event.kind == \"SetDataSchema\") | .event.structure') && "
    'jq -n --arg s "$S" \'{cid: {"/": $s}, type_checking: "arrow-schema", creator: null, '
    'protocol_name: "transform.storage", protocol_version: "2.0.0", name: "towns"}\' > towns-type.json && '
    "cairn type put towns-type.json"
)

SESSIONS: dict[str, Session] = {
    "readme-make": Session(("README.md › Cairn #1",), nodes=(), cwd_repo=True),
    "readme-quickstart": Session(
        ("README.md › What runs today #1",),
        setup=("cairn-wait-ready ~/.cairn",),
        exact=r"^(query|invocation|execution)\s",
        spark=True,  # its /healthz shows the worker up, as after `make run`
    ),
    "readme-two-nodes": Session(
        ("README.md › Two nodes sharing one answer #1",),
        nodes=(),
        ports={"7420": "~/.cairn-1", "7430": "~/.cairn-2"},
        exact=r"^(query|invocation|execution)\s",
    ),
    "datasets-ingest": Session(
        (
            "datasets.md › Ingest #1",
            "datasets.md › Ingest #2",
            "datasets.md › The chain #1",
            "datasets.md › Reading #1",
            "datasets.md › Ingest #3",
        )
    ),
    # Three blocks on one node (their datasets have distinct names): a Spark worker started once, not three times.
    "datasets-queries": Session(
        (
            "datasets.md › Schema evolution #1",
            "datasets.md › Snapshot datasets, as queries see them #1",
            "queries.md › Inputs: declared, or by the dataset's name #1",
            "queries.md › An earlier version: `NAME@BLOCKCID`, `NAME@-N` #1",
        ),
        setup=(
            r"printf 'id,city\n1,Paris\n2,Lyon\n3,Nice\n' > s1.csv",
            r"printf 'id,city\n1,Paris\n2,Lille\n4,Brest\n' > s2.csv",
            "cairn add s1.csv --name towns --merge snapshot --primary-key id",
            "cairn add s2.csv --to towns --merge snapshot --primary-key id",
            SALES,
            "cairn add sales.csv --name sales",
            "cairn add sales.csv --to sales",
        ),
        captures={"bafyr4ig52zftj4…": ADDDATA_OF_SALES},
        exact=r"^(query|invocation|execution)\s",
    ),
    "datasets-pull": Session(
        ("datasets.md › Moving datasets between nodes #1",),
        nodes=("~/.cairn-src", "~/.cairn"),
        ports={"7420": "~/.cairn-src"},
        setup=(
            CITIES,
            "cairn --home ~/.cairn-src add cities.csv --name cities",
            "cairn connect $(cairn --home ~/.cairn-src status --json | jq -r '.addresses.cairn_connect[0]')",
        ),
        captures={"bafyr4ievjonbnf…": "cairn --home ~/.cairn-src ls --json | jq -r '.[0].head'"},
    ),
    "gateway": Session(
        ("gateway.md › Examples #1",),
        setup=(CITIES, "cairn add cities.csv --name cities", "mkdir -p d/sub && echo hello > d/sub/hello.txt"),
        env={
            "API": "cairn status --json | jq -r .api",
            "HEAD": "cairn ls --json | jq -r '.[0].head'",
            "SLICE": "cairn log cities --json | jq -r '.[0].event.slices[0].data'",
            "DIR": "kubo-add-dir d",
        },
    ),
    "peers": Session(
        ("peers.md › Connecting #1",),
        nodes=("~/.cairn-a", "~/.cairn-b"),
    ),
    "peers-trust": Session(
        ("peers.md › Floods and quotas #1",),
        nodes=("~/.cairn-a", "~/.cairn"),
        setup=(
            SALES,
            "cairn --home ~/.cairn-a add sales.csv --name sales",
            "cairn add sales.csv --name sales",
            f"cairn --home ~/.cairn-a query {SALES_SQL} -i sales=sales",
            "cairn connect $(cairn --home ~/.cairn-a status --json | jq -r '.addresses.cairn_connect[0]')",
        ),
        captures={"did:key:z6Mk…": "cairn --home ~/.cairn-a status --json | jq -r .node_key"},
        exact=r"^(query|invocation|execution|accepted)\s",
    ),
    "provenance-types": Session(
        (
            "provenance.md › Walk-through #1",
            "provenance.md › Walk-through #2",
            "provenance.md › Walk-through #3",
            "provenance.md › A query's declared output type #1",
        ),
        captures={
            "bafyr4HEAD…": "cairn ls --json | jq -r '.[] | select(.name == \"cities\") | .head'",
            "bafyr4TOWNS…": TOWNS_TYPE,
        },
    ),
    "provenance-results": Session(
        (
            "provenance.md › Lineage #1",
            "provenance.md › Verify (offline) #1",
            "provenance.md › Verify (recompute) #1",
            "provenance.md › Proofs #1",
        ),
        setup=(
            r"printf 'city,pop\nParis,2100000\nLyon,520000\n' > cities.csv",
            r"printf 'town,people\nArles,50000\n' > towns.csv",
        ),
        captures={
            "RECEIPT…": "jq -r .receipt ~/out.query",
            "EXECUTION…": "jq -r .execution ~/out.query",
            "SLICE…": "jq -r '.slices[0]' ~/out.query",
        },
    ),
    "provenance-pipelines": Session(
        ("provenance.md › Pipelines #1",),
        setup=(
            r"printf 'id,person,amount,status\n1,ann,12,paid\n2,bob,5,paid\n3,ann,7,void\n4,cat,30,paid\n5,bob,9,paid\n"
            r"6,dan,4,paid\n' > orders.csv",
            r"printf 'person,city\nann,Paris\nbob,Lyon\ncat,Paris\ndan,Nice\n' > people.csv",
            "doc-yaml provenance.md sales.yaml",
        ),
        captures={"RECEIPT…": "cairn pipeline log sales --json | jq -r '.[0].steps[-1].receipt'"},
    ),
}


def _planned() -> dict[str, str]:
    return {key: name for name, s in SESSIONS.items() for key in s.blocks}


def test_every_block_is_run() -> None:
    """Each shell block of the docs is run by one session here, or by the test ELSEWHERE names; nothing stale."""
    found = {b.key for b in blocks()}
    planned = _planned()
    assert found - planned.keys() - ELSEWHERE.keys() == set(), "blocks no test runs: add a session"
    assert (planned.keys() | ELSEWHERE.keys()) - found == set(), "sessions name blocks the docs no longer have"
    assert not planned.keys() & ELSEWHERE.keys()
    for key, why in ELSEWHERE.items():
        test = re.search(r"tests/\S+\.py", why)
        assert test and (ROOT / test.group(0)).exists(), key


def test_the_shapes_keep_what_matters() -> None:
    """The comparison is not blind: a changed word, value, row count or line order is a mismatch."""
    shown = ["created cities: 3 rows added of 3 read, 1 slices, 0.04 s", "head  bafyr4ignme5lrc635lstib"]
    assert matches(shown, ["created cities: 3 rows added of 3 read, 1 slices, 1.50 s", "head  bafyr4iother"])
    assert not matches(shown, ["created cities: 4 rows added of 4 read, 1 slices, 0.04 s", shown[1]])
    assert not matches(shown, list(reversed(shown)))
    assert not matches(shown, shown[:1])
    assert matches(["a", "…", "d"], ["a", "b", "c", "d"]) and not matches(["a", "…", "d"], ["a", "b"])
    assert shape("x 12D3KooWAbc y did:key:z6MkQ") == "x <peer> y <did>"
    assert learn("head  bafyr4DOC…", "head  bafyr4ireal") == {"bafyr4DOC…": "bafyr4ireal"}


# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Shell:
    """One session's world: a $HOME, the nodes in it, and what was learnt from the outputs so far."""

    home: Path
    env: dict[str, str]
    cwd: Path
    nodes: dict[str, NodeProcess] = field(default_factory=dict)
    learnt: dict[str, str] = field(default_factory=dict)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # outputs that are not what the doc shows

    def path(self, home: str) -> Path:
        return self.home / home.removeprefix("~/")

    def start_node(self, home: str, *flags: str, spark: bool = False) -> NodeProcess:
        return self.launch_node(home, *flags, spark=spark).wait_ready(timeout=120)

    def launch_node(self, home: str, *flags: str, spark: bool = False) -> NodeProcess:
        # Spark starts at a session's first query, not with every node (most sessions run none).
        env = {"CAIRN_SPARK_AUTOSTART": str(spark).lower(), "CAIRN_SPARK_WARMUP_ROWS": "0"}
        node = NodeProcess(self.path(home), env=env).launch(*flags)
        self.nodes[home] = node
        return node

    def run(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                node.stop()
        for proc in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)


@contextmanager
def _shell(tmp_path: Path) -> Iterator[Shell]:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    venv = Path(sys.executable).parent.parent
    (home / ".venv").symlink_to(venv)
    (home / "bin" / "cairn").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m node "$@"\n')
    (home / "bin" / "cairn").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(HOME=str(home), PATH=f"{home / 'bin'}:{env['PATH']}", PYTHONUNBUFFERED="1", COLUMNS="200")
    s = Shell(home, env, home)
    try:
        yield s
    finally:
        s.stop()


def _expected_status(step: Step) -> int | None:
    """0, the code a `# exit N` comment names, or None (any failure) when the doc shows an error."""
    said = re.search(r"#.*\bexit (\d+)", step.command)
    if said:
        return int(said.group(1))
    if any(line.startswith("error:") for line in step.shown):
        return None
    if step.shown and step.shown[0].startswith("false"):
        return 1
    return 0


def _substitute(shell: Shell, session: Session, command: str) -> str:
    """The doc's command as this run types it: its nodes' ports, the values learnt or captured so far."""
    for port, home in session.ports.items():
        if home in shell.nodes:
            command = re.sub(rf"(http://)?127\.0\.0\.1:{port}\b", shell.nodes[home].api, command)
    for token, how in session.captures.items():
        if token in command and token not in shell.learnt:
            got = shell.run(how)
            assert got.returncode == 0 and got.stdout.strip(), f"capture {token}: {how}\n{got.stdout}{got.stderr}"
            shell.learnt[token] = got.stdout.strip()
    for token in sorted(shell.learnt, key=len, reverse=True):
        command = command.replace(token, shell.learnt[token])
    return command


def _start_in_background(shell: Shell, command: str) -> bool:
    """`cairn --home H node start … &`: the node this run starts (on a free port), stopped by PID at the end."""
    m = re.fullmatch(r"\S*cairn --home (\S+) node start.*&", command.strip())
    if m:
        shell.start_node(m.group(1))
    return m is not None


def _make(shell: Shell, command: str) -> None:
    """The README's `make` targets, in this checkout, with the real $HOME (its Kubo build cache) but a node home,
    API port and shim directory of this test's."""
    target = command.split()[1]
    env = {**os.environ, "CAIRN_HOME": str(shell.path("~/.cairn")), "CAIRN_API_PORT": "0"}
    env["SHIM_DIR"] = str(shell.home / "shims")
    if target == "test":  # the suite this test is part of: only what it would run
        r = subprocess.run(["make", "-n", "test"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0 and "-m pytest" in r.stdout and "mypy" in r.stdout, r.stdout + r.stderr
    elif target == "run":  # a node in the foreground: up and ready, then stopped as Ctrl-C would
        proc = subprocess.Popen(["make", "run"], cwd=ROOT, env=env, start_new_session=True)
        shell.background.append(proc)
        node = NodeProcess(shell.path("~/.cairn"))
        runtime = node.home / "node.json"
        poll(lambda: runtime.exists() and json.loads(runtime.read_text()).get("api"), 300, what="make run's node")
        node.api = json.loads(runtime.read_text())["api"]
        poll(lambda: node.get("/healthz")[1].get("ok"), 60, what="make run's node to answer /healthz")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) is not None
    else:
        r = subprocess.run(["make", target], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0, f"make {target}\n{r.stdout}{r.stderr}"
        if target == "shim":
            shim = shell.home / "shims" / "cairn"
            assert subprocess.run([str(shim), "--help"], capture_output=True, check=False).returncode == 0


def _run_step(shell: Shell, session: Session, where: str, step: Step) -> None:
    if _start_in_background(shell, step.command):
        return
    if step.command.startswith("make "):
        return _make(shell, step.command)
    command = _substitute(shell, session, step.command)
    r = subprocess.run(
        ["bash", "-c", command],
        cwd=shell.cwd,
        env=shell.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    said = f"{where}\n$ {command}\n{r.stdout}"
    sub = re.match(r"\S*cairn(?: --home \S+)? (\w+)", command)
    if sub:  # for captures: the last output of each subcommand, as ~/out.SUBCOMMAND
        (shell.home / f"out.{sub.group(1)}").write_text(r.stdout)
    expected = _expected_status(step)
    if not (r.returncode == expected if expected is not None else r.returncode != 0):
        shell.wrong.append(f"exit {r.returncode}: {said}")
        raise AssertionError("\n\n".join(shell.wrong))  # what follows would fail for this one's sake
    if not step.shown:
        if os.environ.get("DOCS_SHOW_ALL"):
            shell.wrong.append(said)
        return
    pairs = align(step.shown, r.stdout.splitlines(), str(shell.cwd), session.exact)
    if pairs is None:  # go on: one run shows every output that differs
        shell.wrong.append(f"{said}--- the doc shows:\n" + "\n".join(step.shown))
        return
    for doc_line, got_line in pairs:
        shell.learnt.update(learn(doc_line, got_line))


def _ready(shell: Shell, home: str) -> None:
    node = shell.nodes[home]
    poll(lambda: node.get("/healthz")[1].get("ready"), 180, interval=0.2, what=f"{home} ready")


def _kubo_add_dir(shell: Shell, directory: str) -> str:
    """A directory added to the default node's Kubo (`ipfs add -r`), as gateway.md's $DIR."""
    info = json.loads(shell.run("cairn status --json").stdout)
    kubo = re.sub(r"^http://([\d.]+):(\d+)$", r"/ip4/\1/tcp/\2", info["kubo"]["api"])
    kubo = re.sub(r"^unix:", "/unix", kubo)  # the managed Kubo's socket (unix:/path) as a multiaddr
    secret = shell.path("~/.cairn/kubo.secret").read_text().strip()  # managed Kubo's RPC needs it
    r = shell.run(f"ipfs --api {kubo} --api-auth bearer:{secret} add -r -Q --cid-version 1 {directory}")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _prepare(shell: Shell, session: Session) -> None:
    if session.cwd_repo:
        shell.cwd = ROOT
    for node in [shell.launch_node(home, spark=session.spark) for home in session.nodes]:  # side by side
        node.wait_ready(timeout=120)
    for command in session.setup:
        if command.startswith("cairn-wait-ready "):
            _ready(shell, command.split()[1])
            continue
        if command.startswith("doc-yaml "):  # the doc's ```yaml block, as the file its commands read
            _, doc, name = command.split()
            text = (ROOT / "docs" / doc).read_text()
            (shell.cwd / name).write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))  # type: ignore[union-attr]
            continue
        r = shell.run(command)
        assert r.returncode == 0, f"setup: {command}\n{r.stdout}{r.stderr}"
    for name, how in session.env.items():
        value = _kubo_add_dir(shell, how.split()[1]) if how.startswith("kubo-add-dir ") else shell.run(how).stdout
        assert value.strip(), f"${name}: {how} printed nothing"
        shell.env[name] = value.strip()


def _run_session(name: str, tmp_path: Path, kubo_binary: Path) -> None:
    """One session from its first command to its last; raises with every output that is not what the docs show."""
    session = SESSIONS[name]
    with _shell(tmp_path) as shell:
        shell.env["PATH"] = f"{kubo_binary.parent}:{shell.env['PATH']}"
        _prepare(shell, session)
        by_key = {b.key: b for b in blocks()}
        for key in session.blocks:
            block: Block = by_key[key]
            for step in block.steps:
                _run_step(shell, session, f"{block.path.name}:{block.line} ({key})", step)
        assert not shell.wrong, "outputs that are not what the docs show:\n\n" + "\n\n".join(shell.wrong)


# Sessions run this many at a time: each shares nothing with another (its own $HOME, nodes, Kubos and Spark
# workers, every port picked free), and a session runs one command at a time, so alone it leaves a core idle.
SIDE_BY_SIDE = 2


@pytest.fixture(scope="module")
def sessions(
    request: pytest.FixtureRequest, kubo_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[None]]]:
    """Every selected session started at once, ``SIDE_BY_SIDE`` at a time, in test order: each test waits for its
    own and fails with what it found."""
    names = [
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and getattr(item, "originalname", "") == "test_the_docs_commands_run"
    ]
    with ThreadPoolExecutor(SIDE_BY_SIDE, thread_name_prefix="docs-session") as pool:
        started = {name: pool.submit(_run_session, name, tmp_path_factory.mktemp(name), kubo_binary) for name in names}
        try:
            yield started
        finally:
            for future in started.values():
                future.cancel()  # those not begun (a run stopped early); the others end as they would


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_the_docs_commands_run(name: str, sessions: dict[str, Future[None]]) -> None:
    sessions[name].result()
