"""The Kafka Connect-shaped facade: ``/connectors``, ``/connector-plugins`` and ``/admin/loggers`` as
Connect's REST API has them, over the worker's flows. Errors are Connect's ``{"error_code", "message"}``
bodies."""
