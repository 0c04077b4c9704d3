"""Which partition a keyed record goes to, as Kafka's Java producer picks it (pure).

Kafka Connect writes its source offsets (and MM2 its checkpoints and heartbeats) with the Java
producer's default partitioner: a record with a key goes to ``toPositive(murmur2(key)) % n``
(``BuiltInPartitioner.partitionForKey`` over ``Utils.murmur2``, seed ``0x9747b28c``). On a topic of
more than one partition, a reader of a compacted topic keeps one value per key only while every
writer puts that key in the same partition: a key live in two partitions reads as whichever the
reader happened to read last. So every keyed record mm2py writes to a topic it shares with MM2 goes
where the Java producer would put it (librdkafka's ``murmur2_random`` partitioner is the same
function for non-null keys, checked against this one), and :func:`partition_for_key` is what a
reader or a repair uses to tell a record's proper partition from a stray one.
"""

from __future__ import annotations

__all__ = ["JAVA_PARTITIONER", "murmur2", "partition_for_key"]

#: librdkafka's name for the Java producer's keyed partitioner (random for null keys, as Java's)
JAVA_PARTITIONER = "murmur2_random"

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as an unsigned int (Java's int, read as two's complement
    and masked)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - (length & 3)
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition of ``partitions`` the Java producer's default partitioner gives ``key``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
