"""`cairn lineage` and `cairn verify` (docs/provenance.md "Lineage", "Verify (offline)"): ask the node, render."""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from node.faces.cli.api_client import NodeClient
from node.faces.cli.progress import Stages, follow_job
from node.services.provenance.render import FORMATS, node_text, root, to_dot, to_mermaid, to_svg
from node.support.errors import InvalidInput, RemoteError

Command = Callable[[argparse.Namespace], int]


def tree(graph: dict[str, Any]) -> Tree:
    """The lineage as a terminal tree from the start node; a node reached twice is shown once, then named."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    children: dict[str, list[dict[str, str]]] = {}
    for e in graph["edges"]:
        children.setdefault(e["from"], []).append(e)
    start = root(graph)
    top = Tree(escape(node_text(nodes[start])) if start in nodes else start)
    seen = {start}
    todo = [(top, start)]
    while todo:
        branch, key = todo.pop()
        for e in children.get(key, []):
            via = " (via the index)" if e["via"] == "index" else ""
            text = f"[dim]{escape(e['label'])}{via}[/dim] {escape(node_text(nodes[e['to']]))}"
            if e["to"] in seen:
                branch.add(text + " [dim](shown above)[/dim]")
                continue
            seen.add(e["to"])
            todo.append((branch.add(text), e["to"]))
    return top


def cmd_lineage(args: argparse.Namespace) -> int:
    graph = args.client(args).get_json("/api/v0/lineage/" + urllib.parse.quote(args.ref, safe=""))
    render = {"json": lambda g: json.dumps(g, indent=2) + "\n", "dot": to_dot, "mermaid": to_mermaid, "svg": to_svg}
    if args.format:
        sys.stdout.write(render[args.format](graph))
    else:
        # A pipe gets whole lines (no cropping at 80 columns); a terminal wraps at its width.
        Console(soft_wrap=True, emoji=False, highlight=False, width=None if sys.stdout.isatty() else 100_000).print(
            tree(graph)
        )
        if graph["cut"]:
            print(f"(cut: {graph['cut']})")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    if args.cid.endswith(".car"):  # a proof file: checked here, with no node (docs/provenance.md "Proofs")
        return verify_proof_file(args)
    body = {"cid": args.cid, "offline": args.offline, "recursive": args.recursive}
    if not args.offline:
        return _recompute(args, body)
    return render_verify(args, args.client(args).post_json("/api/v0/verify", json.dumps(body).encode()))


def verify_proof_file(args: argparse.Namespace) -> int:
    """`cairn verify FILE.car --offline`: in this process, reading the file only; no node is asked, even one
    that is configured and running. Exit 2 for a usage error (no such file, no --offline, --recursive)."""
    import asyncio

    from node.services.provenance.proof import verify_car

    path = Path(args.cid)
    if not args.offline or args.recursive or not path.is_file():
        why = "no such file" if not path.is_file() else "a proof file is checked with --offline, not --recursive"
        print(f"error: {args.cid}: {why}", file=sys.stderr)
        return 2
    return render_verify(args, asyncio.run(verify_car(path)))


def cmd_export_proof(args: argparse.Namespace) -> int:
    """`cairn export-proof CID -o FILE.car [--no-data]`: the node's proof of a result, streamed to the file."""
    url = "/api/v0/proof/" + urllib.parse.quote(args.cid, safe="") + ("?data=false" if args.no_data else "")
    out = Path(args.output)
    tmp = out.with_name(out.name + ".part")  # a failed download never leaves a proof-looking file
    with args.client(args).open("GET", url) as resp:
        root = resp.headers.get("X-Ipfs-Roots", "")
        try:
            f = open(tmp, "wb")  # noqa: SIM115  closed below, apart from the stream's errors
        except OSError as e:
            raise InvalidInput(f"cannot write {tmp}: {e.strerror}") from None
        with f:
            try:
                while chunk := resp.read(1 << 20):
                    f.write(chunk)
            except (ConnectionError, http.client.HTTPException) as e:  # the node cut it: a block it could not read
                tmp.unlink(missing_ok=True)
                raise RemoteError(
                    f"the proof did not arrive whole ({type(e).__name__}): nothing written", 502
                ) from None
            size = f.tell()
    tmp.replace(out)
    print(f"wrote {out} ({size} bytes; root: the receipt {root})", file=sys.stderr)
    return 0


def render_verify(args: argparse.Namespace, answer: Mapping[str, Any]) -> int:
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        for step in answer["executions"]:
            print(f"receipt {step['receipt']}" if step["receipt"] else f"proof {answer.get('proof', '')}")
            for c in step["checks"]:
                line = f"  {c['status']:9} {c['check']} ({c['subject']})"
                if c["detail"]:
                    line += f": {c['detail']}"
                if c["status"] == "failed" and ("expected" in c or "got" in c):
                    line += f"; expected {c.get('expected')!r}, got {c.get('got')!r}"
                print(line)
        s = answer["summary"]
        print(f"{s['ok']} ok, {s['failed']} failed, {s['unchecked']} could not be checked")
    # 0 only when every check passed; 1 when one failed; 2 when none failed but some could not be checked
    return 0 if answer["ok"] else 1 if answer["summary"]["failed"] else 2


class _Steps(Stages):
    """A query's stages, under a line for the step (the receipt) being recomputed."""

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "step" and self.bar is not None:
            if self.current is not None:
                self.bar.update(self.current, total=1, completed=1)
            text = f"step {data['step']}/{data['of']}: recomputing receipt {data['receipt']}"
            self.current = self.bar.add_task(escape(text), total=None)
            return
        super().__call__(kind, data)


def _follow(client: NodeClient, body: dict[str, Any], show: bool) -> dict[str, Any]:
    """Start the verification job and follow its events to its report; Ctrl-C cancels the job (and its Spark
    job), as for `cairn query`."""
    return follow_job(client, "/api/v0/verify", body, _Steps(show), "report", "verification job {job}")


def _facts(f: dict[str, Any]) -> str:
    engine = ", ".join(f"{k} {v}" for k, v in f["engine"].items() if k != "name")
    return f"logical hash {f['logicalHash']}, {f['rows']} rows (engine {engine}; profile {f['profile']})"


def _recompute(args: argparse.Namespace, body: dict[str, Any]) -> int:
    answer = _follow(args.client(args), body, show=sys.stderr.isatty() and sys.stdout.isatty())
    if args.json:
        print(json.dumps(answer, indent=2))
    for step in [] if args.json else answer["executions"]:
        print(f"receipt {step['receipt']}: {step['status']}")
        if step["status"] == "reproduced":
            same = "the same" if step["same_execution"] else "another"
            print(f"  {_facts(step['recomputed'])}: {same} execution {step['recomputed']['execution']}")
            print(f"  verification receipt {step['verification']} (signed here, announced)")
        elif step["status"] == "diverged":
            print(f"  claimed    {_facts(step['claimed'])}, signed by {step['signer']}")
            print(f"  recomputed {_facts(step['recomputed'])}")
        else:
            print(f"  {step['reason']}")
    if not args.json:
        s = answer["summary"]
        print(f"{s['reproduced']} reproduced, {s['diverged']} diverged, {s['could not run']} could not run")
    # 0 when every step was reproduced; 1 when one diverged; 2 when none diverged but one could not run
    return 0 if answer["ok"] else 1 if answer["summary"]["diverged"] else 2


def add_provenance_commands(
    sub: Any, command: Callable[..., argparse.ArgumentParser], client: Callable[[argparse.Namespace], NodeClient]
) -> None:
    """`lineage` and `verify`; ``command`` makes a subcommand, ``client`` gives the node's client for the args."""
    sp = command(sub, "lineage", cmd_lineage, "where a result comes from: its executions back to the root datasets")
    sp.add_argument("ref", metavar="CID", help="a receipt, execution, slice or dataset block CID, or a dataset name")
    sp.add_argument("--format", choices=FORMATS, help="json, dot, mermaid or svg (default: a tree)")
    sp.set_defaults(client=client)
    sp = command(sub, "verify", cmd_verify, "check a result by recomputing it here, or (--offline) without computing")
    sp.add_argument(
        "cid",
        metavar="CID",
        help="a receipt, execution or output slice CID; or a proof FILE.car (checked here with --offline, no node)",
    )
    sp.add_argument("--offline", action="store_true", help="check receipts, signatures and data without computing")
    sp.add_argument("--recursive", action="store_true", help="also every execution upstream (via the lineage)")
    sp.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    sp.set_defaults(client=client)
    sp = command(sub, "export-proof", cmd_export_proof, "write a result's proof: one CAR anyone can check offline")
    sp.add_argument("cid", metavar="CID", help="a receipt, execution or output slice CID")
    sp.add_argument("-o", "--output", required=True, metavar="FILE.car", help="the proof file to write")
    sp.add_argument("--no-data", action="store_true", help="leave the slices out (their checks are then unchecked)")
    sp.set_defaults(client=client)
