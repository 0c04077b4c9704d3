"""Request and response bodies of the ``/flows`` API (pydantic; unknown fields are refused)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from mm2py.config.patch import FlowPatch
from mm2py.rest_api.shared import AnyRunner

#: a cluster alias as MM2 accepts it in ``A->B`` (no whitespace, no ``>``)
Alias = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$", max_length=200)]
SettingValue = str | int | float | bool | list[str]


def _patterns(value: Any) -> Any:
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return value


#: regular expressions, as a JSON list or MM2's comma-separated string
Patterns = Annotated[list[str], BeforeValidator(_patterns)]


class ClusterSpec(BaseModel):
    """A cluster added together with a flow: bootstrap servers plus MM2 connection settings."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    bootstrap_servers: str = Field(alias="bootstrap.servers", min_length=1)

    def keys(self) -> dict[str, str]:
        extra = {k: str(v) for k, v in (self.model_extra or {}).items()}
        return {"bootstrap.servers": self.bootstrap_servers, **extra}


class FilterChange(BaseModel):
    """Allow/deny lists of a flow (MM2's ``topics``, ``topics.exclude``, ``groups``, ``groups.exclude``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    topics: Patterns | None = None
    topics_exclude: Patterns | None = Field(None, alias="topics.exclude")
    groups: Patterns | None = None
    groups_exclude: Patterns | None = Field(None, alias="groups.exclude")

    def filter_settings(self) -> dict[str, SettingValue]:
        return {
            k: v
            for k, v in self.model_dump(by_alias=True, exclude_none=True).items()
            if k in {"topics", "topics.exclude", "groups", "groups.exclude"}
        }


class FlowUpdate(FilterChange):
    """A change to a running flow. Topic lists apply in place; other settings restart the flow."""

    settings: dict[str, SettingValue] = Field(default_factory=dict)

    @field_validator("settings")
    @classmethod
    def _not_enabled(cls, settings: dict[str, SettingValue]) -> dict[str, SettingValue]:
        # a stored ``enabled=false`` would leave the flow running now and not start it after the
        # next restart: halting and removing a flow have calls of their own
        if "enabled" in settings:
            raise ValueError("'enabled' is not a setting to change here: POST /flows/{name}/pause or "
                             "/stop halts a flow, /resume starts it again, DELETE /flows/{name} removes it")
        return settings

    def all_settings(self) -> dict[str, SettingValue]:
        return {**self.settings, **self.filter_settings()}

    def patch(self) -> FlowPatch:
        """The change as the worker takes it (typed against the flow's settings when applied)."""
        return FlowPatch(values=self.all_settings())


class FlowCreate(FlowUpdate):
    """A new flow of ``source->target``; ``clusters`` may define aliases the worker does not know
    yet. ``name``: the flow's own (a pair may have several flows); none: the pair's unnamed flow,
    named ``source->target``."""

    source: Alias
    target: Alias
    name: str | None = Field(None, min_length=1, max_length=199)
    clusters: dict[Alias, ClusterSpec] = Field(default_factory=dict)


class TaskStatus(BaseModel):
    id: int
    state: str
    trace: str | None
    partitions: list[str]
    batches: int
    records: int
    bytes: int
    rebuilt_batches: int
    #: batches produced as pieces of a source batch larger than the target topic accepts
    split_batches: int = 0
    syncs: int
    lag: int
    restarts: int = 0  # failed and started again by the worker (with back-off)
    #: batches the target wrote exactly where the last one ended (mm2py/engine/losses.py)
    verified_batches: int = 0
    #: alarms raised so far, by name (``target.foreign``: 2), and the newest in words
    alarms: dict[str, int] = Field(default_factory=dict)
    recent_alarms: list[str] = Field(default_factory=list)
    #: partitions held at a record the target refuses even alone (``target.too.large``: fail)
    held_partitions: list[str] = Field(default_factory=list)
    #: partitions the target refuses (a keyless record into a compacted topic, a missing WRITE
    #: grant, ...), each resting alone and retried: ``partition``, ``target_partition``, ``cause``,
    #: ``meaning``, ``change`` (what to change on the target), ``since``, ``refusals``,
    #: ``retry_in_seconds`` (mm2py/engine/refusals.py)
    refused_partitions: list[dict[str, Any]] = Field(default_factory=list)
    #: what the task waits for the target on, with no alarm: a partition with too few in-sync
    #: replicas (``partition``, ``cause`` NOT_ENOUGH_REPLICAS, ...), a broker throttling it under a
    #: quota (``broker``, ``cause`` THROTTLED, ``throttle_ms``, ``throttled_seconds_total``)
    waiting_for_target: list[dict[str, Any]] = Field(default_factory=list)


class FlowStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    state: str
    trace: str | None
    topics: dict[str, Any]
    tasks: list[TaskStatus]
    #: remote topics with fewer partitions than their source that the target refused to grow:
    #: remote topic -> ``partitions``, ``source_partitions``, ``reason``
    short_topics: dict[str, dict[str, Any]] = Field(default_factory=dict)


def flow_status(runner: AnyRunner) -> FlowStatus:
    """A flow's status as the ``/flows`` routes answer it (from its runner's ``status()``)."""
    return FlowStatus.model_validate(runner.status())


class FlowList(BaseModel):
    flows: list[FlowStatus]


class ClusterInfo(BaseModel):
    alias: str
    bootstrap_servers: str


class ErrorBody(BaseModel):
    error: str
    key: str | None = None
    details: list[dict[str, Any]] | None = None


class OffsetsRequest(BaseModel):
    """Move a consumer group to the flow's target: a dry run unless ``execute``."""

    model_config = ConfigDict(extra="forbid")

    execute: bool = False
    topic_regex: str | None = None


class TranslatedOffset(BaseModel):
    group: str
    topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_offset: int
    via: str
    metadata: str = ""


class GroupOffsets(BaseModel):
    """Where a source group resumes on the target, and (for a move) what the target had before."""

    rows: list[TranslatedOffset]
    notes: list[str]
    executed: bool = False
    previous: dict[str, int] | None = None  # "topic-partition" -> the target group's offset before


class FailbackGroup(BaseModel):
    """A consumer group committed on a flow's target, and the target partitions it committed there
    of the flow's remote topics (``"east.orders-0"``)."""

    group: str
    partitions: list[str]


class FailbackGroups(BaseModel):
    """The consumer groups a failback of the flow can move back to its source, by name."""

    flow: str
    target_cluster: str
    groups: list[FailbackGroup]
