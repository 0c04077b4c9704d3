"""One error tree: every error class the project defines descends from Mm2pyError."""

from __future__ import annotations

import importlib
import inspect

import pytest

from mm2py.errors import ClusterUnreachableError, ConfigError, Mm2pyError, SecurityError
from tests.support.rooms import product_modules


def _error_classes() -> list[type[BaseException]]:
    """Every exception class defined in the product, all three rooms (mm2py/, connectors/ and
    rest_api/: a walk of ``mm2py.__path__`` alone misses the two at the top of a checkout)."""
    found: dict[str, type[BaseException]] = {}
    for name in product_modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_error_class_descends_from_the_root() -> None:
    classes = _error_classes()
    assert len(classes) > 20  # the walk found the tree, not nothing
    strays = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, Mm2pyError)]
    assert not strays, f"errors outside the tree: {strays}"


def test_the_tree_drawn_in_mm2py_errors_names_every_family() -> None:
    """Each direct child of the root is drawn in ``mm2py/errors.py``'s docstring (a family added
    without its line there fails here)."""
    import mm2py.errors

    families = {c.__name__ for c in _error_classes() if Mm2pyError in c.__bases__}
    assert len(families) > 10
    drawn = {line.split()[1] for line in (mm2py.errors.__doc__ or "").splitlines() if "── " in line}
    assert families - drawn == set(), "families missing from the tree in mm2py/errors.py"
    assert drawn - families == set(), "the tree in mm2py/errors.py names errors that are not families"


def test_security_failures_are_their_own_kind() -> None:
    from mm2py.client.connection import AuthenticationError, TlsError
    from mm2py.rdkafka.admin import ClusterSecurityError

    for kind in (AuthenticationError, TlsError, ClusterSecurityError):
        assert issubclass(kind, SecurityError)
        assert not issubclass(kind, ClusterUnreachableError)  # a wrong password is not an outage


def test_broker_errors_are_not_protocol_errors() -> None:
    from mm2py.protocol.errors import ProtocolError
    from mm2py.protocol.errors_codes import BrokerError

    assert not issubclass(BrokerError, ProtocolError)
    err = BrokerError(6, "leader moved")
    assert err.code == 6 and "NOT_LEADER_OR_FOLLOWER" in str(err) and err.retriable


def test_config_errors_stay_value_errors_and_survive_pickling() -> None:
    import pickle

    from mm2py.client.tls import TlsConfigError

    err = pickle.loads(pickle.dumps(ConfigError("bad tasks.max", "tasks.max")))
    assert isinstance(err, ValueError) and err.key == "tasks.max" and str(err) == "bad tasks.max"
    tls = pickle.loads(pickle.dumps(TlsConfigError("no such file", "ca")))
    assert isinstance(tls, ConfigError) and tls.part == "ca"


@pytest.mark.parametrize("name", ["FlowNotFoundError", "FlowExistsError", "ClusterConflictError"])
def test_steering_errors_keep_their_builtin_bases(name: str) -> None:
    from mm2py.runtime import steering

    kind = getattr(steering, name)
    assert issubclass(kind, steering.SteeringError) and issubclass(kind, LookupError | ValueError)
