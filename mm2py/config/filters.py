"""Topic, group and topic-config-property filters (MM2's Default*Filter semantics).

A filter is an immutable value built from configuration: to change filtering at runtime (e.g. from
the REST API) build a new filter and swap the reference; readers never see a half-updated one.

Pattern lists follow MM2: comma-separated (whitespace around commas ignored) or a sequence of
strings; each entry is a regular expression that must match the *whole* name; an empty list
matches nothing. A name is selected when it matches an include pattern and no exclude pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from mm2py.config.errors import ConfigError

__all__ = [
    "CONFIG_PROPERTIES_EXCLUDE_DEFAULT",
    "GROUPS_DEFAULT",
    "GROUPS_EXCLUDE_DEFAULT",
    "TOPICS_DEFAULT",
    "TOPICS_EXCLUDE_DEFAULT",
    "ConfigPropertyFilter",
    "GroupFilter",
    "PatternList",
    "PatternTuple",
    "TopicFilter",
    "split_list",
]

TOPICS_DEFAULT = ".*"
TOPICS_EXCLUDE_DEFAULT = r".*[\-\.]internal, .*\.replica, __.*"
GROUPS_DEFAULT = ".*"
GROUPS_EXCLUDE_DEFAULT = "console-consumer-.*, connect-.*, __.*"
CONFIG_PROPERTIES_EXCLUDE_DEFAULT = (
    r"follower\.replication\.throttled\.replicas, "
    r"leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, "
    r"message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, "
    r"min\.insync\.replicas"
)

_COMMA = re.compile(r"\s*,\s*")

PatternSource = str | Iterable[str]


def split_list(value: PatternSource) -> tuple[str, ...]:
    """Parse an MM2 LIST value: ``"a, b"`` or ``["a", "b"]``; blank entries are dropped."""
    items: Iterable[str]
    if isinstance(value, str):
        trimmed = value.strip()
        items = _COMMA.split(trimmed) if trimmed else ()
    else:
        items = [str(v).strip() for v in value]
    return tuple(item for item in items if item)


@dataclass(frozen=True)
class PatternList:
    """A list of full-match regular expressions, compiled once. Picklable, hashable."""

    patterns: tuple[str, ...]
    config_key: str | None = field(default=None, compare=False)
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = []
        for pattern in self.patterns:
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                where = f" in {self.config_key}" if self.config_key else ""
                raise ConfigError(
                    f"invalid regular expression {pattern!r}{where}: {exc}", self.config_key
                ) from None
        object.__setattr__(self, "_compiled", tuple(compiled))

    @classmethod
    def parse(cls, value: PatternSource, config_key: str | None = None) -> PatternList:
        return cls(split_list(value), config_key)

    def matches(self, name: str) -> bool:
        return any(p.fullmatch(name) for p in self._compiled)

    def __str__(self) -> str:
        """The MM2 config string form, e.g. ``"a.*, b"``."""
        return ", ".join(self.patterns)


def _patterns(value: PatternSource | PatternList, key: str) -> PatternList:
    return value if isinstance(value, PatternList) else PatternList.parse(value, key)


@dataclass(frozen=True)
class _IncludeExclude:
    include: PatternList
    exclude: PatternList

    def _selected(self, name: str) -> bool:
        return self.include.matches(name) and not self.exclude.matches(name)


@dataclass(frozen=True)
class TopicFilter(_IncludeExclude):
    """``topics`` / ``topics.exclude`` (MM2 DefaultTopicFilter)."""

    @classmethod
    def from_config(
        cls,
        topics: PatternSource | PatternList = TOPICS_DEFAULT,
        topics_exclude: PatternSource | PatternList = TOPICS_EXCLUDE_DEFAULT,
    ) -> TopicFilter:
        return cls(_patterns(topics, "topics"), _patterns(topics_exclude, "topics.exclude"))

    def should_replicate(self, topic: str) -> bool:
        return self._selected(topic)

    def with_patterns(
        self,
        topics: PatternSource | PatternList | None = None,
        topics_exclude: PatternSource | PatternList | None = None,
    ) -> TopicFilter:
        """A new filter with the given lists replaced (None keeps the current one)."""
        return TopicFilter(
            self.include if topics is None else _patterns(topics, "topics"),
            self.exclude if topics_exclude is None else _patterns(topics_exclude, "topics.exclude"),
        )

    def to_config(self) -> dict[str, str]:
        return {"topics": str(self.include), "topics.exclude": str(self.exclude)}


@dataclass(frozen=True)
class GroupFilter(_IncludeExclude):
    """``groups`` / ``groups.exclude`` (MM2 DefaultGroupFilter)."""

    @classmethod
    def from_config(
        cls,
        groups: PatternSource | PatternList = GROUPS_DEFAULT,
        groups_exclude: PatternSource | PatternList = GROUPS_EXCLUDE_DEFAULT,
    ) -> GroupFilter:
        return cls(_patterns(groups, "groups"), _patterns(groups_exclude, "groups.exclude"))

    def should_replicate(self, group: str) -> bool:
        return self._selected(group)

    def with_patterns(
        self,
        groups: PatternSource | PatternList | None = None,
        groups_exclude: PatternSource | PatternList | None = None,
    ) -> GroupFilter:
        """A new filter with the given lists replaced (None keeps the current one)."""
        return GroupFilter(
            self.include if groups is None else _patterns(groups, "groups"),
            self.exclude if groups_exclude is None else _patterns(groups_exclude, "groups.exclude"),
        )

    def to_config(self) -> dict[str, str]:
        return {"groups": str(self.include), "groups.exclude": str(self.exclude)}


@dataclass(frozen=True)
class ConfigPropertyFilter:
    """``config.properties.exclude`` and ``use.defaults.from`` (MM2 DefaultConfigPropertyFilter).

    ``use_defaults_from="target"`` (MM2's default) means properties left at their default on the
    source are not copied, so the target cluster's defaults apply.
    """

    exclude: PatternList
    use_defaults_from: Literal["source", "target"] = "target"

    def __post_init__(self) -> None:
        if self.use_defaults_from not in ("source", "target"):
            raise ConfigError(
                f"use.defaults.from must be 'source' or 'target', got {self.use_defaults_from!r}",
                "use.defaults.from",
            )

    @classmethod
    def from_config(
        cls,
        exclude: PatternSource | PatternList = CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
        use_defaults_from: Literal["source", "target"] = "target",
    ) -> ConfigPropertyFilter:
        return cls(_patterns(exclude, "config.properties.exclude"), use_defaults_from)

    def should_replicate(self, prop: str) -> bool:
        return not self.exclude.matches(prop)

    def should_replicate_source_default(self, prop: str) -> bool:
        return self.use_defaults_from == "source"

    def filter(self, configs: Sequence[str]) -> list[str]:
        """The property names (of ``configs``) that should be replicated, in order."""
        return [c for c in configs if self.should_replicate(c)]

    def to_config(self) -> dict[str, str]:
        return {
            "config.properties.exclude": str(self.exclude),
            "use.defaults.from": self.use_defaults_from,
        }


def _pattern_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, PatternList):
        return value.patterns
    if isinstance(value, str | list | tuple):
        return split_list(value)
    raise ValueError("expected a comma-separated string or a list of patterns")


#: a setting's patterns, given as MM2's comma-separated string, a list, or a PatternList
PatternTuple = Annotated[tuple[str, ...], BeforeValidator(_pattern_list)]
