"""mm2py's ``/connectors`` facade against Apache Kafka's own Kafka Connect 4.1.1 distributed worker.

One Connect worker (``tests.support.connect_worker``: ``ConnectDistributed`` with the real
Mirror connectors, its topics on ``west``) and one in-process mm2py worker with its REST API are
sent the same sequence of Connect REST calls, the calls that scripts and tools written for Connect
make: worker info, plugins, validation, create (KIP-980 ``initial_state`` too), config (PUT and
KIP-477 PATCH), status, tasks, KIP-558 topics, pause/resume/stop (each polled until the state shows
on both sides, as Connect changes state asynchronously), KIP-875 offsets, restarts, the checkpoint
and heartbeat connectors, ``/admin/loggers``, deletes, trailing slashes, and the error cases. Both
mirror the same ``east`` topic to ``west`` with the same connector configs, under aliases of their
own (so neither writes into the other's topics). Status codes and JSON shapes
(:mod:`connect_diff`) must agree, except for the differences listed in ``ALLOWED`` with their
reason. The table of every call with both status codes is printed (``-s``) and is the failure
message.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mm2py.kafka_local import KafkaCluster
from mm2py.rest_api.security.settings import BASIC_AUTH_EXTENSION, rest_settings
from tests.support.brokers import (
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    served_worker,
    unique,
)
from tests.support.connect_diff import Allowance, Exchange, table
from tests.support.connect_worker import ConnectWorker
from tests.support.rest_security import Pki, client_context, connect_basic_auth_files

pytestmark = pytest.mark.timeout(420)

MIRROR = "org.apache.kafka.connect.mirror."
#: how long one call is repeated until both sides show the state it waits for
POLL_SECONDS = 60.0
#: how long a call is tried again while Connect answers that its group is rebalancing
REBALANCE_SECONDS = 30.0

#: Differences that are acceptable, each with its reason; everything else must agree.
ALLOWED = [
    Allowance(r"create: (malformed JSON|bad initial_state|no config)|validate: no connector\.class",
              r"status: Connect 500, mm2py 400",
              "Connect answers these bad requests with a 500 (an exception escaping its resource: Jackson's "
              "for a body it cannot read, a NullPointerException for a missing config, a wrapped "
              "BadRequestException for a missing connector.class), mm2py with a 400"),
    Allowance(r".*tasks(: list)?", r"\$\[\]\.config: keys only in Connect: task\.",
              "Connect adds its own keys to each task's config (task.class, the task's partitions)"),
    Allowance(r"restart only failed", r"\.version: Connect null(\|string)?, mm2py string",
              "Connect's answer can show statuses its previous restart rewrote, which carry no version "
              "yet (a moment after that restart, its status showed every version); mm2py's restart is over "
              "when it answers"),
]


@dataclass
class Side:
    """One of the two workers and the names the test uses on it."""

    name: str
    http: httpx.Client
    source: str  # the source cluster's alias in its connector configs
    target: str
    other_source: str  # the alias of a second pair (the KIP-980 connector)
    east: str
    west: str
    topic: str
    logger: str  # a logger namespace of the worker (KIP-495 calls)

    def source_config(self, **extra: str) -> dict[str, str]:
        return {"connector.class": MIRROR + "MirrorSourceConnector", "source.cluster.alias": self.source,
                "target.cluster.alias": self.target, "source.cluster.bootstrap.servers": self.east,
                "target.cluster.bootstrap.servers": self.west, "topics": self.topic, "tasks.max": "1",
                "replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
                "sync.topic.acls.enabled": "false", **extra}

    def other_config(self, connector: str, **extra: str) -> dict[str, str]:
        base = self.source_config(**extra)
        for key in ("topics", "replication.factor", "sync.topic.acls.enabled"):
            base.pop(key)
        return {**base, "connector.class": MIRROR + connector}


@dataclass
class Call:
    """One REST call; ``until``: repeated (bounded) until its answer shows what it waits for."""

    label: str
    method: str
    path: str
    body: Any = None
    params: dict[str, str] = field(default_factory=dict)
    raw: str | None = None  # a body sent as it is (not JSON-encoded)
    until: Callable[[httpx.Response], bool] | None = None
    keyed: bool = False  # the answer is a map keyed by names that differ between the two sides
    rebalance_seconds: float = REBALANCE_SECONDS

    def send(self, http: httpx.Client) -> tuple[httpx.Response, bool]:
        """The answer, and whether it shows what the call waits for (if anything)."""
        deadline = time.monotonic() + POLL_SECONDS
        settled = time.monotonic() + self.rebalance_seconds
        while True:
            if self.raw is not None:
                r = http.request(self.method, self.path, params=self.params, content=self.raw,
                                 headers={"content-type": "application/json"})
            else:
                r = http.request(self.method, self.path, params=self.params, json=self.body)
            if _rebalancing(r) and time.monotonic() < settled:
                time.sleep(0.25)  # Connect's answer while its group rebalances: clients try again
                continue
            if self.until is None or self.until(r):
                return r, True
            if time.monotonic() > deadline:
                return r, False
            time.sleep(0.25)


def _json(r: httpx.Response) -> Any:
    try:
        return r.json() if r.content else None
    except json.JSONDecodeError:
        return r.text


def _rebalancing(r: httpx.Response) -> bool:
    """Connect's 409 while its group rebalances (after a connector starts or stops), which it asks
    clients to retry."""
    body = _json(r)
    return r.status_code == 409 and isinstance(body, dict) and "rebalance" in str(body.get("message"))


def _state(*states: str, tasks: bool = True) -> Callable[[httpx.Response], bool]:
    """A status answer whose connector is in one of ``states`` and whose tasks (present unless
    ``tasks`` is False) are in the same state."""
    def shows(r: httpx.Response) -> bool:
        body = _json(r)
        if r.status_code != 200 or not isinstance(body, dict) or body["connector"]["state"] not in states:
            return False
        if not tasks:
            return body["tasks"] == []
        return bool(body["tasks"]) and all(t["state"] == body["connector"]["state"] for t in body["tasks"])
    return shows


def _connector(state: str) -> Callable[[httpx.Response], bool]:
    """A status answer whose connector (tasks aside) is in ``state``."""
    return lambda r: r.status_code == 200 and (_json(r) or {}).get("connector", {}).get("state") == state


def _answered(status: int = 200) -> Callable[[httpx.Response], bool]:
    return lambda r: r.status_code == status


def _lists(*names: str, exactly: bool = False) -> Callable[[httpx.Response], bool]:
    def shows(r: httpx.Response) -> bool:
        listed = set(_json(r) or [])
        return listed == set(names) if exactly else set(names) <= listed
    return shows


def _non_empty(*path: str) -> Callable[[httpx.Response], bool]:
    def shows(r: httpx.Response) -> bool:
        body = _json(r)
        for key in path:
            if not isinstance(body, dict):
                return False
            body = body.get(key)
        return bool(body)
    return shows


def _discovery(s: Side) -> list[Call]:
    """What a tool asks first: the worker, its plugins, their configs, validation."""
    good = {**s.source_config(), "name": "src"}
    return [
        Call("worker info", "GET", "/"),
        Call("list connectors (none)", "GET", "/connectors"),
        Call("list connectors, trailing slash", "GET", "/connectors/"),
        Call("connector plugins", "GET", "/connector-plugins"),
        Call("connector plugins, all", "GET", "/connector-plugins", params={"connectorsOnly": "false"}),
        Call("plugins, trailing slash", "GET", "/connector-plugins/"),
        Call("plugin config: source", "GET", "/connector-plugins/MirrorSourceConnector/config"),
        Call("plugin config: checkpoint", "GET",
             f"/connector-plugins/{MIRROR}MirrorCheckpointConnector/config"),
        Call("plugin config: heartbeat alias", "GET", "/connector-plugins/MirrorHeartbeat/config"),
        Call("plugin config: unknown plugin", "GET", "/connector-plugins/NoSuchConnector/config"),
        Call("validate: valid config", "PUT", "/connector-plugins/MirrorSourceConnector/config/validate",
             good),
        Call("validate: tasks.max 0", "PUT", "/connector-plugins/MirrorSourceConnector/config/validate",
             {**good, "tasks.max": "0"}),
        Call("validate: no connector.class", "PUT",
             "/connector-plugins/MirrorSourceConnector/config/validate",
             {k: v for k, v in good.items() if k != "connector.class"}),
        Call("method not allowed", "DELETE", "/connector-plugins"),
        Call("unknown route", "GET", "/connectors/src/nothing"),
    ]


def _unknown(s: Side) -> list[Call]:
    """The error answers for a connector that does not exist, and bad requests."""
    return [
        Call("unknown: info", "GET", "/connectors/nobody"),
        Call("unknown: config", "GET", "/connectors/nobody/config"),
        Call("unknown: status", "GET", "/connectors/nobody/status"),
        Call("unknown: task status", "GET", "/connectors/nobody/tasks/0/status"),
        Call("unknown: topics", "GET", "/connectors/nobody/topics"),
        Call("unknown: offsets", "GET", "/connectors/nobody/offsets"),
        Call("unknown: pause", "PUT", "/connectors/nobody/pause"),
        Call("unknown: resume", "PUT", "/connectors/nobody/resume"),
        Call("unknown: stop", "PUT", "/connectors/nobody/stop"),
        Call("unknown: restart", "POST", "/connectors/nobody/restart"),
        Call("unknown: patch config", "PATCH", "/connectors/nobody/config", {"tasks.max": "2"}),
        Call("unknown: delete", "DELETE", "/connectors/nobody"),
        Call("create: malformed JSON", "POST", "/connectors", raw='{"name": "x", "config": {'),
        Call("create: invalid config", "POST", "/connectors",
             {"name": "bad", "config": s.source_config(**{"tasks.max": "0"})}),
        Call("create: no config", "POST", "/connectors", {"name": "bad"}),
    ]


def _source_lifecycle(s: Side) -> list[Call]:
    """Create the MirrorSourceConnector, read it every way, its topics and offsets while running."""
    status = "/connectors/src/status"
    return [
        Call("create source connector", "POST", "/connectors", {"name": "src", "config": s.source_config()}),
        Call("status: running", "GET", status, until=_state("RUNNING")),
        Call("create: duplicate name", "POST", "/connectors", {"name": "src", "config": s.source_config()}),
        Call("list connectors", "GET", "/connectors"),
        Call("list connectors, expanded", "GET", "/connectors", params={"expand": "status"}),
        Call("list connectors, info", "GET", "/connectors", params={"expand": "info"}),
        Call("info", "GET", "/connectors/src"),
        Call("info, trailing slash", "GET", "/connectors/src/"),
        Call("config", "GET", "/connectors/src/config"),
        Call("tasks: list", "GET", "/connectors/src/tasks"),
        Call("task status", "GET", "/connectors/src/tasks/0/status"),
        Call("task status: no such task", "GET", "/connectors/src/tasks/7/status"),
        Call("task status: not a number", "GET", "/connectors/src/tasks/first/status"),
        Call("topics: the remote topic", "GET", "/connectors/src/topics", until=_non_empty("src", "topics")),
        Call("topics: reset", "PUT", "/connectors/src/topics/reset"),
        Call("offsets: running", "GET", "/connectors/src/offsets", until=_non_empty("offsets")),
        Call("offsets: alter while running", "PATCH", "/connectors/src/offsets", _offsets(s, 3)),
        Call("offsets: reset while running", "DELETE", "/connectors/src/offsets"),
        Call("config: put the same", "PUT", "/connectors/src/config", s.source_config()),
        Call("config: put with name", "PUT", "/connectors/src/config", {**s.source_config(), "name": "src"}),
        Call("config: put a different name", "PUT", "/connectors/src/config",
             {**s.source_config(), "name": "other"}),
        Call("config: patch", "PATCH", "/connectors/src/config", {"tasks.max": "2"}),
        Call("config: patch an invalid value", "PATCH", "/connectors/src/config", {"tasks.max": "0"}),
        Call("status after patch", "GET", status, until=_state("RUNNING")),
    ]


def _offsets(s: Side, last: int) -> dict[str, Any]:
    return {"offsets": [{"partition": {"cluster": s.source, "topic": s.topic, "partition": 0},
                         "offset": {"offset": last}}]}


def _state_changes(s: Side) -> list[Call]:
    """Pause, resume, restarts, stop, offsets while stopped, resume again."""
    status = "/connectors/src/status"
    return [
        Call("pause", "PUT", "/connectors/src/pause"),
        Call("status: paused", "GET", status, until=_state("PAUSED")),
        Call("pause again", "PUT", "/connectors/src/pause"),
        Call("resume", "PUT", "/connectors/src/resume"),
        Call("status: resumed", "GET", status, until=_state("RUNNING")),
        Call("restart", "POST", "/connectors/src/restart"),
        Call("status after restart", "GET", status, until=_state("RUNNING")),
        Call("restart with tasks", "POST", "/connectors/src/restart", params={"includeTasks": "true"}),
        Call("status after restart with tasks", "GET", status, until=_state("RUNNING")),
        Call("restart only failed", "POST", "/connectors/src/restart",
             params={"includeTasks": "true", "onlyFailed": "true"}),
        Call("restart a task", "POST", "/connectors/src/tasks/0/restart"),
        Call("restart: no such task", "POST", "/connectors/src/tasks/7/restart"),
        Call("status after task restart", "GET", status, until=_state("RUNNING")),
        Call("stop", "PUT", "/connectors/src/stop"),
        Call("status: stopped", "GET", status, until=_state("STOPPED", tasks=False)),
        Call("task status: stopped", "GET", "/connectors/src/tasks/0/status"),
        Call("tasks: stopped", "GET", "/connectors/src/tasks"),
        # Connect's answer here is always its 409 "no known leader URL, likely because a rebalance
        # was underway" (no worker owns the task of a stopped connector): not tried again
        Call("restart a task: stopped", "POST", "/connectors/src/tasks/0/restart", rebalance_seconds=0),
        Call("offsets: stopped", "GET", "/connectors/src/offsets", until=_non_empty("offsets")),
        Call("offsets: alter", "PATCH", "/connectors/src/offsets", _offsets(s, 3)),
        Call("offsets: altered", "GET", "/connectors/src/offsets"),
        Call("offsets: alter, no offsets", "PATCH", "/connectors/src/offsets", {"offsets": []}),
        Call("offsets: reset", "DELETE", "/connectors/src/offsets"),
        Call("offsets: after reset", "GET", "/connectors/src/offsets"),
        Call("resume after stop", "PUT", "/connectors/src/resume"),
        Call("status: running again", "GET", status, until=_state("RUNNING")),
    ]


def _companions(s: Side) -> list[Call]:
    """The checkpoint and heartbeat connectors, a second source connector, KIP-980 initial states."""
    later = {**s.source_config(), "source.cluster.alias": s.other_source}
    return [
        Call("create checkpoint connector", "POST", "/connectors",
             {"name": "cp", "config": s.other_config("MirrorCheckpointConnector",
                                                      **{"checkpoints.topic.replication.factor": "1"})}),
        Call("checkpoint status", "GET", "/connectors/cp/status", until=_non_empty("connector", "state")),
        Call("checkpoint info", "GET", "/connectors/cp"),
        Call("checkpoint topics", "GET", "/connectors/cp/topics"),
        Call("create heartbeat connector by PUT", "PUT", "/connectors/hb/config",
             s.other_config("MirrorHeartbeatConnector", **{"heartbeats.topic.replication.factor": "1",
                                                           "emit.heartbeats.interval.seconds": "1"})),
        Call("heartbeat status", "GET", "/connectors/hb/status", until=_state("RUNNING")),
        Call("heartbeat tasks", "GET", "/connectors/hb/tasks"),
        Call("heartbeat topics", "GET", "/connectors/hb/topics", until=_non_empty("hb", "topics")),
        Call("heartbeat topics reset", "PUT", "/connectors/hb/topics/reset"),
        Call("pause heartbeat connector", "PUT", "/connectors/hb/pause"),
        Call("heartbeat status: paused", "GET", "/connectors/hb/status", until=_state("PAUSED")),
        Call("resume heartbeat connector", "PUT", "/connectors/hb/resume"),
        Call("heartbeat status: resumed", "GET", "/connectors/hb/status", until=_state("RUNNING")),
        Call("restart heartbeat connector", "POST", "/connectors/hb/restart"),
        Call("restart heartbeat task", "POST", "/connectors/hb/tasks/0/restart"),
        Call("heartbeat status: restarted", "GET", "/connectors/hb/status", until=_state("RUNNING")),
        Call("stop checkpoint connector", "PUT", "/connectors/cp/stop"),
        Call("checkpoint status: stopped", "GET", "/connectors/cp/status",
             until=_state("STOPPED", tasks=False)),
        Call("resume checkpoint connector", "PUT", "/connectors/cp/resume"),
        Call("checkpoint status: resumed", "GET", "/connectors/cp/status", until=_connector("RUNNING")),
        Call("create heartbeat connector paused (KIP-980)", "POST", "/connectors",
             {"name": "hb2", "config": s.other_config("MirrorHeartbeatConnector", **{
                 "source.cluster.alias": s.other_source, "heartbeats.topic.replication.factor": "1"}),
              "initial_state": "PAUSED"}),
        Call("status: heartbeat created paused", "GET", "/connectors/hb2/status", until=_connector("PAUSED")),
        Call("delete heartbeat connector created paused", "DELETE", "/connectors/hb2"),
        # a second MirrorSourceConnector of the pair, for other topics (mm2py refuses one that
        # would mirror a topic the first mirrors: README, "What still differs")
        Call("second source connector for the pair", "POST", "/connectors",
             {"name": "src2", "config": s.source_config(topics=f"{s.topic}-second", **{"tasks.max": "2"})}),
        Call("second source connector deleted", "DELETE", "/connectors/src2"),
        Call("create stopped (KIP-980)", "POST", "/connectors",
             {"name": "later", "config": later, "initial_state": "STOPPED"}),
        Call("status: created stopped", "GET", "/connectors/later/status",
             until=_state("STOPPED", tasks=False)),
        Call("resume the one created stopped", "PUT", "/connectors/later/resume"),
        Call("status: created stopped, resumed", "GET", "/connectors/later/status", until=_state("RUNNING")),
        Call("create: bad initial_state", "POST", "/connectors",
             {"name": "odd", "config": later, "initial_state": "SLEEPING"}),
        Call("list connectors, all", "GET", "/connectors", until=_lists("src", "cp", "hb", "later")),
        Call("list connectors, status and info", "GET", "/connectors",
             params={"expand": ["status", "info"]}),
    ]


def _loggers(s: Side) -> list[Call]:
    """KIP-495 log levels."""
    return [
        Call("loggers", "GET", "/admin/loggers", keyed=True),
        Call("logger: root", "GET", "/admin/loggers/root"),
        Call("logger: set DEBUG", "PUT", f"/admin/loggers/{s.logger}", {"level": "DEBUG"}),
        Call("logger: one", "GET", f"/admin/loggers/{s.logger}"),
        Call("logger: set INFO, cluster scope", "PUT", f"/admin/loggers/{s.logger}", {"level": "INFO"},
             params={"scope": "cluster"}),
        Call("logger: unknown level", "PUT", f"/admin/loggers/{s.logger}", {"level": "LOUD"}),
        Call("logger: no level", "PUT", f"/admin/loggers/{s.logger}", {"lvl": "INFO"}),
        Call("logger: unknown", "GET", "/admin/loggers/no.such.logger"),
    ]


def _teardown(s: Side) -> list[Call]:
    return [
        Call("delete checkpoint connector", "DELETE", "/connectors/cp"),
        Call("delete heartbeat connector", "DELETE", "/connectors/hb"),
        Call("delete the one created stopped", "DELETE", "/connectors/later"),
        Call("delete source connector", "DELETE", "/connectors/src"),
        Call("list connectors after deletes", "GET", "/connectors", until=_lists(exactly=True)),
        Call("deleted: status", "GET", "/connectors/src/status", until=_answered(404)),
        Call("deleted: topics", "GET", "/connectors/src/topics"),
    ]


def script(s: Side) -> list[Call]:
    """The whole sequence, as sent to one side."""
    return [*_discovery(s), *_unknown(s), *_source_lifecycle(s), *_state_changes(s), *_companions(s),
            *_loggers(s), *_teardown(s)]


@pytest.fixture
def mm2py_client(east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> Iterator[httpx.Client]:
    """An in-process mm2py worker with its REST API (no flow yet), the log levels it changes put
    back; secured as a Connect worker is (HTTPS, Connect's Basic extension and files), and a client
    that logs in. Connect's side runs without authentication: the answers must agree all the same."""
    levels = {n: logging.getLogger(n).level for n in ["mm2py", *logging.root.manager.loggerDict]
              if n.startswith("mm2py")}
    config = mirror_config({"west": west.bootstrap, "east": east.bootstrap}, {},
                           **{"emit.checkpoints.enabled": False, "emit.heartbeats.enabled": False})
    pki = Pki(tmp_path)
    jaas = connect_basic_auth_files(tmp_path, {"operator": "diff-pw-42"})
    rest = rest_settings(pki.https_keys(**{"rest.extension.classes": BASIC_AUTH_EXTENSION}),
                         kafka_opts=f"-Djava.security.auth.login.config={jaas}")
    try:
        login = ("operator", "diff-pw-42")
        with served_worker(config, rest) as url, httpx.Client(
                base_url=url, timeout=60, auth=login, verify=client_context(pki.ca)) as m:
            assert httpx.get(url + "/connectors", verify=client_context(pki.ca)).status_code == 401
            yield m
    finally:
        for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def test_the_connect_calls_get_connect_answers(
    east: KafkaCluster, west: KafkaCluster, connect_worker: ConnectWorker, mm2py_client: httpx.Client
) -> None:
    topic = create_topic(east.bootstrap, unique("diff"), partitions=2)
    produce_records(east.bootstrap, topic, make_records(20, tag="diff"))
    tag = unique("")[1:7]
    m = mm2py_client
    with httpx.Client(base_url=connect_worker.url, timeout=60) as c:
        common = {"east": east.bootstrap, "west": west.bootstrap, "topic": topic}
        connect = Side("Connect", c, f"ce{tag}", f"cw{tag}", f"cf{tag}",
                       logger="org.apache.kafka.connect.mirror", **common)
        mm2py = Side("mm2py", m, f"pe{tag}", f"pw{tag}", f"pf{tag}", logger="mm2py.engine", **common)
        exchanges = []
        for on_connect, on_mm2py in zip(script(connect), script(mm2py), strict=True):
            started = time.monotonic()
            (rc, shown_c), (rm, shown_m) = on_connect.send(c), on_mm2py.send(m)
            exchange = Exchange(on_connect.label, f"{on_connect.method} {rc.request.url.raw_path.decode()}",
                                rc.status_code, rm.status_code, _json(rc), _json(rm), keyed=on_connect.keyed,
                                waited_out=[n for n, shown in (("Connect", shown_c), ("mm2py", shown_m))
                                            if not shown], seconds=time.monotonic() - started)
            exchange.judge(ALLOWED)
            exchanges.append(exchange)
    report = table(exchanges)
    (connect_worker.workdir / "exchanges.json").write_text(json.dumps(
        [{"call": ex.label, "request": ex.request, "connect": [ex.connect_status, ex.connect_body],
          "mm2py": [ex.mm2py_status, ex.mm2py_body]} for ex in exchanges], indent=1))
    print("\n" + report)
    unexplained = [ex for ex in exchanges if ex.unexplained]
    assert not unexplained, f"{len(unexplained)} of {len(exchanges)} calls differ:\n{report}\n" \
                            f"Connect's log: {connect_worker.log_file}"
