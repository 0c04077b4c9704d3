"""A flow runner's controller over a source whose topics a test sets (no broker): what the worker
reads of a runner's controller (its topic rule, ``claimed_by``) and of its admin client (the
source's topics, for the overlap check of several flows per pair)."""

from __future__ import annotations

from typing import Any

from mm2py.config.models import FlowConfig
from mm2py.engine.controller import Controller
from mm2py.runtime.flows import controller_for
from mm2py.stores.admin import TopicInfo


class SourceTopics:
    """An admin client that only lists topics: ``topics`` (shared, a test may change it)."""

    def __init__(self, topics: set[str]) -> None:
        self.topics = topics

    def list_topics(self) -> dict[str, TopicInfo]:
        return {t: TopicInfo(t, 1, 1) for t in self.topics}


#: the source topics every fake controller lists (tests set it)
SOURCE_TOPICS: set[str] = set()


def fake_controller(flow: FlowConfig) -> Controller:
    admin: Any = SourceTopics(SOURCE_TOPICS)
    return controller_for(flow, (admin, admin))
