"""Follows the source cluster's ``__consumer_offsets`` topic: every consumer group's commits as they happen.

The group coordinator writes each offset commit to ``__consumer_offsets`` before it acknowledges it,
so a reader of that topic learns of a commit within a fetch round trip: the live group offset sync
(``connectors/live_sync.py``) reads it with one :class:`ConsumerOffsetsFeed`.

* **Where it starts.** Every partition at its end as found when :meth:`ConsumerOffsetsFeed.start`
  returns (explicit offsets, not "latest" resolved later), so a caller that reads the groups'
  committed offsets *after* ``start`` misses no commit in between. A topic that does not exist yet
  (no group ever committed on the cluster) is looked for again at each poll, at most every second,
  and read from its beginning once it appears: a new cluster's first group is seen too.
* **What it reads.** ``read_committed``: a transactional offset commit is seen once its transaction
  commits, an aborted one never. (A transaction left open holds up the commits of other groups in
  the same partition until it ends, as for any ``read_committed`` reader.)
* **Cost.** One consumer, assigned (no group joined, nothing committed), long-polling each broker
  (``fetch.wait.max.ms`` 500 ms: about two Fetch requests a second per broker while no group
  commits; a commit is answered at once).
* **Refusal.** The principal needs DESCRIBE and READ on the topic ``__consumer_offsets``; without
  them :class:`CommitFeedRefusedError` is raised (at start or at any poll) and the caller falls back
  to polling the groups' offsets.

Records are handed over raw (key, value); decoding is the caller's (``mm2py.protocol.consumer_offsets``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.protocol.consumer_offsets import CONSUMER_OFFSETS_TOPIC
from mm2py.rdkafka.admin import StoreError
from mm2py.stores.topic_tail import bounds

__all__ = ["CommitFeedRefusedError", "ConsumerOffsetsFeed", "RawRecord"]

log = logging.getLogger(__name__)

#: (partition of __consumer_offsets, offset, key, value)
RawRecord = tuple[int, int, bytes | None, bytes | None]

_REFUSALS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                       KafkaError.GROUP_AUTHORIZATION_FAILED})
#: how often a topic not there yet is looked for
_LOOK_AGAIN_S = 1.0


class CommitFeedRefusedError(StoreError):
    """The cluster does not let this client read ``__consumer_offsets`` (no DESCRIBE or READ)."""


class ConsumerOffsetsFeed:
    """Reads what is appended to ``__consumer_offsets`` (blocking calls: run them in a thread)."""

    def __init__(self, client: Mapping[str, Any], *, name: str, topic: str = CONSUMER_OFFSETS_TOPIC) -> None:
        """``client``: the consumer's connection settings (``librdkafka_config``: servers, TLS/SASL)."""
        self.topic = topic
        self.name = name
        self._consumer = Consumer({**client, **{
            "group.id": f"mm2py-{name}",  # required by librdkafka; never joined nor committed to
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 500,
            "fetch.error.backoff.ms": 100,
        }})
        self.partitions = 0  #: partitions followed (0 until the topic exists)
        self.records = 0  #: records handed over
        self._looked = 0.0  # when the topic was last looked for (monotonic)
        #: a poll and the close never overlap (a poll abandoned by a cancelled caller finishes first)
        self._using = threading.Lock()
        self._closed = False

    def start(self, timeout: float) -> None:
        """Position every partition of the topic at its current end (blocking); a topic not there
        yet is looked for again by :meth:`poll`. Raises :class:`CommitFeedRefusedError`."""
        self._assign(timeout, at_end=True)

    def _assign(self, timeout: float, *, at_end: bool) -> None:
        self._looked = time.monotonic()
        try:
            md = self._consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        except KafkaException as exc:
            self._check(exc.args[0])
            raise
        if md is not None and md.error is not None:
            self._check(md.error)
            if md.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(md.error)
            return
        if md is None or not md.partitions:
            return
        partitions = sorted(md.partitions)
        starts = dict.fromkeys(partitions, 0)  # created after we started: every commit in it is new
        if at_end:
            try:
                # the last stable offsets: where a read_committed reader of the partition goes on
                found = bounds(self._consumer, self.topic, partitions, timeout)
                starts = {p: end for p, (_low, end) in found.items()}
            except KafkaException as exc:
                self._check(exc.args[0])
                raise
        parts = [CKTopicPartition(self.topic, p, starts[p]) for p in partitions]
        self._consumer.assign(parts)
        self.partitions = len(parts)
        log.debug("%s: following %d partitions of %s", self.name, self.partitions, self.topic)

    def poll(self, timeout: float) -> list[RawRecord]:
        """The records appended since the last poll, waiting up to ``timeout`` s for a first one.
        Raises :class:`CommitFeedRefusedError` when the cluster refuses the reads."""
        with self._using:
            if self._closed:
                return []
            return self._poll(timeout)

    def _poll(self, timeout: float) -> list[RawRecord]:
        if not self.partitions:
            if time.monotonic() - self._looked >= _LOOK_AGAIN_S:
                self._assign(max(1.0, timeout), at_end=False)
            if not self.partitions:
                time.sleep(min(timeout, _LOOK_AGAIN_S))
                return []
        out: list[RawRecord] = []
        first = self._consumer.poll(timeout)
        if first is None:
            return out
        for msg in [first, *self._consumer.consume(1000, 0)]:
            err = msg.error()
            if err is not None:
                self._check(err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: reading %s: %s", self.name, self.topic, err.str())
                continue
            out.append((msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()))
        self.records += len(out)
        return out

    def _check(self, err: KafkaError) -> None:
        if err.code() in _REFUSALS:
            raise CommitFeedRefusedError(f"reading {self.topic} refused: {err.str()}")

    def close(self) -> None:
        with self._using:
            if not self._closed:
                self._closed = True
                self._consumer.close()
