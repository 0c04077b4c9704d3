"""The Spark executors' side: one lease or one round of one mirror task. Never imports the
driver's modules or pyspark: executors only need mm2py and its dependencies."""
