"""The `cairn` command: parse arguments, call the node (over its HTTP API) or the model, render."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from config import SettingsError, default_home, load_settings
from node import __version__
from node.adapters.home import Home
from node.domain.model import cid_str, dagjson, decode_object, encode, parse_cid
from node.domain.model.cid import cid_for
from node.faces.cli.api_client import NodeClient
from node.support import values
from node.support.errors import CairnError, InvalidInput, RemoteError, from_settings, one_line


def _home(args: argparse.Namespace) -> Home:
    return Home(Path(args.home).expanduser() if args.home else default_home())


def _read_input(path: str | None) -> bytes:
    if path in (None, "-"):
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None


def _empty(message: str) -> None:
    """An empty list says so (on stderr: stdout stays empty for scripts that count lines)."""
    print(message, file=sys.stderr)


# -- commands -------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    home = _home(args)
    created = home.init()
    ident = home.identity()
    print(f"{'initialised' if created else 'already initialised'} {home.path}")
    print(f"peer id   {ident.peer_id}")
    print(f"node key  {ident.node_key}")
    return 0


def _node_settings(args: argparse.Namespace) -> Any:
    try:
        return load_settings(
            args.home,
            overrides={
                "api.host": args.api_host,
                "api.port": args.api_port,
                "ipfs.api": args.ipfs_api,
                "ipfs.binary": args.ipfs_binary,
                "log.level": args.log_level,
                "log.format": args.log_format,
            },
        )
    except SettingsError as e:
        raise from_settings(e) from None


def cmd_node_start(args: argparse.Namespace) -> int:
    from node.faces.daemon import serve
    from node.support import logs

    settings = _node_settings(args)
    if args.detach:
        from node.faces.cli.lifecycle import start_detached

        return start_detached(settings.home, _start_argv(args))
    logs.setup(settings.log.level, settings.log.format)
    asyncio.run(serve(settings))
    return 0


def _start_argv(args: argparse.Namespace) -> list[str]:
    """`cairn node start` as this command was given, without --detach (what the detached process runs)."""
    argv = ["node", "start"]
    for flag in ("api_host", "api_port", "ipfs_api", "ipfs_binary", "log_level", "log_format"):
        value = getattr(args, flag)
        if value is not None:
            argv += ["--" + flag.replace("_", "-"), str(value)]
    return argv


def cmd_node_stop(args: argparse.Namespace) -> int:
    from node.faces.cli.lifecycle import stop

    return stop(_home(args), args.timeout)


def cmd_status(args: argparse.Namespace) -> int:
    home = _home(args)
    try:
        info = NodeClient.for_home(home).get_json("/api/v0/node")
    except CairnError as e:
        if args.json:
            print(json.dumps({"running": False, "home": str(home.path), "error": e.message}))
        else:
            print(f"not running ({e.message})")
        return 1
    info["running"] = True
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    kubo = info["kubo"]
    print(f"running    {info['api']}")
    if info.get("flight"):
        print(f"flight sql {info['flight']}  (ADBC, JDBC: docs/flight-sql.md)")
    print(f"peer id    {info['peer_id']}")
    print(f"node key   {info['node_key']}")
    # The address to share comes first and says so; Kubo's swarm is labelled as Kubo's, so that
    # no one shares it for `cairn connect` (a Kubo address is no Cairn node).
    for addr in info.get("p2p_addrs", []):
        print(f"connect    {addr}  (share this: other nodes run `cairn connect` with it)")
    if not info.get("p2p_addrs"):
        print("connect    - (peers.enabled = false: no p2p host)")
    print(
        f"kubo       {kubo.get('version', '?')} {kubo.get('state')} at {kubo.get('api')}"
        f" ({'managed' if kubo.get('managed') else 'external'})"
    )
    for addr in kubo.get("swarm", []):
        print(f"  swarm    {addr}  (Kubo's, for IPFS peers: not for `cairn connect`)")
    return 0


def cmd_dag_put(args: argparse.Namespace) -> int:
    body = _read_input(args.file)
    dagjson.loads(body)  # refuse bad input before reaching for the node
    client = NodeClient.for_home(_home(args))
    print(client.post_json("/api/v0/dag" + ("" if args.pin else "?pin=false"), body)["cid"])
    return 0


def cmd_dag_get(args: argparse.Namespace) -> int:
    cid = parse_cid(args.cid)
    _, body = NodeClient.for_home(_home(args)).request("GET", f"/api/v0/dag/{cid_str(cid)}")
    sys.stdout.write(body.decode() + "\n")
    return 0


def cmd_cid(args: argparse.Namespace) -> int:
    """What `dag put` would store, computed locally: no node, no Kubo."""
    obj = dagjson.loads(_read_input(args.file))
    decode_object(obj)
    print(cid_str(cid_for(encode(obj), "dag-cbor")))
    return 0


_HOLIUM_FORMATS = {".json": "json", ".csv": "csv", ".cbor": "cbor", ".bin": "bin"}


def cmd_holium_import(args: argparse.Namespace) -> int:
    fmt = args.format or _HOLIUM_FORMATS.get(Path(args.file).suffix.lower())
    if fmt is None:
        raise InvalidInput(f"cannot tell the format of {args.file}: name it with --format json|csv|cbor|bin")
    body = _read_input(args.file)
    client = NodeClient.for_home(_home(args))
    out = client.post_json(f"/api/v0/holium/import?format={fmt}", body, "application/octet-stream")
    print(out["cid"])
    return 0


def _add_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The ingest's query parameters from `cairn add`'s options (the file's own are added by cmd_add)."""
    params: list[tuple[str, str]] = [("name", args.name)] if args.name else [("to", args.to)]
    for key in (
        "format",
        "compression",
        "delimiter",
        "encoding",
        "event_time",
        "merge",
        "title",
        "description",
        "license",
    ):
        value = getattr(args, key)
        if value:
            params.append((key, value))
    if args.no_header:
        params.append(("header", "false"))
    if args.columns:
        params.append(("columns", args.columns))
    if args.primary_key:
        params.append(("primary_key", args.primary_key))
    params += [("type", t) for t in args.type or []]
    params += [("keyword", k) for k in args.keyword or []]
    return params


def _stream_ingest(
    client: NodeClient, query: str, source: Any, length: int | None, quiet: bool, in_place: int | None = None
) -> dict[str, Any]:
    """POST the source and follow the node's progress lines to its result (or its error). ``in_place``: the size
    of the file the node reads itself (nothing is sent; the ingest bar's total)."""
    from node.faces.cli.progress import upload_progress

    shown = length if in_place is None else in_place
    with upload_progress(source, shown, quiet=quiet, upload=in_place is None) as (body, on_progress):
        with client.open("POST", f"/api/v0/datasets?{query}", body, "application/octet-stream", length) as resp:
            out = None
            for line in resp:
                msg = json.loads(line)
                if "result" in msg:
                    out = msg["result"]
                elif "error" in msg:
                    raise RemoteError(msg["error"]["message"], msg["error"].get("status", 500))
                else:
                    on_progress(msg["bytes"], msg["rows"])
    if out is None:
        raise RemoteError("the node closed the connection before the ingest finished", 502)
    return out


def _add_in_place(client: NodeClient, params: list[tuple[str, str]], path: Path, args: Any) -> dict[str, Any] | None:
    """Our own node on this machine reads the file in place (``path=``): no copy through HTTP and its disk. None
    when it may not (403: the file is not under its ``api.ingest_dirs``): then the file is uploaded."""
    if not client.is_local():
        return None
    query = urllib.parse.urlencode([*params, ("path", str(path.resolve())), ("progress", "true")])
    try:
        return _stream_ingest(client, query, io.BytesIO(b""), 0, args.json, in_place=path.stat().st_size)
    except RemoteError as e:
        if e.status == 403:  # PathRefused (docs/api.md "Ingesting a local file")
            return None
        raise


def cmd_add(args: argparse.Namespace) -> int:
    params = _add_params(args)
    client = NodeClient.for_home(_home(args))
    if args.file == "-":
        source, length = sys.stdin.buffer, None
    else:
        path = Path(args.file)
        if not path.is_file():
            raise InvalidInput(f"cannot read {args.file}: no such file")
        params.append(("filename", path.name))
        source, length = path.open("rb"), path.stat().st_size
    out = _add_in_place(client, params, path, args) if args.file != "-" and not args.upload else None
    if out is None:
        query = urllib.parse.urlencode([*params, ("progress", "true")])
        try:
            out = _stream_ingest(client, query, source, length, args.json)
        except RemoteError as e:
            if e.status != 413 or args.file == "-" or not client.is_local():
                raise
            hint = "; or let the node read it in place: add its directory to api.ingest_dirs"
            raise RemoteError(e.message + hint, e.status) from None
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    verb = "created" if args.name else "appended to"
    print(
        f"{verb} {out['name']}: {out['rows_added']} rows added of {out['rows_read']} read, "
        f"{len(out['slices'])} slices, {out['elapsed_ms'] / 1000:.2f} s"
    )
    print(f"head  {out['head']}")
    print(f"id    {out['id']}")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    rows = NodeClient.for_home(_home(args)).get_json("/api/v0/datasets")["datasets"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        _empty("no datasets yet: add one with `cairn add FILE --name NAME`")
    for r in rows:
        print(f"{r['name']:<24} {r['rows']:>12} rows  {r['head']}  {'' if r['owned'] else '(pulled)'}".rstrip())
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    ref = urllib.parse.quote(args.ref, safe="")
    blocks = NodeClient.for_home(_home(args)).get_json(f"/api/v0/datasets/{ref}/log")["blocks"]
    if args.json:
        print(json.dumps(blocks, indent=2))
        return 0
    for b in blocks:
        ev = dict(b["event"])
        kind = ev.pop("kind")
        if kind == "AddData":
            detail = (
                f"rows {ev['offsets'][0]}..{ev['offsets'][1]} in {len(ev['slices'])} slices, "
                f"merge {ev['merge']['strategy']}, logical hash {ev['logicalHash']}"
            )
        elif kind == "SetDataSchema":
            detail = f"structure {ev['structure']}"
        else:
            detail = json.dumps(ev, ensure_ascii=False)
        print(f"{b['seq']:>4}  {b['cid']}  {b['time']}  {kind:<14} {detail}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    fmt = args.format or {".csv": "csv", ".parquet": "parquet", ".jsonl": "jsonl"}.get(
        Path(args.output).suffix if args.output else "", "jsonl"
    )
    ref = urllib.parse.quote(args.ref, safe="")
    query = urllib.parse.urlencode([("format", fmt)] + ([("limit", str(args.limit))] if args.limit is not None else []))
    version = _download(NodeClient.for_home(_home(args)), f"/api/v0/datasets/{ref}/data?{query}", args.output or "-")
    if args.output not in (None, "-"):
        print(f"wrote {args.output} ({fmt}) from version {version}", file=sys.stderr)
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    body = json.dumps({"source": args.source, "name": args.name}).encode()
    out = NodeClient.for_home(_home(args)).post_json("/api/v0/pull", body)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"pulled {out['name']}: {out['blocks']} blocks, {out['slices']} slices verified ({out['bytes']} bytes fetched)"
    )
    print(f"head  {out['head']}")
    return 0


# How `cairn query` shows an answer's trust label (docs/peers.md "Trust labels").
TRUST_SHOWN = {
    "computed": "computed here",
    "trusted-signer": "trusted signer (not recomputed)",
    "recomputed-agreed": "verified (recomputed here, agrees)",
    "unverified": "UNVERIFIED",
}


def cmd_query(args: argparse.Namespace) -> int:
    inputs: dict[str, str] = {}
    for spec in args.input or []:
        alias, sep, ref = spec.partition("=")
        if not sep or not alias or not ref:
            raise InvalidInput(f"--input {spec!r} must look like NAME=DATASET")
        inputs[alias] = ref
    # --format or -o: the whole result as a file; without -o (or with -o -) it goes to stdout.
    whole = args.output is not None or args.format is not None
    to_stdout = whole and args.output in (None, "-")
    fmt = args.format or {".csv": "csv", ".parquet": "parquet", ".jsonl": "jsonl"}.get(
        Path(args.output).suffix if whole and not to_stdout else "", "csv"
    )
    if to_stdout and args.json:
        raise InvalidInput("--json and the result both go to stdout: write the result with -o FILE")
    if to_stdout and fmt == "parquet" and sys.stdout.isatty():
        raise InvalidInput("Parquet is binary: not written to a terminal; use -o FILE or redirect stdout")
    body = {"sql": args.sql, "inputs": inputs, "limit": 0 if whole else args.limit, "trust": args.trust}
    if args.retry:  # a recorded failure is computed again (docs/queries.md "Recorded failures")
        body["retry"] = True
    if args.type is not None:  # the type the result must be a term of (docs/provenance.md "Types")
        body["type"] = cid_str(parse_cid(args.type))
    client = NodeClient.for_home(_home(args))
    from node.faces.cli.progress import follow_query

    # Live stages on a terminal only: piped, nothing is printed but the answer.
    out = follow_query(client, body, show=sys.stderr.isatty() and sys.stdout.isatty())
    if whole:  # the whole result, straight from its slices, under the names this query gives its columns
        params = urllib.parse.urlencode([("format", fmt)] + [("name", n) for n in out["columns"]])
        _download(client, f"/api/v0/executions/{out['execution']}/data?{params}", "-" if to_stdout else args.output)
    if args.json:
        print(values.dumps(out, indent=2))
        return 0
    if not whole:
        _print_table(out["columns"], out["rows"])
        if out["truncated"]:
            print(f"… {out['row_count'] - len(out['rows'])} more rows (use --format csv or -o FILE for all)")
    print(f"{out['row_count']} rows, {out['source']} in {out['elapsed_ms']:.1f} ms", file=sys.stderr)
    label = TRUST_SHOWN.get(out.get("trust", ""), out.get("trust", ""))
    if out.get("peer"):
        p = out["peer"]
        print(f"from peer   {p['peer']} signed by {p['signer']}, trust mode {p['mode']}: {label}", file=sys.stderr)
    else:
        print(f"trust       {label}", file=sys.stderr)
    for hint in out.get("hints", []):  # e.g. a peer had it, signed by a key not trusted here
        print(f"hint        {hint}", file=sys.stderr)
    print(f"query       {out['query']}", file=sys.stderr)
    print(f"invocation  {out['invocation']}", file=sys.stderr)
    print(f"execution   {out['execution']}", file=sys.stderr)
    return 0


def _print_table(columns: list[str], rows: list[list[Any]]) -> None:
    """The answer's rows (already JSON-safe, node.support.values) as a terminal table: text as is, the rest as JSON."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(*(escape(c) for c in columns), show_edge=False)
    for r in rows:
        table.add_row(*("∅" if v is None else escape(values.cell_text(v) or "") for v in r))
    Console().print(table)


def _download(client: NodeClient, path: str, output: str) -> str | None:
    """Stream a GET to a file (or stdout for -); returns the version header if the node sent one."""
    with client.open("GET", path) as resp:
        if output == "-":
            while chunk := resp.read(1 << 20):
                sys.stdout.buffer.write(chunk)
        else:
            tmp = Path(output + ".part")
            with open(tmp, "wb") as f:
                while chunk := resp.read(1 << 20):
                    f.write(chunk)
            tmp.replace(output)  # a failed download never leaves a truncated file under the name
        return resp.headers.get("X-Cairn-Version")


def cmd_peers(args: argparse.Namespace) -> int:
    peers = NodeClient.for_home(_home(args)).get_json("/api/v0/peers")["peers"]
    if args.json:
        print(json.dumps(peers, indent=2))
        return 0
    if not peers:
        _empty("no peers: connect one with `cairn connect MULTIADDR` (its `cairn status --json` p2p_addrs)")
    for p in peers:
        state = "connected" if p.get("connected") else "known"
        print(f"{p.get('peer_id', p.get('id'))}  {state}  {' '.join(p.get('addrs', [])[:2])}")
    return 0


def cmd_connect(args: argparse.Namespace) -> int:
    out = NodeClient.for_home(_home(args)).post_json("/api/v0/peers/connect", json.dumps({"addr": args.addr}).encode())
    print(f"connected to {out['peer']}")
    return 0


def cmd_trust(args: argparse.Namespace) -> int:
    client = NodeClient.for_home(_home(args))
    if args.action == "ls":
        trusted = client.get_json("/api/v0/trust")["trusted"]
        if not trusted:
            _empty("no trusted keys: add one with `cairn trust add KEY` (a node_key from `cairn status --json`)")
        for t in trusted:
            print(f"{t['community']:<16} {t['key']}")
        return 0
    if not args.key:
        raise InvalidInput(f"cairn trust {args.action} needs a KEY (a node_key from `cairn status --json`)")
    body = json.dumps({"key": args.key, "community": args.community}).encode()
    if args.action == "add":
        client.post_json("/api/v0/trust", body)
        print(f"trusted {args.key} in {args.community or 'default'}")
    else:
        client.request("DELETE", "/api/v0/trust", body)
        print(f"no longer trusted: {args.key}")
    return 0


def cmd_announcements(args: argparse.Namespace) -> int:
    out = NodeClient.for_home(_home(args)).get_json("/api/v0/announcements")
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if not out["claims"] and not out["refused_messages"]:
        _empty("no announcements received from peers yet")
    for c in out["claims"]:
        print(
            f"{c['status']:<9} {c['invocation']}  from {c['peer']}  signer {c['signer']}"
            + (f"  ({c['reason']})" if c["reason"] else "")
        )
    for r in out["refused_messages"]:
        print(f"refused   message from {r['peer']}: {r['reason']}")
    return 0


# -- parser ---------------------------------------------------------------------------------

# -- Transform.Storage types (docs/provenance.md "Types") ---------------------------------------------------


def _print_verdict(answer: dict[str, Any], as_json: bool) -> int:
    """true, or false and the spec's code; exit 0 for true, 1 for false."""
    if as_json:
        print(json.dumps(answer, indent=2))
    else:
        print("true" if answer["result"] else f"false: {answer['code']}")
    return 0 if answer["result"] else 1


def cmd_type_check(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({"ref": args.ref, "type": cid_str(parse_cid(args.type))})
    return _print_verdict(NodeClient.for_home(_home(args)).get_json(f"/api/v0/types/check?{query}"), args.json)


def cmd_type_asset(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({"cid": cid_str(parse_cid(args.cid))})
    return _print_verdict(NodeClient.for_home(_home(args)).get_json(f"/api/v0/types/asset?{query}"), args.json)


def cmd_type_put(args: argparse.Namespace) -> int:
    body = _read_input(args.file)
    dagjson.loads(body)  # refuse bad input before reaching for the node
    out = NodeClient.for_home(_home(args)).post_json("/api/v0/types", body)
    print(json.dumps(out) if args.json else out["cid"])
    return 0


Subparsers = Any  # argparse's _SubParsersAction is private


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag or flag value is ``error: <one line>`` like every other user error (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message)} (see `{self.prog} --help`)\n")


_HOME_HELP = "node data directory (default: $CAIRN_HOME or ~/.cairn)"


def _global_options() -> argparse.ArgumentParser:
    """Options every command takes, before or after the subcommand (`cairn status --home H`). SUPPRESS: a
    subcommand that is not given one leaves the value given before it (argparse copies its defaults over)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--home", default=argparse.SUPPRESS, help=_HOME_HELP)
    return p


_GLOBAL = _global_options()


def _trust_mode(mode: str) -> str:
    """A trust mode as --trust takes it: one of the four, or quorum:K[:communities] (docs/peers.md "Quorum")."""
    if mode in ("self", "community", "verify", "any") or re.fullmatch(r"quorum:[0-9]+(:communities)?", mode):
        return mode
    raise argparse.ArgumentTypeError(f"{mode!r}: use self, community, verify, any or quorum:K[:communities]")


def _command(
    parent: Subparsers, name: str, fn: Callable[[argparse.Namespace], int], help: str
) -> argparse.ArgumentParser:
    sp: argparse.ArgumentParser = parent.add_parser(name, help=help, description=help, parents=[_GLOBAL])
    sp.set_defaults(func=fn)
    return sp


def _group(sub: Subparsers, name: str, help: str) -> Subparsers:
    """A command with subcommands (`cairn node start`)."""
    parser = sub.add_parser(name, help=help, parents=[_GLOBAL])
    return parser.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")


def _add_node_commands(sub: Subparsers) -> None:
    _command(sub, "init", cmd_init, "create the data directory, config, node key and API token")
    node = _group(sub, "node", "run the node daemon")
    sp = _command(node, "start", cmd_node_start, "run the node (Ctrl-C stops it), or in the background (--detach)")
    sp.add_argument(
        "--detach", action="store_true", help="run in the background: log to $CAIRN_HOME/logs/node.log, PID in node.pid"
    )
    sp.add_argument("--api-host", help="HTTP API bind address (api.host)")
    sp.add_argument("--api-port", type=int, help="HTTP API port, 0 = free port (api.port)")
    sp.add_argument("--ipfs-api", help="use this external Kubo RPC API instead of a managed one (ipfs.api)")
    sp.add_argument("--ipfs-binary", help="Kubo binary for the managed Kubo (ipfs.binary)")
    sp.add_argument("--log-level", help="debug, info, warning, error (log.level)")
    sp.add_argument("--log-format", choices=("text", "json"), help="text, or one JSON object a line (log.format)")
    sp = _command(node, "stop", cmd_node_stop, "stop the node of this home (by its PID file) and wait for it to end")
    sp.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds for running queries to finish before they are cancelled (default 60)",
    )
    sp = _command(sub, "status", cmd_status, "say whether the node of this home is running")
    sp.add_argument("--json", action="store_true", help="print one JSON object")


def _add_object_commands(sub: Subparsers) -> None:
    dag = _group(sub, "dag", "store and read IPLD objects")
    sp = _command(dag, "put", cmd_dag_put, "store a DAG-JSON object as DAG-CBOR in Kubo, pin it, print its CID")
    sp.add_argument("file", nargs="?", help="DAG-JSON file (default: stdin)")
    sp.add_argument("--no-pin", dest="pin", action="store_false", help="store without pinning")
    sp = _command(dag, "get", cmd_dag_get, "print an object as DAG-JSON")
    sp.add_argument("cid")
    sp = _command(sub, "cid", cmd_cid, "print the CID `dag put` would give, computed locally (no node needed)")
    sp.add_argument("file", nargs="?", help="DAG-JSON file (default: stdin)")
    holium = _group(sub, "holium", "Holium data trees")
    sp = _command(
        holium, "import", cmd_holium_import, "import JSON, CSV or CBOR as a Holium data tree; print the root CID"
    )
    sp.add_argument("file")
    sp.add_argument("--format", choices=["json", "csv", "cbor", "bin"], help="default: from the file extension")


def _add_add_command(sub: Subparsers) -> None:
    sp = _command(sub, "add", cmd_add, "ingest CSV/TSV, JSON Lines or Parquet (gzip/zstd too) as a dataset version")
    sp.add_argument("file", help="the file, or - for stdin")
    target = sp.add_mutually_exclusive_group(required=True)
    target.add_argument("--name", help="create a dataset with this name")
    target.add_argument("--to", help="append to this dataset")
    sp.add_argument(
        "--format", choices=["csv", "tsv", "jsonl", "parquet"], help="default: from the file name or its bytes"
    )
    sp.add_argument("--compression", choices=["gzip", "zstd", "none"], help="default: from the file name or its bytes")
    sp.add_argument(
        "--delimiter", help="CSV field delimiter, or tab (default: tab for tsv; for csv sniffed among , ; tab |)"
    )
    sp.add_argument(
        "--encoding",
        help="text encoding of CSV/JSON Lines, e.g. latin-1, cp1252, utf-16"
        " (default UTF-8, or UTF-16/32 by byte order mark)",
    )
    sp.add_argument("--no-header", action="store_true", help="the CSV has no header row")
    sp.add_argument("--columns", help="column names, comma-separated (with --no-header)")
    sp.add_argument("--type", action="append", metavar="COL=TYPE", help="override a column's type (repeatable)")
    sp.add_argument("--event-time", help="the column that holds each row's event time")
    sp.add_argument("--merge", choices=["append", "ledger", "snapshot"], help="merge strategy (default append)")
    sp.add_argument("--primary-key", metavar="COL[,COL…]", help="key columns for ledger and snapshot")
    sp.add_argument("--title")
    sp.add_argument("--description")
    sp.add_argument("--license")
    sp.add_argument("--keyword", action="append")
    sp.add_argument("--upload", action="store_true", help="send the file over HTTP even to a node on this machine")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_read_commands(sub: Subparsers) -> None:
    sp = _command(sub, "ls", cmd_ls, "list the datasets of this node")
    sp.add_argument("--json", action="store_true")
    sp = _command(sub, "log", cmd_log, "a dataset's metadata chain, newest block first")
    sp.add_argument("ref", help="a name, a dataset id (did:key) or a block CID")
    sp.add_argument("--json", action="store_true")
    sp = _command(sub, "get", cmd_get, "write a dataset version's rows to a file")
    sp.add_argument("ref", help="a name, a dataset id, or a block CID (a frozen version)")
    sp.add_argument("-o", "--output", help="output file (default: stdout)")
    sp.add_argument("--format", choices=["csv", "parquet", "jsonl"], help="default: from the -o extension, else jsonl")
    sp.add_argument("--limit", type=int, help="at most this many rows")


def _add_query_command(sub: Subparsers) -> None:
    help = "answer a SQL query over datasets: from the index, or computed on Spark and published"
    sp = _command(sub, "query", cmd_query, help)
    sp.add_argument("sql")
    sp.add_argument(
        "--input",
        "-i",
        action="append",
        metavar="NAME=DATASET",
        help="a table the SQL reads (repeatable); a table named like a dataset needs none. DATASET: a name, id or "
        "block CID, then @BLOCKCID or @-N for an earlier version, /changelog for a snapshot dataset's raw changelog",
    )
    sp.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")
    sp.add_argument("-o", "--output", help="write the whole result to this file (- for stdout)")
    sp.add_argument(
        "--format",
        choices=["csv", "parquet", "jsonl"],
        help="write the whole result in this format, to -o or else stdout (default: from -o's extension, else csv)",
    )
    sp.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    sp.add_argument(
        "--trust",
        type=_trust_mode,
        metavar="{self,community,verify,any,quorum:K[:communities]}",
        help="how to use peers' results (default: peers.trust)",
    )
    sp.add_argument("--type", metavar="TYPE_CID", help="the result must be a term of this Transform.Storage type")
    sp.add_argument(
        "--retry", action="store_true", help="compute again a query whose failure is recorded (here or by a peer)"
    )


def _add_peer_commands(sub: Subparsers) -> None:
    sp = _command(sub, "peers", cmd_peers, "the p2p peers this node knows")
    sp.add_argument("--json", action="store_true")
    sp = _command(
        sub, "connect", cmd_connect, "connect to a peer (an address from its `cairn status --json` p2p_addrs)"
    )
    sp.add_argument("addr", metavar="MULTIADDR")
    sp = _command(sub, "trust", cmd_trust, "manage the keys whose results this node uses (community trust)")
    sp.add_argument("action", choices=["add", "rm", "ls"])
    sp.add_argument("key", nargs="?", help="a node_key (did:key:z6Mk…)")
    sp.add_argument("--community", help="the trusted set (default: default)")
    sp = _command(sub, "announcements", cmd_announcements, "recent claims from peers, with accept/refuse reasons")
    sp.add_argument("--json", action="store_true")
    sp = _command(
        sub,
        "pull",
        cmd_pull,
        "copy a dataset from another node (its /odf/NAME URL) or by block CID over IPFS, verifying everything",
    )
    sp.add_argument("source", help="http://HOST:PORT/odf/NAME, or a head block CID")
    sp.add_argument("--name", help="local name (default: the remote name)")
    sp.add_argument("--json", action="store_true")


def _add_type_commands(sub: Subparsers) -> None:
    types = _group(sub, "type", "Transform.Storage types, assets and functions")
    sp = _command(types, "check", cmd_type_check, "is the data REF names a term of the type? (exit 0 yes, 1 no)")
    sp.add_argument("ref", help="a dataset name, a dataset id (did:key) or a block CID")
    sp.add_argument("type", metavar="TYPE_CID", help="the CID of a Type (or of a series of types)")
    sp.add_argument("--json", action="store_true", help="print the answer as JSON")
    sp = _command(types, "asset", cmd_type_asset, "is the asset valid: is its payload a term of its template?")
    sp.add_argument("cid", metavar="ASSET_CID")
    sp.add_argument("--json", action="store_true", help="print the answer as JSON")
    sp = _command(types, "put", cmd_type_put, "check and store a Type, Asset or Function (DAG-JSON); print its CID")
    sp.add_argument("file", nargs="?", help="DAG-JSON file (default: stdin)")
    sp.add_argument("--json", action="store_true", help="print the CID and the kind as JSON")


def _add_provenance_commands(sub: Subparsers) -> None:
    from node.faces.cli.provenance import add_provenance_commands  # lineage, verify (docs/provenance.md)

    add_provenance_commands(sub, _command, lambda args: NodeClient.for_home(_home(args)))


def _add_pipeline_commands(sub: Subparsers) -> None:
    from node.faces.cli.pipelines import add_pipeline_commands  # pipeline run, pipeline log (docs/provenance.md)

    add_pipeline_commands(sub, _group, _command, lambda args: NodeClient.for_home(_home(args)))


# The subcommands, in the order `cairn --help` lists them.
_COMMAND_GROUPS: tuple[Callable[[Subparsers], None], ...] = (
    _add_node_commands,
    _add_object_commands,
    _add_add_command,
    _add_read_commands,
    _add_query_command,
    _add_peer_commands,
    _add_type_commands,
    _add_provenance_commands,
    _add_pipeline_commands,
)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cairn", description="A peer-to-peer node for content-addressed data, queries and results.")
    p.add_argument("--version", action="version", version=f"cairn {__version__}")
    p.add_argument("--home", help=_HOME_HELP)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_commands in _COMMAND_GROUPS:
        add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CairnError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
