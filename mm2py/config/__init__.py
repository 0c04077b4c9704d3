"""Configuration: MM2's keys as pydantic models, their loaders and errors, security settings,
and the configurable rules they name (replication policy, topic and config filters)."""
