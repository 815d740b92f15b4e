"""The co-located Spark worker process (warm SparkSession, job protocol). Arrives with issue 4."""
