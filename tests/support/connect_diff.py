"""The comparison of the Kafka Connect differential test (pure): JSON shapes, allowed differences,
the table of calls.

A body's *shape* is its JSON types, recursively: an object's keys and the shapes of their values, an
array's elements merged into one shape (so lists of different lengths compare by what their
elements look like). Where a body is a map keyed by names the two sides name differently (the
loggers), its values are compared the same way, as an array's elements. Two shapes differ where
their types differ or an object has keys the other's lacks; each difference is one line naming the
JSON path (``$.tasks[].state``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Allowance", "Exchange", "Shape", "differences", "shape", "table"]


@dataclass
class Shape:
    """The merged JSON types of one or more values."""

    types: set[str] = field(default_factory=set)
    keys: dict[str, Shape] = field(default_factory=dict)  # an object's (the union over objects)
    items: Shape | None = None  # an array's elements, merged; None while no element was seen

    def merge(self, other: Shape) -> Shape:
        self.types |= other.types
        for key, sub in other.keys.items():
            self.keys[key] = self.keys[key].merge(sub) if key in self.keys else sub
        if other.items is not None:
            self.items = other.items if self.items is None else self.items.merge(other.items)
        return self


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def shape(value: Any, keyed: bool = False) -> Shape:
    """The shape of a JSON value; ``keyed``: an object whose keys are names (shaped like an array)."""
    if isinstance(value, dict) and keyed:
        value = list(value.values())
    out = Shape({_type(value)})
    if isinstance(value, dict):
        out.keys = {k: shape(v) for k, v in value.items()}
    elif isinstance(value, list):
        for item in value:
            out.items = shape(item) if out.items is None else out.items.merge(shape(item))
    return out


def differences(connect: Shape, mm2py: Shape, path: str = "$") -> list[str]:
    """Where the two shapes differ, one line each."""
    out = []
    if connect.types != mm2py.types:
        types = ["|".join(sorted(s.types)) for s in (connect, mm2py)]
        out.append(f"{path}: Connect {types[0]}, mm2py {types[1]}")
    if "object" in connect.types and "object" in mm2py.types:
        only_connect = sorted(set(connect.keys) - set(mm2py.keys))
        only_mm2py = sorted(set(mm2py.keys) - set(connect.keys))
        if only_connect:
            out.append(f"{path}: keys only in Connect: {', '.join(only_connect)}")
        if only_mm2py:
            out.append(f"{path}: keys only in mm2py: {', '.join(only_mm2py)}")
        for key in sorted(set(connect.keys) & set(mm2py.keys)):
            out += differences(connect.keys[key], mm2py.keys[key], f"{path}.{key}")
    if connect.items is not None and mm2py.items is not None:
        out += differences(connect.items, mm2py.items, f"{path}[]")
    return out


@dataclass(frozen=True)
class Allowance:
    """A difference that is acceptable: on the calls ``call`` matches (a regular expression on the
    call's label), the differences ``difference`` matches; ``why`` says why."""

    call: str
    difference: str
    why: str

    def covers(self, label: str, difference: str) -> bool:
        return (re.fullmatch(self.call, label) is not None
                and re.search(self.difference, difference) is not None)


@dataclass
class Exchange:
    """One call sent to both: its label, what was sent, both answers."""

    label: str
    request: str
    connect_status: int
    mm2py_status: int
    connect_body: Any
    mm2py_body: Any
    keyed: bool = False
    seconds: float = 0.0  # how long both answers took (polls included)
    #: the sides whose answer never showed what the call waited for
    waited_out: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # every difference
    allowed: list[tuple[str, Allowance]] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)

    def judge(self, allowances: list[Allowance]) -> None:
        self.found = [f"{side}: the awaited state did not show in time" for side in self.waited_out]
        if self.connect_status != self.mm2py_status:
            self.found.append(f"status: Connect {self.connect_status}, mm2py {self.mm2py_status}")
        elif self.connect_status < 300 or self.connect_status >= 400:
            self.found += differences(shape(self.connect_body, self.keyed),
                                      shape(self.mm2py_body, self.keyed))
        for diff in self.found:
            allowance = next((a for a in allowances if a.covers(self.label, diff)), None)
            if allowance is None:
                self.unexplained.append(diff)
            else:
                self.allowed.append((diff, allowance))


def _cut(body: Any, width: int = 160) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return text if len(text) <= width else text[:width] + "..."


def table(exchanges: list[Exchange]) -> str:
    """Every call with both statuses and its verdict; differences (allowed ones with their
    reason, unexplained ones with both bodies) under it."""
    lines = [f"{'#':>3}  {'call':<44} {'request':<62} Connect mm2py  {'s':>5}  verdict"]
    for i, ex in enumerate(exchanges, 1):
        verdict = "DIFFERS" if ex.unexplained else ("allowed" if ex.allowed else "same")
        lines.append(f"{i:>3}  {ex.label:<44} {ex.request:<62} {ex.connect_status:>7} {ex.mm2py_status:>5}"
                     f"  {ex.seconds:5.1f}  {verdict}")
        for diff, allowance in ex.allowed:
            lines.append(f"       allowed: {diff} ({allowance.why})")
        for diff in ex.unexplained:
            lines.append(f"       DIFFERS: {diff}")
        if ex.unexplained:
            lines.append(f"         Connect: {_cut(ex.connect_body)}")
            lines.append(f"         mm2py:   {_cut(ex.mm2py_body)}")
    return "\n".join(lines)
