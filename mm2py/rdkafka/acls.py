"""Topic ACLs: bindings as plain values, and ClusterAdmin's calls that read and create them.

:class:`TopicAcl` is what ``ClusterAdmin.describe_topic_acls`` returns and
``ClusterAdmin.create_topic_acls`` takes (:class:`TopicAclCalls`, a base of ``ClusterAdmin``); the
engine's rule (:mod:`mm2py.engine.acls`) works on it without any Kafka client. Enum members are
kept by their Kafka names (``LITERAL``, ``READ``, ``ALLOW``...), as ``kafka-acls.sh --list`` prints.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from mm2py.errors import Mm2pyError

log = logging.getLogger(__name__)


class NoAuthorizerError(Mm2pyError):
    """The cluster runs no authorizer: it keeps no ACLs (Kafka's SECURITY_DISABLED)."""


class TopicAcl(NamedTuple):
    """One ACL binding on a TOPIC resource: who may (or may not) do what to which topic(s)."""

    topic: str  # the resource name: a topic, a prefix (PREFIXED) or ``*`` (every topic)
    pattern: str  # LITERAL or PREFIXED
    principal: str  # e.g. ``User:alice``
    host: str  # ``*`` for any host
    operation: str  # READ, WRITE, ALL, DESCRIBE, ...
    permission: str  # ALLOW or DENY

    def __str__(self) -> str:
        return (f"{self.permission} {self.principal}@{self.host} {self.operation} "
                f"on topic {self.topic} ({self.pattern})")


#: every binding on a topic resource, whatever its pattern, principal, host, operation, permission
#: (None matches any name, principal, host; confluent-kafka's stubs say ``str``)
ANY_TOPIC_ACL = AclBindingFilter(
    ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
    AclOperation.ANY, AclPermissionType.ANY,
)


def _name(member: object) -> str:
    """An enum member's name (confluent-kafka types these attributes as ``Enum | str | int``)."""
    return str(getattr(member, "name", member))


def from_binding(binding: AclBinding) -> TopicAcl:
    return TopicAcl(
        binding.name, _name(binding.resource_pattern_type), binding.principal, binding.host,
        _name(binding.operation), _name(binding.permission_type),
    )


def to_binding(acl: TopicAcl) -> AclBinding:
    """confluent-kafka's binding of ``acl`` (an unknown enum name raises ``KeyError``)."""
    return AclBinding(
        ResourceType.TOPIC, acl.topic, ResourcePatternType[acl.pattern], acl.principal, acl.host,
        AclOperation[acl.operation], AclPermissionType[acl.permission],
    )


class TopicAclCalls:
    """``ClusterAdmin``'s topic ACL calls (it provides the client, the alias and its error rules)."""

    alias: str
    bootstrap: str
    timeout: float
    _client: AdminClient

    def _result(self, fut: Future[Any], what: str) -> Any:
        raise NotImplementedError

    def _fail(self, what: str, exc: BaseException) -> Mm2pyError:
        raise NotImplementedError

    def describe_topic_acls(self) -> list[TopicAcl]:
        """Every ACL binding on a topic resource; :class:`NoAuthorizerError` without an authorizer.
        librdkafka drops DescribeAcls' error code (no authorizer, or not allowed, both read as an
        empty listing), so an empty listing is checked against the broker's authorizer.class.name."""
        what = "describing topic ACLs"
        try:
            bindings = self._result(self._client.describe_acls(ANY_TOPIC_ACL, request_timeout=self.timeout),
                                    what)
            acls = sorted(from_binding(b) for b in bindings)
            if not acls and not self._authorizer_class():
                raise self._no_authorizer()
        except KafkaException as exc:
            raise self._acl_error(what, exc) from exc
        return acls

    def _authorizer_class(self) -> str:
        """The ``authorizer.class.name`` of one broker ('' when none is configured)."""
        broker = str(min(self._client.list_topics(timeout=self.timeout).brokers))
        fut = self._client.describe_configs([ConfigResource(ConfigResource.Type.BROKER, broker)],
                                            request_timeout=self.timeout)
        configs = self._result(next(iter(fut.values())), f"describing the configs of broker {broker}")
        entry = configs.get("authorizer.class.name")
        return "" if entry is None or entry.value is None else str(entry.value)

    def create_topic_acls(self, acls: Iterable[TopicAcl]) -> list[TopicAcl]:
        """Create ``acls`` (an existing one is fine); returns those created. A binding the broker
        refuses is logged and left out, as MM2 does; no authorizer raises :class:`NoAuthorizerError`."""
        wanted = {to_binding(a): a for a in acls}
        if not wanted:
            return []
        created = []
        for binding, fut in self._client.create_acls(list(wanted), request_timeout=self.timeout).items():
            what = f"creating ACL {wanted[binding]}"
            try:
                self._result(fut, what)
                created.append(wanted[binding])
            except KafkaException as exc:
                error = self._acl_error(what, exc)
                if isinstance(error, NoAuthorizerError):
                    raise error from exc
                log.warning("%s", error)
        return created

    def _no_authorizer(self) -> NoAuthorizerError:
        return NoAuthorizerError(f"cluster '{self.alias}' ({self.bootstrap}) has no ACL authorizer")

    def _acl_error(self, what: str, exc: KafkaException) -> Mm2pyError:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() == KafkaError.SECURITY_DISABLED:
            return self._no_authorizer()
        return self._fail(what, exc)
