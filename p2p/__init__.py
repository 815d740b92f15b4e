"""The libp2p host: announcements, lookup protocol, discovery. Arrives with issue 5."""
