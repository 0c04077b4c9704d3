"""MM2's topic ACL sync for one flow (``sync.topic.acls.enabled``, ``sync.topic.acls.interval.seconds``).

At the flow's start and then every interval, :class:`TopicAclSync` reads the source's topic ACL
bindings, keeps those MM2 copies (:mod:`mm2py.engine.acls`: literal bindings of mirrored topics,
ALLOW WRITE left out, ALLOW ALL as READ) and creates on the target the ones it lacks, on the
remote topic names. Nothing is ever deleted on the target, as in MM2.

A binding just created may be missing from the target's next listing (a broker lists ACLs from its
copy of the cluster metadata, which follows the controller's by a moment): the sync does not
create it again while it waits for the listing to show it, for :data:`CONFIRM_ROUNDS` rounds at
most, after which a binding still absent (deleted on the target meanwhile) is created again, as
MM2 would at its next interval.

A cluster without an authorizer keeps no ACLs: the sync says so in one log line and stops for this
flow (until the flow is restarted) instead of failing every interval. Other failures (a cluster
unreachable, the mirror's principal not allowed to describe or create ACLs) are logged and retried
at the next interval. Both runtimes run it beside the flow's controller (``started`` / ``stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from mm2py.config.models import FlowConfig
from mm2py.engine.acls import acls_to_sync, missing
from mm2py.engine.controller import Controller
from mm2py.engine.scheduler import Scheduler
from mm2py.rdkafka.acls import NoAuthorizerError, TopicAcl
from mm2py.rdkafka.admin import ClusterAdmin

log = logging.getLogger(__name__)

_JOB = "sync topic ACLs"

#: rounds a created binding is not created again while the target's listing does not show it yet
CONFIRM_ROUNDS = 3


@dataclass
class AclSyncMetrics:
    syncs: int = 0  # sync rounds that completed
    acls_created: int = 0  # bindings created on the target
    failures: int = 0  # sync rounds that failed (retried on the next interval)
    last_error: str | None = None


class TopicAclSync:
    """Copies one flow's topic ACLs from its source to its target cluster."""

    def __init__(
        self, flow: FlowConfig, source_admin: ClusterAdmin, target_admin: ClusterAdmin, *,
        mirrored: Callable[[str], bool], rename: Callable[[str], str],
    ) -> None:
        self.flow = flow
        self.source_admin, self.target_admin = source_admin, target_admin
        self.mirrored, self.rename = mirrored, rename
        self.metrics = AclSyncMetrics()
        #: UNASSIGNED, RUNNING, STOPPED, or NO_AUTHORIZER (a cluster keeps no ACLs: given up)
        self.state = "UNASSIGNED"
        self._task: asyncio.Task[None] | None = None
        #: bindings created that the target's listing has not shown yet -> rounds left to wait for it
        self._unconfirmed: dict[TopicAcl, int] = {}

    @staticmethod
    def wanted(flow: FlowConfig) -> bool:
        """MM2: ``sync.topic.acls.enabled`` and a non-negative interval."""
        return flow.sync_topic_acls_enabled and flow.sync_topic_acls_interval_seconds >= 0

    @classmethod
    def started(cls, flow: FlowConfig, controller: Controller, stop: asyncio.Event) -> TopicAclSync | None:
        """The running sync of a started flow (deciding what is mirrored as its controller does, with
        its admin clients), or None when the flow does not sync ACLs. Call from the event loop."""
        if not cls.wanted(flow):
            return None
        sync = cls(flow, controller.source_admin, controller.target_admin,
                   mirrored=controller.should_replicate, rename=controller.target_topic)
        sync._task = asyncio.create_task(sync.run(stop))
        return sync

    def sync_once(self) -> list[TopicAcl]:
        """One round (blocking admin calls): the target bindings created."""
        wanted = acls_to_sync(self.source_admin.describe_topic_acls(), self.mirrored, self.rename)
        todo = missing(wanted, self.target_admin.describe_topic_acls()) if wanted else []
        waiting = {acl: left - 1 for acl, left in self._unconfirmed.items() if left > 0 and acl in todo}
        todo = [acl for acl in todo if acl not in waiting]
        created = self.target_admin.create_topic_acls(todo)
        self._unconfirmed = {**waiting, **dict.fromkeys(created, CONFIRM_ROUNDS)}
        self.metrics.syncs += 1
        self.metrics.acls_created += len(created)
        if created:
            log.info("%s: synced %d topic ACL bindings to %s: %s", self.flow.name, len(created),
                     self.flow.target, ", ".join(map(str, created)))
        return created

    async def run(self, stop: asyncio.Event) -> None:
        """Sync now and every interval (a job of the flow's scheduler) until ``stop`` is set, or
        until a cluster proves to have no authorizer."""
        self.state = "RUNNING"
        interval = max(1.0, float(self.flow.sync_topic_acls_interval_seconds))
        jobs = Scheduler(self.flow.name, stop, on_failure=self._failed)

        async def sync() -> None:
            try:
                await asyncio.to_thread(self.sync_once)
            except NoAuthorizerError as exc:
                self.state = "NO_AUTHORIZER"
                log.info("%s: %s, so no topic ACLs are synced for this flow (set "
                         "sync.topic.acls.enabled=false to skip this check)", self.flow.name, exc)
                jobs.cancel(_JOB)

        jobs.every(_JOB, interval, sync)
        try:
            await jobs.run()
        finally:
            if self.state == "RUNNING":
                self.state = "STOPPED"

    @property
    def ended(self) -> bool:
        """The loop is over: stopped, or given up for good (no authorizer); no round follows."""
        return self._task is not None and self._task.done()

    def _failed(self, _job: str, exc: Exception) -> None:
        self.metrics.failures += 1
        self.metrics.last_error = f"{type(exc).__name__}: {exc}"

    async def stop(self) -> None:
        """End the loop now (a round blocked on a slow cluster is not waited for)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self.state == "RUNNING":
            self.state = "STOPPED"

    def status(self) -> dict[str, object]:
        m = self.metrics
        return {"state": self.state, "syncs": m.syncs, "acls_created": m.acls_created,
                "failures": m.failures, "last_error": m.last_error}
