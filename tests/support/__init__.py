"""What the tests share and only the tests use: fakes, builders, helpers for real brokers and the
local clusters of other systems (Connect, Spark, an identity provider). No test module imports
another test module; they import from here (``from tests.support.brokers import create_topic``)."""
