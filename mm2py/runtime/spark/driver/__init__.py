"""The Spark driver's side: the worker, its flow runners, the Spark session, the lease scheduler,
table and coordinator, and the round plan. Runs where ``mm2py run --runtime spark`` runs."""
