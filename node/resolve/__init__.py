"""Resolving queries: local index → peers → compute on Spark → publish; single-flight; jobs."""

from node.resolve.jobs import Job, Jobs
from node.resolve.resolver import Answer, Resolver
from node.resolve.spark import SparkWorker

__all__ = ["Answer", "Job", "Jobs", "Resolver", "SparkWorker"]
