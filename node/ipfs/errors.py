"""Errors of the IPFS layer: every failure talking to Kubo becomes one of these.

Messages stay on one line (the CLI prints ``error: <message>``), so Kubo's own text, which can
span lines, is folded.
"""

from __future__ import annotations

from node.errors import CairnError, NotFound


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class KuboError(CairnError):
    """Kubo failed us: unreachable, timed out, answered an error or something we refuse."""

    status = 502


class KuboUnreachable(KuboError):
    """Nothing answers at the API address (connection refused, unknown host)."""

    status = 503
    hint = (
        "is the Kubo daemon running? `cairn node start` runs a managed one; "
        "for an external Kubo check `ipfs.api` in the config"
    )

    def __init__(self, api_url: str, detail: str = "") -> None:
        self.api_url = api_url
        self.detail = one_line(detail)
        why = f" ({self.detail})" if self.detail else ""
        super().__init__(f"cannot reach Kubo at {api_url}{why}: {self.hint}")


class KuboTimeout(KuboError):
    """A call did not finish in time: Kubo's own ``timeout=`` fired, or our client gave up."""

    status = 504

    def __init__(self, path: str, timeout: float | None, detail: str = "") -> None:
        self.path = path
        self.timeout = timeout
        limit = f" within {timeout:g} s" if timeout is not None else ""
        tail = f" ({one_line(detail)})" if detail else ""
        super().__init__(f"Kubo {path} did not answer{limit}{tail}")


class KuboRPCError(KuboError):
    """Kubo answered an error: its ``{"Message", "Code", "Type"}`` JSON (or a plain-text 4xx)."""

    def __init__(self, path: str, message: str, code: int | None = None, http_status: int | None = None) -> None:
        self.path = path
        self.kubo_message = one_line(message)
        self.code = code
        self.http_status = http_status
        super().__init__(f"Kubo {path}: {self.kubo_message}")


class KuboNotFound(KuboRPCError, NotFound):
    """Kubo says the thing does not exist (block not local, name unresolved, not pinned, ...)."""

    status = 404


class KuboCIDMismatch(KuboError):
    """Kubo's CID (or the bytes it returned) disagree with what we computed locally."""

    def __init__(self, expected: object, got: object, *, message: str | None = None) -> None:
        self.expected = str(expected)
        self.got = str(got)
        super().__init__(one_line(message or f"Kubo returned CID {self.got}, expected {self.expected}"))


class KuboTruncated(KuboError):
    """A streamed answer (cat, dag export) ended early or malformed.

    Once Kubo has sent ``200 OK`` it reports a failure only in the ``X-Stream-Error`` HTTP trailer,
    which aiohttp drops; we notice from the byte count (cat) or the CAR check (dag export).
    """


class KuboStartError(KuboError):
    """The managed daemon could not be initialised or did not come up (the message carries its log tail)."""
