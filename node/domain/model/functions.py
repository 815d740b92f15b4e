"""The built-in functions of Transform.Storage (transform-storage-provenance.md §3.4, Table 4) and their types.

A built-in is a :class:`~node.domain.model.types.Function` whose ``execution`` names it and whose ``fn`` parameterises
it (null, a type CID for ``introduce``, a pipeline CID for ``pipeline``). :func:`builtin_output` gives the output
type a built-in has for an input type, on normal forms (node.domain.model.typecheck.normalize_type): a simple type is a
series of height 1, the null type is IPLD null (or ``false``, the pseudocode's name for it), and a series answer
is a list. An input the built-in is not defined on raises ``InvalidInput`` saying what it needs.

| execution | fn | in → out (Table 4) |
|---|---|---|
| identity | null | A → A |
| introduce | CID of a type X | null → X |
| ignore | null | A → null |
| down | null | D ⊗ null^(n+1) → null^(n+1) ⊗ D (height n+2) |
| up | null | null^(n+1) ⊗ E → E ⊗ null^(n+1) (height n+2) |
| duplicate down | null | F ⊗ null → F ⊗ F |
| duplicate up | null | null ⊗ G → G ⊗ G |
| braid | null | H ⊗ I → I ⊗ H |
| pipeline | CID of a pipeline | L → M: the pipeline's declared ``out`` (a reference; not derived here) |

WASM and IPDR (externally defined functions) are ``Function`` objects too, but their output type is whatever
they declare: running them is not this module's business.
"""

from __future__ import annotations

from typing import Any

from multiformats import CID

from node.domain.model.types import Function
from node.support.errors import InvalidInput

BUILTINS = ("identity", "introduce", "ignore", "down", "up", "duplicate down", "duplicate up", "braid", "pipeline")
_FN_IS_A_CID = ("introduce", "pipeline")
_UNSET: Any = object()  # ``out`` not given (None is the null type)  # Table 4: the only built-ins whose fn is not null


def _null(t: Any) -> bool:
    return t is None or t is False


def _series(t: Any) -> list[Any]:
    """A normal form as a series: a simple type is a series of height 1."""
    return list(t) if isinstance(t, list) else [t]


def _fail(execution: str, needs: str, got: list[Any]) -> InvalidInput:
    return InvalidInput(f"built-in {execution!r} takes {needs}; the input has height {len(got)}")


def _shift(execution: str, s: list[Any], first: bool) -> list[Any]:
    """down (``first``: the moving wire is the first) and up: it crosses n+1 null wires."""
    moving, rest = (s[0], s[1:]) if first else (s[-1], s[:-1])
    if len(s) < 2 or not all(_null(x) for x in rest):
        side = "D ⊗ null ⊗ … ⊗ null" if first else "null ⊗ … ⊗ null ⊗ E"
        raise _fail(execution, f"{side} (height ≥ 2)", s)
    return [*rest, moving] if first else [moving, *rest]


def _pair(execution: str, s: list[Any]) -> list[Any]:
    """duplicate down/up and braid: height exactly 2."""
    if len(s) != 2:
        raise _fail(execution, "a series of height 2", s)
    a, b = s
    if execution == "braid":
        return [b, a]
    if execution == "duplicate down":
        if not _null(b):
            raise _fail(execution, "F ⊗ null", s)
        return [a, a]
    if not _null(a):  # duplicate up
        raise _fail(execution, "null ⊗ G", s)
    return [b, b]


def builtin_output(execution: str, in_type: Any, fn: Any = None) -> Any:
    """The output type of the built-in ``execution`` for the input type ``in_type`` (a normal form)."""
    s = _series(in_type)
    if execution == "identity":
        return in_type
    if execution == "ignore":
        return None
    if execution == "introduce":
        if not all(_null(x) for x in s):
            raise _fail(execution, "the null type", s)
        if not isinstance(fn, CID):
            raise InvalidInput("built-in 'introduce' needs fn: the CID of the type it introduces")
        return fn
    if execution in ("down", "up"):
        return _shift(execution, s, first=execution == "down")
    if execution in ("duplicate down", "duplicate up", "braid"):
        return _pair(execution, s)
    if execution == "pipeline":
        raise InvalidInput("a pipeline's output type is the out its Function declares, not derived from its input")
    raise InvalidInput(f"{execution[:40]!r} is not a built-in function (built-ins: {', '.join(BUILTINS)})")


def builtin(execution: str, in_type: Any, *, fn: Any = None, out: Any = _UNSET, **common: Any) -> Function:
    """The Function object of a built-in over ``in_type``; its ``out`` is derived (a pipeline's is declared: ``out``;
    for another built-in an ``out`` given must be the derived one). ``common``: creator, name, description, …"""
    if execution in _FN_IS_A_CID and not isinstance(fn, CID):
        raise InvalidInput(f"built-in {execution!r} needs fn: a CID (Table 4)")
    if execution not in _FN_IS_A_CID and fn is not None:
        raise InvalidInput(f"built-in {execution!r} takes fn null (Table 4)")
    if execution == "pipeline":
        if out is _UNSET:
            raise InvalidInput("a pipeline Function declares its out type")
    else:
        derived = builtin_output(execution, in_type, fn)
        if out is not _UNSET and out != derived:
            raise InvalidInput(f"built-in {execution!r}: out is not the type its in gives (Table 4)")
        out = derived
    return Function(execution=execution, fn=fn, input=in_type, output=out, **common)
