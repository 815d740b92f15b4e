"""The co-located Spark worker process: one warm SparkSession serving SQL jobs over a Unix socket.

Run as ``python -m spark_worker --socket PATH`` (the node's ``node.services.resolve.spark.SparkWorker`` does
it). It never imports ``node``: ``spark_worker.protocol`` (standard library only) is the whole
interface. See docs/spark.md.
"""
