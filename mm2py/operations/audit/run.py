"""``mm2py audit``, start to report: the flow's partitions and their ends, the anchors, the
comparison, the report (see :mod:`mm2py.engine.audit` for what is compared and how)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig
from mm2py.engine.audit import AnchorBook, PartitionAudit
from mm2py.operations.audit.driver import Progress, compare
from mm2py.operations.audit.reads import read_anchors
from mm2py.operations.audit.report import AnchorsRead, AuditReport
from mm2py.operations.audit.scope import connected, pairs_and_ends

__all__ = ["audit_flow"]


async def audit_flow(flow: FlowConfig, only: re.Pattern[str] | None = None,
                     on_progress: Callable[[Progress], None] | None = None) -> AuditReport:
    """Compare every partition ``flow`` mirrors (those of the source topics ``only`` matches, when
    given) with its remote partition. Raises :class:`~mm2py.errors.ClusterUnreachableError` for a
    cluster that does not answer and :class:`ConfigError` when nothing is selected."""
    started, clock = datetime.now(UTC), time.monotonic()
    async with connected(flow) as clients:
        ends, notes = await pairs_and_ends(clients, only)
        if not ends and not notes:
            which = f"matching {only.pattern!r} " if only is not None else ""
            raise ConfigError(f"no topic {which}on '{flow.source}' is one flow {flow.name} mirrors",
                              "--topics")
        books = {p.source: AnchorBook(e.source_start, e.target_start) for p, e in ends.items()}
        counts = await read_anchors(clients, books)
        audits = {p: PartitionAudit(e, books[p.source]) for p, e in ends.items()}
        progress = await compare(clients, audits, on_progress)
    partitions = AuditReport.partitions_of(audits)
    seconds = time.monotonic() - clock
    return AuditReport(
        flow=flow.name, source=flow.source, target=flow.target,
        verdict=AuditReport.verdict_of([p.status for p in partitions]),
        started_at=started.isoformat(timespec="seconds"), seconds=round(seconds, 3),
        compare_seconds=round(progress.seconds, 3),
        source_bytes=progress.source_bytes, target_bytes=progress.target_bytes,
        source_mb_per_s=round(progress.source_bytes / 1e6 / max(progress.seconds, 1e-6), 1),
        anchors=AnchorsRead(offset_syncs=counts.syncs, stored_positions=counts.positions,
                            malformed_records=counts.malformed),
        notes=notes, partitions=partitions)
