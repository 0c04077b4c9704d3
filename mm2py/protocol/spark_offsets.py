"""The files of a Spark Structured Streaming checkpoint that name Kafka offsets (sans-IO).

What it is for: ``mm2py offsets rewrite --spark-checkpoint`` moves a streaming query that reads
Kafka to the other cluster of a flow by rewriting these files
(``mm2py/operations/offsets_rewrite.py``); this module only reads and writes their bytes, as Spark
does (``OffsetSeqLog``, ``KafkaSourceInitialOffsetWriter``, ``JsonUtils`` of spark-sql-kafka):

* ``offsets/<batch>``, the offset log: a version line (``v1``; ``v2`` in Spark 4.1+), the batch's
  metadata as one JSON line (watermark, batch time, settings), then one line per source of the
  query — its offset as JSON, or ``-`` for none; in ``v2`` each line is ``<source id>:<offset>``.
  No newline after the last line;
* ``sources/<n>/0``, a Kafka source's initial offsets: a zero byte, ``v1``, a newline, the JSON
  (Spark 2.1.0 wrote the JSON alone);
* a Kafka source's offset JSON, ``{"topic":{"0":23,"1":45}}`` (``KafkaSourceOffset``): what any
  other source writes is left as it is (:func:`kafka_offsets` answers None for it).

Every decoder raises only :class:`SparkOffsetsError` (a ``ProtocolError``) on bad input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mm2py.protocol.errors import ProtocolError

__all__ = ["OffsetLogEntry", "SparkOffsetsError", "decode_initial_offsets", "decode_offset_log",
           "encode_initial_offsets", "encode_kafka_offsets", "encode_offset_log", "kafka_offsets"]

#: the offset log's "no offset for this source" line
VOID = "-"


class SparkOffsetsError(ProtocolError):
    """A checkpoint file that is not what Spark writes."""


@dataclass(frozen=True)
class OffsetLogEntry:
    """One ``offsets/<batch>`` file: ``sources`` holds each source's (id — ``v2`` only — and offset
    JSON, None for ``-``), in the file's order; ``metadata`` the metadata line as it was."""

    version: int
    metadata: str
    sources: tuple[tuple[str | None, str | None], ...]


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SparkOffsetsError(f"not UTF-8 text: {exc}") from None


def decode_offset_log(data: bytes) -> OffsetLogEntry:
    lines = _text(data).split("\n")
    if lines and lines[-1] == "" and len(lines) > 2:
        lines.pop()  # a trailing newline (Spark writes none; a hand-edited file may have one)
    if len(lines) < 2:
        raise SparkOffsetsError("an offset log file has a version line and a metadata line at least")
    version = lines[0].strip()
    if version not in ("v1", "v2"):
        raise SparkOffsetsError(f"unsupported offset log version {version[:20]!r} (v1 and v2 are read)")
    sources: list[tuple[str | None, str | None]] = []
    for line in lines[2:]:
        if version == "v2":
            sid, colon, value = line.partition(":")
            if not colon:
                raise SparkOffsetsError(f"a v2 offset line is <source id>:<offset>, got {line[:80]!r}")
            sources.append((sid, None if value == VOID else value))
        else:
            sources.append((None, None if line == VOID else line))
    return OffsetLogEntry(int(version[1:]), lines[1], tuple(sources))


def encode_offset_log(entry: OffsetLogEntry) -> bytes:
    lines = [f"v{entry.version}", entry.metadata]
    for sid, value in entry.sources:
        text = VOID if value is None else value
        lines.append(text if entry.version == 1 else f"{sid}:{text}")
    return "\n".join(lines).encode()


def kafka_offsets(text: str) -> dict[str, dict[int, int]] | None:
    """A Kafka source's offsets, ``{topic: {partition: offset}}``; None when ``text`` is not a Kafka
    source's offset (another source's). Raises only for text that is not JSON at all."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SparkOffsetsError(f"a source offset is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not doc:
        return None
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, dict):
            return None
        parsed: dict[int, int] = {}
        for key, offset in partitions.items():
            if not (isinstance(key, str) and key.isdigit() and key.isascii()) or type(offset) is not int:
                return None
            parsed[int(key)] = offset
        out[topic] = parsed
    return out


def encode_kafka_offsets(offsets: dict[str, dict[int, int]]) -> str:
    """As ``JsonUtils.partitionOffsets`` writes them: compact JSON, partitions as strings (sorted here)."""
    doc = {topic: {str(p): o for p, o in sorted(parts.items())} for topic, parts in sorted(offsets.items())}
    return json.dumps(doc, separators=(",", ":"))


def decode_initial_offsets(data: bytes) -> str:
    """The offset JSON of a ``sources/<n>/0`` file."""
    if data[:1] == b"\x00":
        data = data[1:]
    text = _text(data)
    if text.startswith("v"):
        version, newline, rest = text.partition("\n")
        if not newline or version != "v1":
            raise SparkOffsetsError(f"unsupported initial offsets version {version[:20]!r}")
        return rest
    return text  # written by Spark 2.1.0


def encode_initial_offsets(offsets_json: str) -> bytes:
    return b"\x00v1\n" + offsets_json.encode()
