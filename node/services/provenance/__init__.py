"""Provenance of answers (docs/provenance.md): lineage walks (``lineage``), offline verification
(``verify``) and drawings of a lineage (``render``). Nothing is imported here: the CLI needs only ``render``, which
is pure, and should not pay for the rest at start-up."""
