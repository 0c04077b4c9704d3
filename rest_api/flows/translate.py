"""HTTP routes that translate offsets between a flow's clusters, either way, and fail groups back.

* ``GET /flows/{name}/translate?topic=&partition=&offset=&direction=forward|back``: one offset, as
  ``mm2py offsets translate-offset`` (``mm2py/operations/translator.py``): ``forward`` reads
  ``offset`` as a position on the source (``topic`` named as there, ``orders``), ``back`` as a
  position on the target (``east.orders``; the source's name is accepted too). For consumers that
  keep their offsets outside Kafka. Bad input is a 400, an unknown flow or a partition the flow has
  not mirrored a 404, an offset that cannot be translated exactly (before the oldest sync still
  known, past what was mirrored) a 400 saying why; all with the ``/flows`` API's
  ``{"error", "key"}`` body.
* ``GET /flows/{source}/{target}/groups``: the consumer groups committed on the target on the flow's
  remote topics, each with those partitions (``mm2py/operations/failback.py``:
  ``failback_groups``): what a failback can move; the operator page offers them. An unreachable
  target is a 503.
* ``GET|POST /flows/{source}/{target}/groups/{group}/failback``: a consumer group as committed on the
  target, translated back to the source (``mm2py/operations/failback.py``); ``POST`` commits it there
  (``{"execute": true}``; a dry run otherwise), only while the group has no members on the source —
  as ``mm2py offsets translate|apply --direction back``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from mm2py.config.errors import ConfigError
from mm2py.engine.translation import Direction, NotMirroredError, TranslationError
from mm2py.operations.failback import failback_groups, translate_back
from mm2py.operations.failover import apply, check_topic_regex
from mm2py.operations.translator import FlowTranslator
from mm2py.rest_api.flows.bodies import (
    ErrorBody,
    FailbackGroup,
    FailbackGroups,
    GroupOffsets,
    OffsetsRequest,
    TranslatedOffset,
)
from mm2py.rest_api.shared import AnyWorker

__all__ = ["TranslatedPosition", "translate_router"]


class TranslatedPosition(BaseModel):
    """One offset translated: the same position on the source and on the target (the next offset a
    consumer reads there)."""

    flow: str
    direction: Direction
    partition: int
    source_cluster: str
    source_topic: str
    source_offset: int
    target_cluster: str
    target_topic: str
    target_offset: int


def _error(status: int, message: str, key: str | None = None) -> JSONResponse:
    return JSONResponse(ErrorBody(error=message, key=key).model_dump(exclude_none=True), status_code=status)


def _number(value: str | None, key: str) -> int:
    if value is None or value == "":
        raise ConfigError(f"the query parameter {key!r} is required", key)
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {value!r}", key) from None
    if number < 0:
        raise ConfigError(f"{key} must be 0 or more, got {number}", key)
    return number


_RESPONSES: dict[int | str, dict[str, Any]] = {400: {"model": ErrorBody}, 404: {"model": ErrorBody},
                                               503: {"model": ErrorBody}}


def _failback(worker: AnyWorker, source: str, target: str, group: str, topic_regex: str | None,
              execute: bool | None) -> GroupOffsets:
    """The failback plan of ``group`` (``execute`` None), or its dry run or commit on the source."""
    flow = worker.config.flow(source, target)  # any configured pair
    check_topic_regex(topic_regex, "topic_regex")
    timeout = flow.admin_timeout_ms / 1000
    translation = translate_back(flow, [group], topic_regex, timeout)
    rows = [TranslatedOffset.model_validate(vars(r)) for r in translation.rows]
    if execute is None:
        return GroupOffsets(rows=rows, notes=translation.notes)
    before = apply(flow, translation.rows, execute, timeout)
    previous = {str(tp): o.offset for tp, o in before.get(group, {}).items()}
    return GroupOffsets(rows=rows, notes=translation.notes, executed=execute, previous=previous)


def _groups(worker: AnyWorker, source: str, target: str) -> FailbackGroups:
    """The groups a failback of the pair's flow can move back (``failback_groups``)."""
    flow = worker.config.flow(source, target)  # any configured pair: it may have stopped since
    groups = failback_groups(flow, flow.admin_timeout_ms / 1000)
    return FailbackGroups(flow=flow.name, target_cluster=flow.target, groups=[
        FailbackGroup(group=g.group, partitions=[str(tp) for tp in g.partitions]) for g in groups])


def translate_router(worker: AnyWorker) -> APIRouter:
    router = APIRouter()

    @router.get("/flows/{name}/translate", response_model=TranslatedPosition, responses=_RESPONSES)
    async def translate_offset(name: str, topic: str | None = None, partition: str | None = None,
                               offset: str | None = None, direction: str = "forward") -> Any:
        """Where the position ``offset`` of ``topic``'s ``partition`` is on the flow's other cluster."""
        try:
            if not topic:
                raise ConfigError("the query parameter 'topic' is required", "topic")
            where, at = _number(partition, "partition"), _number(offset, "offset")
            if direction not in {d.value for d in Direction}:
                raise ConfigError(f"direction must be 'forward' or 'back', got {direction!r}", "direction")
        except ConfigError as exc:  # a query parameter missing or malformed
            return _error(400, str(exc), exc.key)
        try:
            flow = worker.flow_config(name)  # a running flow's name: 404 by the API's handler if none
        except ConfigError as exc:  # a pair whose clusters the configuration does not have
            return _error(404, str(exc), exc.key)
        way = Direction(direction)

        def run() -> TranslatedPosition:
            t = FlowTranslator.read(flow, flow.admin_timeout_ms / 1000).translate(topic, where, at, way)
            return TranslatedPosition(
                flow=flow.name, direction=way, partition=t.partition, source_cluster=flow.source,
                source_topic=t.source_topic, source_offset=t.source_offset, target_cluster=flow.target,
                target_topic=t.target_topic, target_offset=t.target_offset)

        try:
            return await asyncio.to_thread(run)
        except NotMirroredError as exc:
            return _error(404, str(exc), "topic")
        except TranslationError as exc:
            return _error(400, str(exc), "offset")

    @router.get("/flows/{source}/{target}/groups")
    async def failback_candidates(source: str, target: str) -> FailbackGroups:
        """The consumer groups committed on the target on the flow's remote topics (what a
        failback can move), each with those partitions."""
        return await asyncio.to_thread(_groups, worker, source, target)

    @router.get("/flows/{source}/{target}/groups/{group}/failback")
    async def failback_plan(source: str, target: str, group: str, topic_regex: str | None = None
                            ) -> GroupOffsets:
        """Where ``group``, as committed on the target, resumes on the source (``source_offset``)."""
        return await asyncio.to_thread(_failback, worker, source, target, group, topic_regex, None)

    @router.post("/flows/{source}/{target}/groups/{group}/failback")
    async def failback_group(source: str, target: str, group: str, body: OffsetsRequest) -> GroupOffsets:
        """Commit ``group``'s translated offsets on the source (failback); a dry run by default.
        ``previous``: the group's offsets on the source before."""
        return await asyncio.to_thread(_failback, worker, source, target, group, body.topic_regex,
                                       body.execute)

    return router
