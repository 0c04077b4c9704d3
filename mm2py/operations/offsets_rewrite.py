"""Offsets kept outside Kafka, moved to the other cluster of a flow: a JSON map, a Spark checkpoint.

What it is for: consumers that keep their own offsets — a Spark Structured Streaming query's
checkpoint, a service with a ``{topic: {partition: offset}}`` file or table — fail over (source →
target, ``forward``) or fail back (``back``) without re-reading or skipping a record. Each offset is
translated exactly by the flow's offset syncs and committed positions
(``mm2py/operations/translator.py``), and its topic renamed by the flow's replication policy
(``orders`` ↔ ``east.orders``). Nothing is guessed: an offset that cannot be translated exactly
fails the whole rewrite, naming it.

**Spark checkpoint.** The checkpoint is copied to a new directory (the original is never touched)
and, in the copy, the Kafka sources' offsets are rewritten (``mm2py/protocol/spark_offsets.py``):

* ``offsets/<N>`` of the latest batch and of the one before — what Spark reads when the query
  starts again (the next batch starts at the latest batch's offsets if ``commits/<N>`` exists, and
  batch N runs again from batch N-1's offsets otherwise): both must translate. Older batches are
  kept as far back as they translate; the first that does not, and those before it, are removed
  (Spark never reads them again);
* ``sources/<n>/0``, a Kafka source's initial offsets, read only for a query's first batch:
  rewritten, or removed when they cannot be translated;
* the ``.crc`` checksum files Hadoop's local file system keeps beside the rewritten files are removed
  (a stale checksum would fail the read; without one the file is read as it is).

Other sources' offsets, the commit log, the query id (``metadata``) and any state are copied as they
are. The query then runs on the other cluster with this checkpoint and ``subscribe`` naming the
topics there (``east.orders``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mm2py.engine.translation import Direction, TranslationError
from mm2py.operations.failover import FailoverError
from mm2py.operations.translator import FlowTranslator
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.spark_offsets import (
    OffsetLogEntry,
    decode_initial_offsets,
    decode_offset_log,
    encode_initial_offsets,
    encode_kafka_offsets,
    encode_offset_log,
    kafka_offsets,
)

__all__ = ["CheckpointRewrite", "RewriteError", "rewrite_json_map", "rewrite_spark_checkpoint"]


class RewriteError(FailoverError):
    """Offsets that cannot be rewritten: malformed input, or an offset that does not translate exactly."""


def _offsets_map(doc: Any) -> dict[str, dict[int, int]]:
    """``{topic: {partition: offset}}`` as parsed JSON, checked."""
    if not isinstance(doc, dict):
        raise RewriteError('expected a JSON object {"topic": {"partition": offset, ...}, ...}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise RewriteError(f'topic {topic!r}: expected an object {{"partition": offset}}, got {parts!r}')
        out[topic] = {}
        for p, offset in parts.items():
            if not (str(p).isdigit() and str(p).isascii()) or type(offset) is not int:
                raise RewriteError(f"topic {topic!r}: partition {p!r} -> {offset!r} is not "
                                   "a partition number and an integer offset")
            out[topic][int(p)] = offset
    return out


def rewrite_json_map(translator: FlowTranslator, doc: Any, direction: Direction) -> dict[str, dict[str, int]]:
    """A parsed ``{topic: {partition: offset}}`` map of one cluster as the same map of the other."""
    try:
        moved = translator.rewrite(_offsets_map(doc), direction)
    except TranslationError as exc:
        raise RewriteError(str(exc)) from None
    return {topic: {str(p): o for p, o in parts.items()} for topic, parts in moved.items()}


@dataclass
class CheckpointRewrite:
    """What a checkpoint rewrite did: the batches rewritten and removed, the sources' offsets moved."""

    batches: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    initial: list[str] = field(default_factory=list)  # sources/<n>/0 files rewritten
    notes: list[str] = field(default_factory=list)


def _drop(path: Path) -> None:
    """Removes a checkpoint file and the ``.crc`` Hadoop's local file system keeps beside it."""
    path.unlink(missing_ok=True)
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def _write(path: Path, data: bytes) -> None:
    _drop(path)
    path.write_bytes(data)


def _batch_files(folder: Path) -> dict[int, Path]:
    if not folder.is_dir():
        return {}
    return {int(p.name): p for p in folder.iterdir() if p.is_file() and p.name.isdigit()}


def _moved_entry(translator: FlowTranslator, entry: OffsetLogEntry, direction: Direction) -> OffsetLogEntry:
    sources: list[tuple[str | None, str | None]] = []
    kafka = 0
    for sid, text in entry.sources:
        found = None if text is None else kafka_offsets(text)
        if found is None:
            sources.append((sid, text))  # another kind of source, or none: as it is
            continue
        kafka += 1
        sources.append((sid, encode_kafka_offsets(translator.rewrite(found, direction))))
    if not kafka:
        raise RewriteError("no Kafka source offsets in it")
    return OffsetLogEntry(entry.version, entry.metadata, tuple(sources))


def rewrite_spark_checkpoint(
    translator: FlowTranslator, source: Path, destination: Path, direction: Direction
) -> CheckpointRewrite:
    """Copies the checkpoint at ``source`` to ``destination`` (which must not exist) with its Kafka
    offsets moved to the other cluster (see the module's docstring)."""
    source, destination = source.resolve(), destination.resolve()
    batches = _batch_files(source / "offsets")
    if not batches:
        raise RewriteError(f"{source} is not a Structured Streaming checkpoint: no offsets/<batch> files")
    if destination.exists():
        raise RewriteError(f"{destination} exists: the rewritten checkpoint goes to a new directory")
    if destination.is_relative_to(source):
        raise RewriteError(f"{destination} lies inside the checkpoint {source}")
    shutil.copytree(source, destination)
    try:
        return _rewrite_copy(translator, destination, sorted(batches, reverse=True), direction)
    except BaseException:
        shutil.rmtree(destination, ignore_errors=True)  # no half-rewritten checkpoint is left behind
        raise


def _rewrite_copy(translator: FlowTranslator, root: Path, newest_first: list[int], direction: Direction
                  ) -> CheckpointRewrite:
    done = CheckpointRewrite()
    required = set(newest_first[:2])  # what Spark reads when the query starts again
    for i, batch in enumerate(newest_first):
        path = root / "offsets" / str(batch)
        try:
            entry = _moved_entry(translator, decode_offset_log(path.read_bytes()), direction)
        except (TranslationError, ProtocolError, RewriteError) as exc:
            if batch in required:
                raise RewriteError(f"offsets/{batch}: {exc}") from None
            done.removed = newest_first[i:]
            for older in done.removed:
                _drop(root / "offsets" / str(older))
            done.notes.append(f"offsets/{batch} and older ({len(done.removed)} batches) removed: {exc} "
                              "(Spark reads only the latest two when the query starts again)")
            break
        _write(path, encode_offset_log(entry))
        done.batches.append(batch)
    for initial in sorted((root / "sources").glob("*/0")) if (root / "sources").is_dir() else []:
        name = initial.relative_to(root).as_posix()
        try:
            found = kafka_offsets(decode_initial_offsets(initial.read_bytes()))
            if found is None:
                continue  # not a Kafka source's
            moved = encode_kafka_offsets(translator.rewrite(found, direction))
        except (TranslationError, ProtocolError) as exc:
            _drop(initial)
            done.notes.append(f"{name} removed (read only for a query's first batch): {exc}")
            continue
        _write(initial, encode_initial_offsets(moved))
        done.initial.append(name)
    return done


def load_json_map(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RewriteError(f"not JSON: {exc}") from None
