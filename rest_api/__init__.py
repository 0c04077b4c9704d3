"""The worker's HTTP API, by role: ``flows/`` (the ``/flows`` API), ``connect/`` (the Kafka
Connect-shaped facade), ``ui/`` (the operator's page); ``app`` assembles them into one FastAPI app,
``server`` serves it on the worker's event loop, and ``shared`` holds what the three share."""
