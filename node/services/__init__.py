"""Services: the node's jobs (datasets, answering queries, peers, pipelines, provenance, type checks), over
the ports of ``node.domain.ports`` and the adapters."""
