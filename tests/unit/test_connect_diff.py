"""The Connect differential test's comparison (tests/support/connect_diff.py): it must see what differs
and nothing else, or the differential test could pass over a real difference or fail on noise."""

from __future__ import annotations

from tests.support.connect_diff import Allowance, Exchange, differences, shape, table


def _diff(connect: object, mm2py: object, keyed: bool = False) -> list[str]:
    return differences(shape(connect, keyed), shape(mm2py, keyed))


def test_equal_shapes_with_other_values_and_list_lengths_agree() -> None:
    connect = {"name": "src", "tasks": [{"id": 0, "state": "RUNNING"}, {"id": 1, "state": "FAILED"}],
               "connector": {"worker_id": "a:1", "version": "4.1.1"}}
    mm2py = {"name": "other", "tasks": [{"id": 3, "state": "PAUSED"}],
             "connector": {"worker_id": "b:2", "version": "0.1.0"}}
    assert _diff(connect, mm2py) == []
    assert _diff({"tasks": []}, {"tasks": [{"id": 0}]}) == []  # no element to compare with
    assert _diff({"n": 1}, {"n": 2.5}) == []  # both numbers


def test_missing_keys_and_other_types_are_named_by_their_path() -> None:
    connect = {"connector": {"state": "RUNNING", "trace": "x"}, "tasks": [{"id": 0, "version": "4"}]}
    mm2py = {"connector": {"state": "RUNNING", "extra": True}, "tasks": [{"id": "0", "version": None}]}
    assert _diff(connect, mm2py) == [
        "$.connector: keys only in Connect: trace",
        "$.connector: keys only in mm2py: extra",
        "$.tasks[].id: Connect number, mm2py string",
        "$.tasks[].version: Connect string, mm2py null",
    ]
    assert _diff([], {}) == ["$: Connect array, mm2py object"]


def test_list_elements_are_merged_before_comparing() -> None:
    # one side's elements with and without a key, or of two types: the same merged shape
    connect = [{"default": None}, {"default": "1", "doc": "x"}]
    mm2py = [{"default": "2", "doc": "y"}, {"default": None}]
    assert _diff(connect, mm2py) == []
    assert _diff([{"default": None}], [{"default": "2"}]) == ["$[].default: Connect null, mm2py string"]


def test_a_map_keyed_by_names_compares_its_values() -> None:
    connect = {"org.apache.kafka": {"level": "INFO", "last_modified": None}}
    mm2py = {"mm2py.engine": {"level": "DEBUG", "last_modified": None}}
    assert _diff(connect, mm2py, keyed=True) == []
    assert _diff(connect, mm2py) == ["$: keys only in Connect: org.apache.kafka",
                                     "$: keys only in mm2py: mm2py.engine"]


def test_a_difference_is_allowed_only_on_the_calls_and_for_the_difference_its_allowance_names() -> None:
    allowed = [Allowance(r"create: malformed JSON", r"status: Connect 500, mm2py 400", "Jackson")]
    same_call = Exchange("create: malformed JSON", "POST /connectors", 500, 400, {}, {})
    other_call = Exchange("create: no config", "POST /connectors", 500, 400, {}, {})
    other_status = Exchange("create: malformed JSON", "POST /connectors", 500, 409, {}, {})
    waited = Exchange("status", "GET /connectors/a/status", 200, 200, {}, {}, waited_out=["mm2py"])
    for ex in (same_call, other_call, other_status, waited):
        ex.judge(allowed)
    assert same_call.unexplained == [] and len(same_call.allowed) == 1
    assert other_call.unexplained == ["status: Connect 500, mm2py 400"]
    assert other_status.unexplained == ["status: Connect 500, mm2py 409"]
    assert waited.unexplained == ["mm2py: the awaited state did not show in time"]
    report = table([same_call, other_call])
    assert "allowed: status: Connect 500, mm2py 400 (Jackson)" in report
    assert "DIFFERS: status: Connect 500, mm2py 400" in report
    assert report.count("POST /connectors") == 2
