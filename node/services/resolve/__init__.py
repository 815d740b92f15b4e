"""Resolving queries: local index → peers → compute on Spark → publish; single-flight; jobs."""

from node.services.resolve.jobs import Job, Jobs
from node.services.resolve.resolver import Answer, Resolver
from node.services.resolve.spark import SparkWorker

__all__ = ["Answer", "Job", "Jobs", "Resolver", "SparkWorker"]
