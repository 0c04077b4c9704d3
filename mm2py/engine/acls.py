"""Which source topic ACLs a flow copies to the target, and as what (MM2's topic ACL sync rule).

MirrorMaker 2's MirrorSourceConnector (``syncTopicAcls``, ``shouldReplicateAcl``,
``targetAclBinding``; KIP-382) copies, every ``sync.topic.acls.interval.seconds``:

* bindings on a TOPIC resource with a LITERAL pattern only (a PREFIXED pattern names no one topic
  whose remote name could be formed);
* of a topic the flow mirrors (the controller's ``should_replicate``);
* except ALLOW WRITE: only the mirror writes to a remote topic;
* onto the remote topic (``east.orders``), LITERAL, principal, host and permission kept; ALLOW ALL
  becomes ALLOW READ (ALL would include WRITE). DENY bindings are copied as they are, so a
  principal denied on the source stays denied on the target.

One deliberate difference: a LITERAL binding on ``*`` (Kafka's wildcard: every topic) is not
copied. MM2 would copy it as a literal ACL on a topic named ``east.*``, which grants nothing.

Pure: values in, values out. The connector (:mod:`mm2py.connectors.acl_sync`) does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mm2py.rdkafka.acls import TopicAcl

WILDCARD = "*"


def should_sync(acl: TopicAcl, mirrored: Callable[[str], bool]) -> bool:
    """Is ``acl`` (a binding read from the source) copied to the target?"""
    if acl.pattern != "LITERAL" or acl.topic == WILDCARD:
        return False
    if acl.permission == "ALLOW" and acl.operation == "WRITE":
        return False
    return mirrored(acl.topic)


def target_acl(acl: TopicAcl, rename: Callable[[str], str]) -> TopicAcl:
    """The binding the target gets for source binding ``acl``: the remote topic; ALLOW ALL -> READ."""
    operation = "READ" if acl.permission == "ALLOW" and acl.operation == "ALL" else acl.operation
    return acl._replace(topic=rename(acl.topic), pattern="LITERAL", operation=operation)


def acls_to_sync(
    source: Iterable[TopicAcl], mirrored: Callable[[str], bool], rename: Callable[[str], str]
) -> list[TopicAcl]:
    """The target bindings the source's bindings call for (sorted, without duplicates: ALLOW ALL
    and ALLOW READ of one principal give one READ binding)."""
    return sorted({target_acl(a, rename) for a in source if should_sync(a, mirrored)})


def missing(wanted: Iterable[TopicAcl], existing: Iterable[TopicAcl]) -> list[TopicAcl]:
    """Those of ``wanted`` the target does not have yet (sync only adds; it never deletes, as MM2)."""
    have = set(existing)
    return sorted(a for a in set(wanted) if a not in have)
