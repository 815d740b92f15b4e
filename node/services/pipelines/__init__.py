"""Pipelines (docs/provenance.md "Pipelines"): a file of named SQL steps over datasets and over
earlier steps, run in dependency order, each step answered like any query, recorded as a ``pl_0`` and a signed
``pr_0`` run whose ``previous`` link makes the latest run's CID the whole history."""

from node.services.pipelines.run import PipelineRunner, QueryFn
from node.services.pipelines.spec import PipelineSpec, Step, parse_spec

__all__ = ["PipelineRunner", "PipelineSpec", "QueryFn", "Step", "parse_spec"]
