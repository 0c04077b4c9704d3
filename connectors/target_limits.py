"""The largest batch each target topic accepts, as the sink needs it to split what is too large.

A target topic refuses a batch larger than its ``max.message.bytes`` (set on the topic, or the
broker's ``message.max.bytes``) with MESSAGE_TOO_LARGE or RECORD_LIST_TOO_LARGE. The sink asks a
topic's limit before it first produces to it (one DescribeConfigs, through the admin client in a
thread) and again after a refusal, so a batch over it is split up front instead of refused. The
configured limit is exact; only when the brokers refuse a batch the configuration says fits (or the
topic cannot be described) does the limit become half the refused batch, and half again on the
next refusal, until batches pass.

A task asks for its target topics' limits when it starts (:meth:`TargetLimits.ask_ahead`), in the
background, so that its first puts do not wait for them: a task that starts idle (a lease moved to
another Spark host) had each first put to a topic wait for a DescribeConfigs, and every put after
it, when traffic came.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

__all__ = ["Describe", "TargetLimits"]

log = logging.getLogger(__name__)

#: reads the ``max.message.bytes`` of the given target topics (blocking: run in a thread); a topic
#: it cannot describe is left out
Describe = Callable[[list[str]], Mapping[str, int]]


class TargetLimits:
    """Each target topic's batch limit: known, asked for, or to be asked for again (a refusal)."""

    def __init__(self, describe: Describe | None) -> None:
        self._describe = describe
        #: the limit the topic's configuration gives (absent: it could not be read)
        self._configured: dict[str, int] = {}
        #: a limit below the configured one, learnt from refusals of batches it says would fit
        self._halved: dict[str, int] = {}
        #: topics asked for (whatever the answer); a refusal takes the topic out to ask again
        self._asked: set[str] = set()
        #: topic -> the size of the batch the target refused, until the topic is asked for again
        self._refused: dict[str, int] = {}
        #: the limit in force: the lower of the two above
        self._limits: dict[str, int] = {}
        #: topic -> the question about it under way (``ask_ahead``): a put's ``learn`` waits for it
        self._asking: dict[str, asyncio.Future[None]] = {}

    def limit(self, topic: str) -> int | None:
        """The largest batch ``topic`` takes, when known (a lookup: asked per partition and put)."""
        return self._limits.get(topic)

    def _settle(self, topic: str) -> None:
        limits = [v for v in (self._configured.get(topic), self._halved.get(topic)) if v is not None]
        if limits:
            self._limits[topic] = min(limits)

    def unknown(self, topics: Iterable[str]) -> list[str]:
        """Those of ``topics`` to ask for before producing to them."""
        return [t for t in dict.fromkeys(topics) if t not in self._asked]

    def refused(self, topic: str, size: int) -> None:
        """The target refused a batch of ``size`` bytes to ``topic`` as too large: ask again."""
        self._refused[topic] = min(size, self._refused.get(topic, size))
        self._asked.discard(topic)

    def ask_ahead(self, topics: Iterable[str]) -> None:
        """Ask for ``topics``' limits now, in the background, before a put needs them (a task's
        start; on a running event loop). A put to one of them meanwhile waits for this answer
        instead of asking again; a topic the target could not describe is asked for again at its
        first put (it may not exist yet)."""
        todo = [t for t in self.unknown(topics) if t not in self._asking]
        if not todo:
            return
        question = asyncio.ensure_future(self._learn(todo, answered_only=True))
        for topic in todo:
            self._asking[topic] = question

        def answered(done: asyncio.Future[None]) -> None:
            for topic in todo:
                if self._asking.get(topic) is done:
                    del self._asking[topic]
            if not done.cancelled():
                done.exception()  # retrieved: _learn logs what it could not ask

        question.add_done_callback(answered)

    async def learn(self, topics: list[str]) -> None:
        """Ask the target for ``topics``' limits (answered or not, they are asked for); those asked
        for ahead are waited for instead."""
        ahead = {self._asking[t] for t in topics if t in self._asking}
        if ahead:
            await asyncio.wait(ahead)
        await self._learn([t for t in topics if t not in self._asked])

    async def _learn(self, topics: list[str], answered_only: bool = False) -> None:
        configured: Mapping[str, int] = {}
        if topics and self._describe is not None:
            try:
                configured = await asyncio.to_thread(self._describe, topics)
            except Exception as exc:  # no DescribeConfigs right (say): refusals teach the limit
                log.warning("cannot read max.message.bytes of %s on the target (%s): a batch it "
                            "refuses as too large is split in halves", ", ".join(topics), exc)
        for topic in topics:
            if answered_only and topic not in configured:
                continue
            self._asked.add(topic)
            if topic in configured:
                self._configured[topic] = configured[topic]
                self._settle(topic)
            refused = self._refused.pop(topic, None)
            if refused is None:
                continue
            limit = self.limit(topic)
            if limit is None or limit >= refused:  # the configuration says it fits: halve
                self._halved[topic] = max(1, refused // 2)
                self._settle(topic)
                log.warning("the target refused a batch of %d bytes to %s as too large, while its "
                            "max.message.bytes is %s: batches of at most %d bytes from now on",
                            refused, topic, limit if limit is not None else "unknown", refused // 2)
