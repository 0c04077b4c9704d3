"""The client side of an incremental fetch session (KIP-227), sans-IO.

A broker that holds a fetch session keeps each of its partitions' fetch parameters (offset, size
limit, leader epoch). A request of the session then names only the partitions whose parameters
changed, and those to forget; its response carries only the partitions with news (records, a moved
high watermark or log start offset, an error) — with thousands of idle partitions, a few entries
instead of thousands, each way.

Request kinds, by (session id, epoch):

* ``(0, 0)``: full, "open a session"; ``(id, 0)``: full, "close session ``id`` and open another";
  the answer gives the new session's id (0 if the broker keeps none: the next request is full
  again). A full request names every partition, in the order the broker is to read them.
* ``(id, epoch)`` with ``epoch >= 1``: incremental; the broker checks the epoch is the one it
  expects (the previous answered request's plus one), applies the changes, and answers.
* ``(id or 0, -1)``: sessionless (closing ``id`` if given).

Invariant SAME-OFFSETS: after every answered request, :attr:`FetchSession.held` is what the broker
holds; a partition is left out of a request only if its parameters equal the held ones, so the
broker reads every partition from exactly the offset the caller asked for. When that is in doubt
(no answer, or a session error), the next request is full: nothing is read from a stale offset.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from itertools import compress
from operator import is_not
from typing import Any, TypeVar

from mm2py.protocol.errors_codes import NONE
from mm2py.protocol.types import TopicPartition

NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
SESSION_ERRORS = frozenset({FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
                            FETCH_SESSION_TOPIC_ID_ERROR})

#: (fetch offset, partition max bytes, current leader epoch): what a request says about a partition
Params = tuple[int, int, int]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Any)


def changed_keys(new: Mapping[K, V], old: Mapping[K, V]) -> list[K] | None:
    """The keys whose values differ, when both mappings have the same keys in the same order
    (``None`` otherwise). Compared at C speed: a request of thousands of partitions of which a few
    moved. Dicts copied from one another keep their order, and their keys and unchanged values
    are the same objects: a list comparison passes those without calling ``__eq__``, and only
    values that are other objects are compared by value."""
    if len(new) != len(old) or list(new) != list(old):
        return None
    other = list(compress(new, map(is_not, new.values(), old.values())))
    return [k for k in other if new[k] != old[k]] if other else other


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wraps to 1: 0 opens a session, -1 is sessionless)."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What one Fetch request of a session says (the caller encodes it)."""

    session_id: int
    epoch: int
    #: partitions to name, in order: all of them for a full request, the changed ones otherwise
    send: list[tuple[TopicPartition, Params]]
    #: partitions the broker is to drop from the session
    forget: list[TopicPartition]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


@dataclass(slots=True)
class _Pending:
    request: SessionRequest
    wanted: dict[TopicPartition, Params]
    topic_ids: dict[str, uuid.UUID | None]


@dataclass
class FetchSession:
    """One fetch session with one broker. Requests alternate with their outcomes:
    :meth:`request`, then :meth:`answered` or :meth:`failed`, one at a time."""

    session_id: int = NO_SESSION
    #: the epoch of the next request
    epoch: int = INITIAL_EPOCH
    #: each partition's parameters as the broker holds them (SAME-OFFSETS)
    held: dict[TopicPartition, Params] = field(default_factory=dict)
    #: topic ids the held partitions were named by (a topic recreated under its name: new id)
    topic_ids: dict[str, uuid.UUID | None] = field(default_factory=dict)
    #: whether the session's requests name topics by id (Fetch v13+); the broker refuses a switch
    by_id: bool | None = None
    full_requests: int = 0
    incremental_requests: int = 0
    #: session errors and unanswered requests, each followed by a full request
    resets: int = 0
    _pending: _Pending | None = None

    @property
    def busy(self) -> bool:
        """A request is out and its outcome not yet known."""
        return self._pending is not None

    def request(
        self,
        wanted: Mapping[TopicPartition, Params],
        topic_ids: Mapping[str, uuid.UUID | None],
        *,
        by_id: bool,
        full: bool = False,
        moved: tuple[Mapping[TopicPartition, Params], list[TopicPartition]] | None = None,
    ) -> SessionRequest:
        """The next request for ``wanted`` (in the order a full request should name them), whose
        topics have ``topic_ids`` (None: named by name); ``full`` asks for a full request (e.g. to
        change the order in which the broker reads the partitions). ``moved``: the keys of
        ``wanted`` whose values differ from a mapping with the same keys in the same order, which
        the caller compared already; used when that mapping is what the broker holds (the last
        request's ``wanted``, answered), instead of comparing again (thousands of partitions)."""
        if self._pending is not None:
            raise RuntimeError("a fetch session has one request out at a time")
        ids = dict(topic_ids)
        if (full or self.epoch == INITIAL_EPOCH or self.session_id == NO_SESSION or by_id != self.by_id
                or any(self.topic_ids.get(t, i) != i for t, i in ids.items())):
            req = SessionRequest(self.session_id, INITIAL_EPOCH, list(wanted.items()), [])
        else:
            held = self.held
            changed = moved[1] if moved is not None and moved[0] is held else changed_keys(wanted, held)
            if changed is not None:
                send = [(tp, wanted[tp]) for tp in changed]
            else:
                send = [(tp, p) for tp, p in wanted.items() if held.get(tp) != p]
            added = sum(1 for tp, _ in send if tp not in held)
            # some held partition is not wanted any more exactly when there are more than wanted
            forget = [tp for tp in held if tp not in wanted] if len(held) + added > len(wanted) else []
            req = SessionRequest(self.session_id, self.epoch, send, forget)
        # kept as it is when it is a dict (the caller hands a new one to every request and does
        # not change it afterwards): its identity tells the next request's ``moved`` it applies
        self._pending = _Pending(req, wanted if type(wanted) is dict else dict(wanted), ids)
        self.by_id = by_id
        return req

    def answered(self, error_code: int, session_id: int) -> bool:
        """The broker answered the request with these top-level fields. True: its partitions are
        the answer; False: a session error (no partitions), the next request is full."""
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("no fetch session request is out")
        if error_code != NONE:
            self._reset(keep_id=error_code != FETCH_SESSION_ID_NOT_FOUND)
            return False
        if pending.request.full:
            self.full_requests += 1
        else:
            self.incremental_requests += 1
        if session_id == NO_SESSION or (not pending.request.full and session_id != self.session_id):
            # no session kept (a full request the broker would not cache, or an incremental one
            # that left the session empty): the next request is full and asks for one again
            self.session_id, self.epoch = NO_SESSION, INITIAL_EPOCH
            self.held, self.topic_ids = {}, {}
            return True
        self.session_id = session_id
        self.epoch = next_epoch(pending.request.epoch)
        self.held = pending.wanted
        self.topic_ids = pending.topic_ids
        return True

    def failed(self) -> None:
        """The request got no answer: whether the broker applied it is unknown."""
        self._pending = None
        self._reset(keep_id=True)

    def _reset(self, keep_id: bool) -> None:
        self.resets += 1
        if not keep_id:
            self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH  # a full request; with the old id it also closes that session
        self.held, self.topic_ids = {}, {}

    def close(self) -> SessionRequest | None:
        """The request that closes the session (sessionless, no partitions), if there is one."""
        if self.session_id == NO_SESSION:
            return None
        req = SessionRequest(self.session_id, FINAL_EPOCH, [], [])
        self.session_id, self.epoch, self.held, self.topic_ids = NO_SESSION, INITIAL_EPOCH, {}, {}
        return req
