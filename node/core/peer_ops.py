"""``node.services.peers``: the peers this node knows and the signers it trusts (docs/peers.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.core.result_types import Announcements, ClaimSeen, Connected, PeerEntry, RefusedMessage, SignerScore, Trusted
from node.domain.ports.repositories import ClaimRepository, TrustRepository
from node.support.errors import CairnError, InvalidInput, PeersDisabled

if TYPE_CHECKING:
    from node.services.peers import Network


class PeerOps:
    def __init__(self, network: Network | None, trust: TrustRepository, claims: ClaimRepository) -> None:
        self._net = network  # None: peers.enabled = false
        self._trust, self._claims = trust, claims

    def _network(self) -> Network:
        if self._net is None:
            raise PeersDisabled("the p2p host is not running (peers.enabled = false)")
        return self._net

    def known(self) -> list[PeerEntry]:
        """The peers this node knows, connected or not, and where each came from."""
        return self._network().host.peers()

    async def connect(self, addr: str) -> Connected:
        """Connect to a peer and keep it, once it has shown it speaks Cairn's protocols
        (node.services.peers.network)."""
        return {"peer": await self._network().connect(addr)}

    def trust_add(self, key: str, community: str) -> None:
        from node.adapters.identity import public_key_from_did

        try:
            public_key_from_did(key)  # refuses anything but an ed25519 did:key
        except CairnError as e:  # its ConfigError (500) is about config files; here the key is user input
            raise InvalidInput(e.message) from None
        self._trust.trust_add(key, community)

    def trust_rm(self, key: str, community: str | None) -> int:
        return self._trust.trust_rm(key, community)

    def trust_list(self) -> list[Trusted]:
        return [{"key": k, "community": c} for k, c in self._trust.trusted()]

    def announcements(self, limit: int = 100) -> Announcements:
        """Peers' claims received, latest first, each with its signer's score; and the messages refused."""
        claims: list[ClaimSeen] = [
            {
                "invocation": c.invocation,
                "signer": c.signer,
                "peer": c.peer,
                "execution": c.execution,
                "receipt": c.receipt,
                "rows": c.rows,
                "logicalHash": c.logical_hash,
                "received": c.received,
                "status": c.status,
                "reason": c.reason,
                "signer_score": _score(*self._trust.signer_score(c.signer)),
            }
            for c in self._claims.claims(limit=limit)
        ]
        refused: list[RefusedMessage] = [
            {"peer": p, "reason": r, "received": t} for p, r, t in self._claims.refusals(limit)
        ]
        return {"claims": claims, "refused_messages": refused}


def _score(accepted: int, refused: int) -> SignerScore:
    return {"accepted": accepted, "refused": refused}
