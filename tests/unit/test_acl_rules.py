"""MM2's topic ACL sync rule on binding values (mm2py.engine.acls), and the binding conversions."""

from __future__ import annotations

import pytest

from mm2py.config.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mm2py.engine.acls import acls_to_sync, missing, should_sync, target_acl
from mm2py.rdkafka.acls import TopicAcl, from_binding, to_binding


def acl(topic: str = "orders", operation: str = "READ", permission: str = "ALLOW",
        pattern: str = "LITERAL", principal: str = "User:bob", host: str = "*") -> TopicAcl:
    return TopicAcl(topic, pattern, principal, host, operation, permission)


def mirrored(topic: str) -> bool:
    return topic.startswith("orders") or topic == "payments"


def rename(topic: str) -> str:
    return DefaultReplicationPolicy().format_remote_topic("east", topic)


def test_allow_read_is_copied_to_the_remote_topic_as_it_is() -> None:
    source = acl(principal="User:carol", host="10.0.0.7")
    assert should_sync(source, mirrored)
    assert target_acl(source, rename) == TopicAcl("east.orders", "LITERAL", "User:carol", "10.0.0.7",
                                                  "READ", "ALLOW")


def test_allow_all_becomes_read_and_allow_write_is_never_copied() -> None:
    assert target_acl(acl(operation="ALL"), rename).operation == "READ"
    assert not should_sync(acl(operation="WRITE"), mirrored)
    assert acls_to_sync([acl(operation="WRITE"), acl(operation="ALL")], mirrored, rename) == [
        acl("east.orders", "READ")
    ]


def test_other_allow_operations_are_copied_unchanged() -> None:
    for op in ("DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "DELETE"):
        assert acls_to_sync([acl(operation=op)], mirrored, rename) == [acl("east.orders", op)]


def test_deny_bindings_are_copied_unchanged_so_a_denied_principal_stays_denied() -> None:
    for op in ("READ", "WRITE", "ALL"):
        assert acls_to_sync([acl(operation=op, permission="DENY")], mirrored, rename) == [
            acl("east.orders", op, "DENY")
        ]


def test_only_literal_bindings_of_mirrored_topics() -> None:
    assert not should_sync(acl("orders", pattern="PREFIXED"), mirrored)
    assert not should_sync(acl("clicks"), mirrored)  # not mirrored by this flow
    # the wildcard names no topic ("east.*" would grant nothing), even when every topic is mirrored
    assert not should_sync(acl("*"), lambda topic: True)
    assert should_sync(acl("orders-eu"), mirrored)


def test_identity_policy_keeps_the_topic_name() -> None:
    identity = IdentityReplicationPolicy()
    got = acls_to_sync([acl(operation="ALL")], mirrored, lambda t: identity.format_remote_topic("east", t))
    assert got == [acl("orders", "READ")]


def test_duplicates_fold_and_missing_leaves_out_what_the_target_has() -> None:
    source = [acl(operation="ALL"), acl(operation="READ"), acl("payments", "READ"), acl("payments", "WRITE")]
    wanted = acls_to_sync(source, mirrored, rename)
    assert wanted == [acl("east.orders"), acl("east.payments")]
    assert missing(wanted, [acl("east.orders"), acl("east.other")]) == [acl("east.payments")]
    assert missing(wanted, wanted) == []


def test_bindings_round_trip_through_confluent_kafka() -> None:
    for value in (acl(), acl("p-", "ALL", "DENY", "PREFIXED", "User:x", "1.2.3.4")):
        assert from_binding(to_binding(value)) == value


class FakeAdmin:
    """Stands in for ClusterAdmin's two ACL calls (the real ones run in tests/integration)."""

    def __init__(self, acls: list[TopicAcl]) -> None:
        self.acls = list(acls)

    def describe_topic_acls(self) -> list[TopicAcl]:
        return sorted(self.acls)

    def create_topic_acls(self, acls: list[TopicAcl]) -> list[TopicAcl]:
        self.acls.extend(acls)
        return list(acls)


def test_a_sync_round_creates_only_what_the_target_lacks_and_counts_it() -> None:
    from types import SimpleNamespace

    from mm2py.config.models import MirrorMakerConfig
    from mm2py.connectors.acl_sync import TopicAclSync
    from mm2py.runtime.metrics import WorkerCollector

    flow = MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"}, "flows": {"east->west": {}},
    }).enabled_flows()[0]
    source = FakeAdmin([acl(operation="ALL"), acl(operation="WRITE"), acl("payments")])
    target = FakeAdmin([acl("east.orders")])
    sync = TopicAclSync(flow, source, target, mirrored=mirrored, rename=rename)  # type: ignore[arg-type]
    assert sync.sync_once() == [acl("east.payments")]
    assert sync.sync_once() == []
    assert sorted(target.acls) == [acl("east.orders"), acl("east.payments")]
    assert sync.status() == {"state": "UNASSIGNED", "syncs": 2, "acls_created": 1, "failures": 0,
                             "last_error": None}
    worker = SimpleNamespace(flows={"east->west": SimpleNamespace(tasks={}, checkpoints=None, acl_sync=sync)},
                             codec_operations=lambda: (0, 0))
    samples = {s.name: s.value for m in WorkerCollector(worker).collect()  # type: ignore[arg-type]
               for s in m.samples if s.name.startswith("mm2py_acl_sync")}
    assert samples == {"mm2py_acl_sync_syncs_total": 2, "mm2py_acl_sync_acls_created_total": 1,
                       "mm2py_acl_sync_failures_total": 0}



class LaggingAdmin(FakeAdmin):
    """A target whose listing shows a created binding only ``lag`` listings later (a broker's
    metadata following the controller's); ``forget`` deletes one on the target."""

    def __init__(self, lag: int) -> None:
        super().__init__([])
        self.lag, self.calls = lag, 0
        self.pending: list[tuple[TopicAcl, int]] = []

    def describe_topic_acls(self) -> list[TopicAcl]:
        self.calls += 1
        shown = [a for a, at in self.pending if self.calls >= at]
        self.pending = [(a, at) for a, at in self.pending if self.calls < at]
        self.acls.extend(a for a in shown if a not in self.acls)
        return sorted(self.acls)

    def create_topic_acls(self, acls: list[TopicAcl]) -> list[TopicAcl]:
        self.pending += [(a, self.calls + 1 + self.lag) for a in acls]
        return list(acls)


def test_a_binding_the_targets_listing_does_not_show_yet_is_not_created_twice() -> None:
    from mm2py.config.models import MirrorMakerConfig
    from mm2py.connectors.acl_sync import CONFIRM_ROUNDS, TopicAclSync

    flow = MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"}, "flows": {"east->west": {}},
    }).enabled_flows()[0]
    target = LaggingAdmin(lag=2)
    sync = TopicAclSync(flow, FakeAdmin([acl()]), target,  # type: ignore[arg-type]
                        mirrored=mirrored, rename=rename)
    assert [sync.sync_once() for _ in range(5)] == [[acl("east.orders")], [], [], [], []]
    assert target.acls == [acl("east.orders")] and sync.status()["acls_created"] == 1

    # deleted on the target: created again once the listing has not shown it for CONFIRM_ROUNDS rounds
    target.acls.clear()
    assert sync.sync_once() == [acl("east.orders")]
    target.pending.clear()  # deleted again before the listing showed it
    rounds = [sync.sync_once() for _ in range(CONFIRM_ROUNDS + 1)]
    assert rounds == [[]] * CONFIRM_ROUNDS + [[acl("east.orders")]]
    assert sync.status()["acls_created"] == 3

def test_the_sync_job_counts_a_failure_retries_and_ends_for_good_without_an_authorizer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One interval apart (the flow's scheduler): a failed round is counted and retried; a
    cluster without an authorizer ends the job with one line, without ``stop`` being set."""
    import asyncio
    import logging
    import time

    from mm2py.config.models import MirrorMakerConfig
    from mm2py.connectors.acl_sync import TopicAclSync
    from mm2py.rdkafka.acls import NoAuthorizerError

    flow = MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"},
        "flows": {"east->west": {"sync.topic.acls.interval.seconds": 1}},
    }).enabled_flows()[0]
    answers: list[Exception | None] = [None, OSError("east went away"),
                                       NoAuthorizerError("cluster 'east' has no ACL authorizer")]

    class FlakySource(FakeAdmin):
        def describe_topic_acls(self) -> list[TopicAcl]:
            answer = answers.pop(0)
            if answer is not None:
                raise answer
            return super().describe_topic_acls()

    sync = TopicAclSync(flow, FlakySource([acl()]), FakeAdmin([]),  # type: ignore[arg-type]
                        mirrored=mirrored, rename=rename)

    async def main() -> float:
        started = time.monotonic()
        await asyncio.wait_for(sync.run(asyncio.Event()), 10)  # ends by itself
        return time.monotonic() - started

    with caplog.at_level(logging.INFO):
        took = asyncio.run(main())
    assert took >= 1.9  # three rounds, an interval (1 s) apart
    assert answers == []
    assert sync.status() == {"state": "NO_AUTHORIZER", "syncs": 1, "acls_created": 1, "failures": 1,
                             "last_error": "OSError: east went away"}
    messages = [r.getMessage() for r in caplog.records]
    assert any("east->west: sync topic ACLs failed" in m and "east went away" in m for m in messages)
    assert sum("no topic ACLs are synced for this flow" in m for m in messages) == 1
