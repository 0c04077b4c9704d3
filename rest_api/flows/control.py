"""HTTP routes that pause, stop and resume a flow, and read or reset its source positions.

In the spirit of Kafka Connect's ``PUT /connectors/{c}/stop`` and KIP-875's
``GET/PATCH/DELETE /connectors/{c}/offsets``: a flow's positions are changed only while it is
STOPPED, and it resumes exactly from the new ones. Errors use the ``/flows`` API's body
(``{"error": ...}``; a reset of a running flow is a 409).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from mm2py.engine.task_contract import TaskState
from mm2py.operations.flow_offsets import PartitionOffset, Reset, read_offsets
from mm2py.protocol.types import TopicPartition
from mm2py.rest_api.flows.bodies import FlowStatus, flow_status
from mm2py.rest_api.shared import AnyWorker

__all__ = ["FlowOffsets", "OffsetChange", "OffsetsChange", "flow_control_router"]


class PartitionPosition(BaseModel):
    """A source partition's committed position (``position``: the next source offset to mirror;
    ``null`` once reset: the partition starts as never mirrored) and the target offset it maps to."""

    topic: str
    partition: int
    position: int | None
    target_topic: str
    target_offset: int | None


class FlowOffsets(BaseModel):
    flow: str
    state: str | None  # None: the flow does not run on this worker
    offsets: list[PartitionPosition]


class OffsetChange(BaseModel):
    """Move one source partition: to a source offset (the next one to mirror), or its log's ends."""

    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1)
    partition: int = Field(ge=0)
    offset: Annotated[int, Field(ge=0)] | Literal["earliest", "latest"]


class OffsetsChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    offsets: list[OffsetChange] = Field(min_length=1)

    def changes(self) -> dict[TopicPartition, Reset]:
        return {TopicPartition(c.topic, c.partition): c.offset for c in self.offsets}


def _body(worker: AnyWorker, name: str, rows: list[PartitionOffset]) -> FlowOffsets:
    runner = worker.flows.get(name)
    return FlowOffsets(flow=name, state=None if runner is None else runner.state,
                       offsets=[PartitionPosition.model_validate(vars(r)) for r in rows])


def flow_control_router(worker: AnyWorker) -> APIRouter:
    router = APIRouter()

    @router.post("/flows/{name}/pause")
    async def pause_flow(name: str) -> FlowStatus:
        """Shut the flow's tasks down (they commit) and keep it PAUSED until resumed."""
        return flow_status(await worker.halt_flow(name, TaskState.PAUSED))

    @router.post("/flows/{name}/stop")
    async def stop_flow(name: str) -> FlowStatus:
        """Shut the flow's tasks down (they commit) and keep it STOPPED: its offsets may be reset."""
        return flow_status(await worker.halt_flow(name, TaskState.STOPPED))

    @router.post("/flows/{name}/resume")
    async def resume_flow(name: str) -> FlowStatus:
        """Start a paused or stopped flow again, from its committed (or reset) positions."""
        return flow_status(await worker.resume_flow(name))

    @router.get("/flows/{name}/offsets")
    async def get_offsets(name: str) -> FlowOffsets:
        """Each source partition's committed position and the target offset it maps to."""
        flow = worker.flow_config(name)
        return _body(worker, flow.name, await read_offsets(flow))

    @router.patch("/flows/{name}/offsets")
    async def alter_offsets(name: str, body: OffsetsChange) -> FlowOffsets:
        """Move chosen partitions (only while the flow is STOPPED; 409 otherwise)."""
        rows = await worker.reset_offsets(name, body.changes())
        return _body(worker, worker.flow_config(name).name, rows)

    @router.delete("/flows/{name}/offsets")
    async def reset_offsets(name: str) -> FlowOffsets:
        """Forget every position: each partition starts again as never mirrored (only while STOPPED)."""
        rows = await worker.reset_offsets(name, None)
        return _body(worker, worker.flow_config(name).name, rows)

    return router
