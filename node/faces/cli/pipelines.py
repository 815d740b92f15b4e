"""`cairn pipeline run FILE` and `cairn pipeline log NAME` (docs/provenance.md "Pipelines"): send the file to the
node as a job, follow its events (one line per step on a terminal, each with its query's current stage), render
the recorded run."""

from __future__ import annotations

import argparse
import collections
import json
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from node.faces.cli.api_client import NodeClient
from node.faces.cli.progress import STAGES, follow_job, spark_progress
from node.support.errors import InvalidInput

Command = Callable[[argparse.Namespace], int]
DONE = {"local": "from this node's index", "peer": "from a peer", "computed": "computed on Spark"}


class StepLines:
    """One line per step on stderr: a spinner and its query's stage while it runs, then how it was answered."""

    def __init__(self, show: bool) -> None:
        columns = (SpinnerColumn(finished_text="✓"), TextColumn("{task.description}"), TimeElapsedColumn())
        self.bar = Progress(*columns, console=Console(stderr=True)) if show else None
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> StepLines:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        step = data.get("step")
        if self.bar is None or not isinstance(step, str):
            return
        if step not in self.tasks:
            self.tasks[step] = self.bar.add_task(step, total=None)
        task = self.tasks[step]
        if kind == "step" and data["state"] != "running":
            end = DONE.get(data.get("source", ""), data["state"])
            detail = f", {data['rows']} rows" if "rows" in data else f": {data.get('error', '')}"
            self.bar.update(task, description=f"{step}: {end}{detail}", total=1, completed=1)
        elif kind == "spark":
            self.bar.update(task, description=f"{step}: {STAGES['computing']}: {spark_progress(data)}")
        elif kind in STAGES:
            text = STAGES[kind].format_map(collections.defaultdict(str, data))
            self.bar.update(task, description=f"{step}: {text}")


def follow_run(client: NodeClient, body: dict[str, Any], show: bool) -> dict[str, Any]:
    """Start the run as a job and follow its events to the run's record. Ctrl-C cancels the job (its current
    step's Spark job with it; the run is then not recorded) and exits 130."""
    body = {**body, "wait": False}
    cancelled = "pipeline job {job} (the run is not recorded)"
    return follow_job(client, "/api/v0/pipelines", body, StepLines(show), "run's record", cancelled)


def render(run: dict[str, Any]) -> None:
    print(f"run       {run['run']}")
    print(f"pipeline  {run['pipeline']}")
    print(f"previous  {run['previous'] or '-'}")
    width = max(len(s["name"]) for s in run["steps"])
    for s in run["steps"]:
        what = s["receipt"] or s["error"] or ""
        rows = f"{s['rows']} rows" if "rows" in s else ""
        print(f"  {s['name']:<{width}}  {s['source']:<8}  {rows:>10}  {what}")
    print(f"{run['status']}: {len(run['steps'])} steps, {run['computed']} computed on Spark, signed {run['signer']}")


def cmd_pipeline_run(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as e:
        raise InvalidInput(f"cannot read the pipeline file {args.file}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"the pipeline file {args.file} is not UTF-8 text") from None
    body = {"text": text, "trust": args.trust}
    run = follow_run(args.client(args), body, show=sys.stderr.isatty() and sys.stdout.isatty())
    if args.json:
        print(json.dumps(run, indent=2))
    else:
        render(run)
    if run["failed"]:
        print(f"error: step {run['failed']['step']!r} failed: {run['failed']['error']}", file=sys.stderr)
        return 1
    return 0


def cmd_pipeline_log(args: argparse.Namespace) -> int:
    path = f"/api/v0/pipelines/{urllib.parse.quote(args.name, safe='')}?limit={args.limit}"
    runs = args.client(args).get_json(path)["runs"]
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    for run in runs:
        sources = collections.Counter(s["source"] for s in run["steps"])
        said = ", ".join(f"{n} {k}" for k, n in sorted(sources.items()))
        print(f"{run['run']}  {run['time']}  {run['status']:6}  {said}")
    return 0


def add_pipeline_commands(
    sub: Any, group: Callable[..., Any], command: Callable[..., argparse.ArgumentParser], client: Callable[..., Any]
) -> None:
    pipeline = group(sub, "pipeline", "run a pipeline of SQL steps and show its runs")
    sp = command(pipeline, "run", cmd_pipeline_run, "run a pipeline file (YAML or JSON) and record the run")
    sp.add_argument("file", metavar="FILE", help="the pipeline file, - for stdin")
    sp.add_argument(
        "--trust",
        choices=["self", "community", "verify", "any"],
        help="how to use peers' results (default: peers.trust)",
    )
    sp.add_argument("--json", action="store_true", help="print the run as JSON")
    sp.set_defaults(client=client)
    sp = command(pipeline, "log", cmd_pipeline_log, "the runs of a pipeline, latest first")
    sp.add_argument("name", metavar="NAME", help="the pipeline's name (its file's name: field)")
    sp.add_argument("-n", "--limit", type=int, default=20, help="at most this many runs (default 20)")
    sp.add_argument("--json", action="store_true", help="print the runs as JSON")
    sp.set_defaults(client=client)
