"""The one error tree: every error the node raises is a CairnError of node.support.errors, with an HTTP
status and a one-line message; the layers below the node (config, p2p, spark_worker) keep only the few exception
types listed here, each mapped where the node calls them."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import node.support.errors as errors
from config import SettingsError, load_settings
from node.support.errors import (
    CairnError,
    ConfigError,
    InvalidInput,
    PeerError,
    PeerTimeout,
    from_settings,
    one_line,
    peer_failure,
)
from p2p.errors import P2PBadInput, P2PError, P2PTimeout

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("node", "p2p", "config", "spark_worker")

# Exception types allowed outside node/support/errors.py, with why each is not a CairnError.
ALLOWED = {
    "config.settings.SettingsError": "config must not import node; node.support.errors.from_settings maps it at load",
    "p2p.errors.P2PError": "the libp2p adapter's error; node.support.errors.peer_failure maps it where node code "
    "calls p2p",
    "p2p.errors.P2PTimeout": "as P2PError (a TimeoutError: peer_failure makes it PeerTimeout)",
    "p2p.errors.P2PBadInput": "as P2PError (a ValueError: peer_failure makes it InvalidInput)",
    "node.faces.api.flight_rpc.Refused": "control flow in the Flight face: a gRPC status and its one line (a node "
    "error becomes one by its HTTP status, flight_rpc.refusal)",
    "p2p.errors.FrameRefused": "as P2PError: a peer's frame too long or over the budget; the stream is reset",
    "spark_worker.protocol.ProtocolError": "a malformed frame on the worker socket; the node makes it a SparkError",
    "spark_worker.guard.Refused": "control flow in the worker: sent to the node as kind 'refused' (SparkRefused)",
    "spark_worker.jobs.RequestError": "control flow in the worker: answered as an error frame of kind 'request'",
    "spark_worker.jobs.InputMismatch": "control flow in the worker: answered as an error frame of kind 'analysis'",
    "spark_worker.jobs.Cancelled": "control flow in the worker: answered as an error frame of kind 'cancelled'",
    "spark_worker.jobs.ClientGone": "a Cancelled: the node went away while result batches were sent; its job ends",
}

MULTI = "first line\n  second\tline\r\nthird"


def _tree() -> list[type[BaseException]]:
    return [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, BaseException) and c.__module__ == "node.support.errors"
    ]


def _build(cls: type[CairnError]) -> CairnError:
    """An instance built through the class's own constructor, every text argument spanning several lines."""
    kwargs: dict[str, Any] = {}
    for name, p in inspect.signature(cls).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or (p.default is not p.empty and name != "message"):
            continue
        ann = str(p.annotation)
        kwargs[name] = 2.5 if "float" in ann else 502 if ann == "int" else MULTI
    return cls(**kwargs)


def test_the_tree_has_every_class_the_brief_names() -> None:
    names = {c.__name__ for c in _tree()}
    for expected in [
        "KuboError",
        "KuboUnreachable",
        "KuboTimeout",
        "KuboRPCError",
        "KuboNotFound",
        "KuboCIDMismatch",
        "KuboTruncated",
        "KuboStartError",
        "InvalidCID",
        "InvalidDagJson",
        "InvalidObject",
        "UnknownKind",
        "EncodingError",
        "HashMismatch",
        "QueryRefused",
        "TooLarge",
        "ClaimRefused",
        "PullRefused",
        "RemoteError",
        "SchemaChangeRefused",
        "SliceCorrupt",
        "SparkError",
        "SparkRefused",
        "SparkWorkerDied",
        "SparkStartError",
        "SparkTimeout",
        "RenderError",
        "PeerError",
        "PeerTimeout",
        "ConfigError",
        "InvalidInput",
    ]:
        assert expected in names


@pytest.mark.parametrize("cls", _tree(), ids=lambda c: c.__name__)
def test_every_class_is_a_cairn_error_with_a_status_a_doc_and_one_line(cls: type[CairnError]) -> None:
    assert issubclass(cls, CairnError)
    assert 400 <= cls.status <= 599
    doc = cls.__dict__.get("__doc__") or ""
    assert doc.strip(), f"{cls.__name__} has no docstring saying when it is raised"
    e = _build(cls)
    assert 400 <= e.status <= 599
    assert e.message and e.message == str(e)
    assert len(e.message.splitlines()) == 1 and e.message == e.message.strip()
    if "message" in inspect.signature(cls).parameters:
        assert "first line second line third" in e.message  # folded, not cut: nothing of the text is lost


def test_node_errors_imports_nothing_of_cairn() -> None:
    tree = ast.parse((ROOT / "node" / "support" / "errors.py").read_text())
    imported = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert not {m for m in imported if m.split(".")[0] in PACKAGES}, imported


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        out.append(pkg)
        out += [m.name for m in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}.")]
    return sorted(m for m in out if not m.endswith("__main__"))


def test_no_other_module_defines_an_exception() -> None:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{attr}"] = obj
    strays = sorted(k for k in found if not k.startswith("node.support.errors.") and k not in ALLOWED)
    assert not strays, f"exception types outside node/support/errors.py: {strays}"
    assert set(ALLOWED) <= set(found), "ALLOWED names a class that no longer exists: drop it"


def test_no_exception_class_is_defined_inside_a_function() -> None:
    """The import scan above sees module-level classes only; a class in a function body is looked for here."""
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for fn in ast.walk(ast.parse(path.read_text())):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for c in ast.walk(fn):
                    if isinstance(c, ast.ClassDef):
                        bases = [ast.unparse(b) for b in c.bases]
                        assert not any(b.endswith(("Error", "Exception", "Refused")) for b in bases), (path, c.name)


def test_only_one_one_line_helper_exists() -> None:
    defs = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for n in ast.walk(ast.parse(path.read_text())):
                if isinstance(n, ast.FunctionDef) and n.name.lstrip("_") in ("one_line", "shorten"):
                    defs.append(f"{path.relative_to(ROOT)}:{n.name}")
    assert defs == ["node/support/errors.py:one_line"]


# -- one_line: a property test against plain str.split / str.splitlines ------------------------------------


@given(st.text(), st.one_of(st.none(), st.integers(min_value=2, max_value=200)), st.booleans())
def test_one_line_folds_and_cuts(text: str, limit: int | None, first: bool) -> None:
    source = next((ln for ln in text.splitlines() if ln.strip()), "") if first else text
    folded = " ".join(source.split())  # the oracle: Python's own whitespace split
    out = one_line(text, limit, first=first)
    assert len(out.splitlines()) <= 1
    if limit is None or len(folded) <= limit:
        assert out == folded
    else:
        assert len(out) <= limit and out.endswith("…")
        assert folded.startswith(out[:-1])


def test_one_line_of_an_exception_names_its_type() -> None:
    assert one_line(ValueError("bad\nvalue, trace follows")) == "ValueError: bad"
    assert one_line(TimeoutError()) == "TimeoutError"


# -- the mappings at the boundaries ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raised,cls,status",
    [
        (P2PError("cannot reach 12D3 at /ip4/1.2.3.4/tcp/1: refused"), PeerError, 502),
        (P2PTimeout("lookup to 12D3: no answer within 2 s"), PeerTimeout, 504),
        (P2PBadInput("bad multiaddr '/nope': unknown protocol"), InvalidInput, 400),
    ],
)
def test_p2p_errors_become_node_errors(raised: P2PError, cls: type[CairnError], status: int) -> None:
    mapped = peer_failure(raised)
    assert type(mapped) is cls and mapped.status == status and mapped.message == str(raised)


def test_settings_errors_become_node_errors(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as flag:
        load_settings(tmp_path, env={}, overrides={"api.port": 70000})
    assert type(from_settings(flag.value)) is InvalidInput  # the user's input: a 400, not a 500
    (tmp_path / "config.toml").write_text("[api]\nport = 70000\n")
    with pytest.raises(SettingsError) as own:
        load_settings(tmp_path, env={})
    mapped = from_settings(own.value)
    assert type(mapped) is ConfigError and str(tmp_path / "config.toml") in mapped.message
