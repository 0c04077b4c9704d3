"""The Spark runtime's pure parts: round planning, folding results, session settings."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest

import mm2py
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.task_contract import TaskMetrics
from mm2py.protocol.types import TopicPartition as TP
from mm2py.runtime.spark.driver.round_plan import plan_round
from mm2py.runtime.spark.driver.session import default_master, job_error, runs_here, session_conf
from mm2py.runtime.spark.driver.worker import SparkTask
from mm2py.runtime.spark.executor.round import RoundResult, RoundWork, reached, run_round

A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


def _flow() -> FlowConfig:
    config = MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"},
        "flows": {"east->west": {"topics": "a|b", "tasks.max": 2}},
    })
    return config.enabled_flows()[0]


def test_reached_needs_every_bounded_partition_at_or_past_its_end() -> None:
    assert reached({A0: 5, A1: 7}, {A0: 5, A1: 6})
    assert not reached({A0: 4, A1: 7}, {A0: 5, A1: 6})
    assert not reached({A1: 7}, {A0: 0, A1: 6})  # a partition not taken yet has not reached anything
    assert reached({}, {})


def test_a_round_ships_tasks_with_unknown_or_stale_positions_only() -> None:
    flow = _flow()
    assignment = {0: [A0, A1], 1: [B0], 2: []}
    ends = {A0: 10, A1: 20, B0: 30}
    # first round: nothing known, every task with partitions goes
    first = plan_round(flow, assignment, ends, {}, budget=5)
    assert [(w.spec.task_id, w.spec.partitions, dict(w.until)) for w in first] == [
        (0, (A0, A1), {A0: 10, A1: 20}), (1, (B0,), {B0: 30}),
    ]
    assert all(w.budget == 5 and w.spec.flow is flow and w.spec.start_positions is None for w in first)
    # caught up: nothing to do
    assert plan_round(flow, assignment, ends, {A0: 10, A1: 20, B0: 30}, budget=5) == []
    # one partition behind: only its task goes, with all of its partitions
    again = plan_round(flow, assignment, ends, {A0: 10, A1: 19, B0: 30}, budget=5)
    assert [(w.spec.task_id, w.spec.partitions) for w in again] == [(0, (A0, A1))]
    partly = plan_round(flow, assignment, ends, {A0: 10, B0: 30}, budget=5)
    assert [w.spec.task_id for w in partly] == [0]
    # a position past the end (source log truncated or recreated): the task goes, bounded past its
    # position, so it fetches there and meets the source's reset
    past = plan_round(flow, assignment, ends, {A0: 10, A1: 20, B0: 31}, budget=5)
    assert [(w.spec.task_id, dict(w.until)) for w in past] == [(1, {B0: 32})]
    # a task backing off after failures waits
    assert [w.spec.task_id for w in plan_round(flow, assignment, ends, {}, budget=5, hold={0})] == [1]


def test_round_work_and_results_are_plain_picklable_data() -> None:
    work = plan_round(_flow(), {0: [A0]}, {A0: 3}, {}, budget=2, commit_interval=0.5)[0]
    again = pickle.loads(pickle.dumps(work))
    assert again == work and again.flow == "east->west" and again.commit_interval == 0.5
    result = RoundResult("east->west", 0, (A0,), {A0: 3}, TaskMetrics(records=3, lag={A0: 0}), True)
    assert pickle.loads(pickle.dumps(result)) == result


def test_a_round_that_cannot_start_reports_the_error_instead_of_raising() -> None:
    flow = _flow()
    bad = flow.model_copy(update={"client_overrides": {"consumer": {"isolation.level": "bogus"}}})
    work = plan_round(bad, {0: [A0]}, {A0: 3}, {}, budget=2)[0]
    result = run_round(work)
    assert result.error is not None and "isolation.level" in result.error
    assert result.positions == {} and not result.complete
    assert (result.flow, result.task_id, result.partitions) == ("east->west", 0, (A0,))


def _result(records: int, error: str | None = None, lag: int = 0) -> RoundResult:
    metrics = TaskMetrics(batches=1, records=records, bytes=records * 10, syncs=1, commits=1, lag={A0: lag})
    return RoundResult("east->west", 0, (A0,), {} if error else {A0: records}, metrics, error is None, error)


def test_a_task_adds_up_its_rounds_and_keeps_the_last_error_until_a_round_succeeds() -> None:
    task = SparkTask(0, (A0,))
    task.absorb(_result(100, lag=5), now=0)
    task.absorb(_result(50, lag=0), now=1)
    assert (task.state, task.trace, task.rounds) == ("RUNNING", None, 2)
    m = task.metrics
    assert (m.records, m.bytes, m.batches, m.syncs) == (150, 1500, 2, 2)
    assert task.metrics.lag == {A0: 0}
    task.absorb(_result(0, "SourceError: boom"), now=10)
    assert (task.state, task.trace, task.failed_rounds) == ("FAILED", "SourceError: boom", 1)
    assert task.retry_at == 10.5
    task.absorb(_result(0, "SourceError: boom"), now=11)
    assert task.retry_at == 12.0  # backs off, doubling
    task.absorb(_result(10), now=13)
    assert (task.state, task.trace, task.consecutive_failures) == ("RUNNING", None, 0)


def test_session_settings_are_quiet_local_and_never_speculative() -> None:
    conf = session_conf("local[3]", {"spark.task.maxFailures": "2"})
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.ui.enabled"] == "false" and conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.speculation"] == "false"
    assert conf["spark.task.maxFailures"] == "2"  # the caller's setting wins over a default
    assert conf["spark.pyspark.python"] == sys.executable  # local executors: this interpreter
    remote = session_conf("spark://somewhere:7077")
    assert "spark.pyspark.python" not in remote and "spark.executorEnv.PYTHONPATH" not in remote
    with pytest.raises(ValueError, match=r"spark\.speculation"):
        session_conf("local[2]", {"spark.speculation": "true"})
    assert default_master(3) == "local[3]" and default_master(0) == "local[1]"


def test_a_standalone_master_on_loopback_gets_this_interpreter_and_checkout() -> None:
    for here in ("local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077",
                 "spark://127.0.0.1:7077,localhost:7078"):
        assert runs_here(here), here
    for elsewhere in ("spark://10.0.0.5:7077", "spark://127.0.0.1:7077,db1:7077", "yarn", "k8s://x"):
        assert not runs_here(elsewhere), elsewhere
    conf = session_conf("spark://127.0.0.1:7077")
    assert conf["spark.pyspark.python"] == sys.executable
    root = str(Path(mm2py.__file__).resolve().parent.parent)
    assert conf["spark.executorEnv.PYTHONPATH"].split(os.pathsep)[0] == root
    assert conf["spark.driver.host"] == "127.0.0.1"


def test_round_work_names_its_flow() -> None:
    work = RoundWork(plan_round(_flow(), {0: [A0]}, {A0: 1}, {}, budget=1)[0].spec, {A0: 1})
    assert work.flow == "east->west" and work.budget == 10.0


def test_a_failed_spark_job_is_told_in_one_line() -> None:
    text = ("An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 "
            "failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 (TID 0) (localhost executor "
            "driver): org.apache.spark.SparkException: Python worker exited unexpectedly (crashed).\n"
            "\tat org.apache.spark.api.python.BasePythonRunner...\n")
    assert job_error(RuntimeError(text)) == (
        "Lost task 0.0 in stage 0.0 (TID 0) (localhost executor driver): "
        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed).")
    assert job_error(ConnectionError("gateway gone\nmore")) == "ConnectionError: gateway gone"


def test_the_prometheus_collector_reads_spark_tasks_like_in_process_ones() -> None:
    from types import SimpleNamespace

    from mm2py.runtime.metrics import WorkerCollector

    task = SparkTask(0, (A0,))
    task.absorb(_result(100, lag=7), now=0)
    worker = SimpleNamespace(flows={"east->west": SimpleNamespace(tasks={0: task}, checkpoints=None)},
                             codec_operations=lambda: (3, 1))  # executors' codec work included
    samples = {(m.name, s.name): s.value for m in WorkerCollector(worker).collect()  # type: ignore[arg-type]
               for s in m.samples}
    assert samples[("mm2py_task_records", "mm2py_task_records_total")] == 100
    assert samples[("mm2py_task_running", "mm2py_task_running")] == 1
    assert samples[("mm2py_partition_lag_records", "mm2py_partition_lag_records")] == 7
    codec = {s.labels["operation"]: s.value for m in WorkerCollector(worker).collect()  # type: ignore[arg-type]
             if m.name == "mm2py_codec_operations" for s in m.samples if s.name.endswith("_total")}
    assert codec == {"decompress": 3, "compress": 1}
