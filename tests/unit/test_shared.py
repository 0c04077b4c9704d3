"""mm2py.rest_api.shared: which settings are secrets, and values shown back with those hidden."""

from __future__ import annotations

import json

import pytest

from mm2py.rest_api.shared import HIDDEN, is_secret, redacted


@pytest.mark.parametrize("key", [
    "sasl.jaas.config", "ssl.keystore.password", "ssl.key.password", "sasl.oauthbearer.client.secret",
    "source.cluster.ssl.truststore.PASSWORD", "sasl.login.token.endpoint", "ssl.keystore.key",
    "mm2py.rest.credentials.file",
])
def test_credentials_are_secrets(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize("key", ["bootstrap.servers", "ssl.keystore.location", "topics", "sasl.mechanism",
                                 "ssl.keystore.type"])
def test_other_settings_are_not(key: str) -> None:
    assert not is_secret(key)


def test_redacted_hides_secret_values_at_every_depth_and_makes_tuples_json_lists() -> None:
    values = {
        "topics": ("a", "b"),
        "ssl.key.password": "hunter2",
        "clusters": {"east": {"bootstrap.servers": "e:9092", "sasl.jaas.config": "user=x password=y"}},
        "tasks.max": 2,
    }
    shown = redacted(values)
    assert shown == {
        "topics": ["a", "b"],
        "ssl.key.password": HIDDEN,
        "clusters": {"east": {"bootstrap.servers": "e:9092", "sasl.jaas.config": HIDDEN}},
        "tasks.max": 2,
    }
    text = json.dumps(shown)
    assert "hunter2" not in text and "password=y" not in text
    assert values["ssl.key.password"] == "hunter2", "the values given were changed"
