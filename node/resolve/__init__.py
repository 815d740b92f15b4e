"""Resolving queries: local index → peers → compute on Spark → publish; single-flight; jobs."""

from node.resolve.jobs import Job, Jobs
from node.resolve.resolver import Answer, Resolver
from node.resolve.spark import SparkError, SparkWorker, SparkWorkerDied

__all__ = ["Answer", "Job", "Jobs", "Resolver", "SparkError", "SparkWorker", "SparkWorkerDied"]
