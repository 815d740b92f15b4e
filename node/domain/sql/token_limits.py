"""Structural limits checked on the token list, before the parser runs (docs/queries.md "Limits").

sqlglot's parser and the rewrite are recursive and super-linear on some shapes: a 100 KB ``… OR id = 1 OR …``
chain took 43.8 s to be refused. Tokenizing is linear and cheap (about 0.2 s for
100 000 characters), so these counts refuse such statements before any tree is built. The limits sit well above
any hand-written query (TPC-H's largest has under 1 000 tokens) and below the sizes the parser handles slowly.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot.tokens import Token, TokenType

from node.support.errors import QueryRefused

#: Tokens one statement may have (a 12 000-item IN list, 24 000 tokens, takes 0.8 s to canonicalize).
MAX_SQL_TOKENS = 20_000
#: Open parentheses/brackets/CASEs at one point (the rewrite runs out of stack at about 55 parentheses).
MAX_NESTING = 48
#: AND/OR operators in the statement: each makes the expression tree one level deeper (1 000 exhaust the stack).
MAX_BOOLEAN_TERMS = 500
#: UNION/INTERSECT/EXCEPT operators: they chain the same way (1 500 UNION ALLs took 6.9 s, then ran out of stack).
MAX_SET_OPERATIONS = 200

_OPEN = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.CASE})
_CLOSE = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.END})
_BOOLEAN = frozenset({TokenType.AND, TokenType.OR})
_SET_OPERATIONS = frozenset({TokenType.UNION, TokenType.INTERSECT, TokenType.EXCEPT})


def check_tokens(tokens: Sequence[Token], sql: str) -> None:
    """Refuse (``too-complex``, naming the limit) a statement whose tokens exceed a structural limit."""
    depth = deepest = booleans = set_operations = 0
    for token in tokens:
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif kind in _CLOSE:
            depth = max(depth - 1, 0)  # unbalanced text is the parser's to report
        elif kind in _BOOLEAN:
            booleans += 1
        elif kind in _SET_OPERATIONS:
            set_operations += 1
    if booleans > MAX_BOOLEAN_TERMS:
        _refuse(f"more than {MAX_BOOLEAN_TERMS} AND/OR operators ({booleans}); use IN (…) for long lists", sql)
    if set_operations > MAX_SET_OPERATIONS:
        _refuse(f"more than {MAX_SET_OPERATIONS} UNION/INTERSECT/EXCEPT operators ({set_operations})", sql)
    if deepest > MAX_NESTING:
        _refuse(f"nested more than {MAX_NESTING} levels deep (parentheses, brackets, CASE)", sql)
    if len(tokens) > MAX_SQL_TOKENS:
        _refuse(f"more than {MAX_SQL_TOKENS} tokens ({len(tokens)})", sql)


def _refuse(why: str, sql: str) -> None:
    raise QueryRefused("too-complex", f"the statement has {why}", sql)
