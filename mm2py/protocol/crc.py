"""A batch's CRC-32C carried over a header edit instead of computed again (pure).

Kafka's batch CRC covers bytes 21..end: a 40-byte header (attributes, offsets delta, timestamps,
producer id, epoch, base sequence, count), then the records section. The mirror changes only the
header (its own producer state, the transactional bit), so the CRC of the batch it sends follows
from the source batch's CRC, already checked when the batch was fetched, and the two headers:

    CRC(H2 || R) = CRC(H1 || R) xor raw(H1 xor H2) * x^(8 len(R))   (mod the CRC polynomial)

where ``raw`` is the CRC register with neither the initial nor the final inversion (the CRC is
affine in its input: equal lengths cancel the inversions). The records section is not read at all.
The brokers check every produced batch's CRC before appending it (``CORRUPT_MESSAGE`` otherwise),
so a batch acknowledged by the target holds, byte for byte, the records section whose CRC was
checked at the fetch: nothing that changed the records in between can be sealed with a valid CRC.

``carry_over`` and ``shift`` (x^(8n) times a register) are the compiled path's when built; the
Python path below is the reference: a multiplication by a fixed power x^(2^k) is linear in the
register, so each one used is turned into four 256-entry tables once, and a shift costs four
lookups per set bit of n.
"""

from __future__ import annotations

from crc32c import crc32c

from mm2py.protocol import native

__all__ = ["carry_over", "raw_crc", "shift"]

#: the reflected CRC-32C (Castagnoli) polynomial without its x^32 term (bit 31 is x^0)
POLY = 0x82F63B78
_HEADER_ZEROS_CRC = {n: crc32c(bytes(n)) for n in (40,)}


def _mul(a: int, b: int) -> int:
    """a times b modulo the polynomial (reflected)."""
    product = 0
    for i in range(31, -1, -1):
        if (a >> i) & 1:
            product ^= b
        b = (b >> 1) ^ (POLY if b & 1 else 0)
    return product


def _powers() -> list[int]:
    out = [1 << 30]  # x^1
    for _ in range(66):
        out.append(_mul(out[-1], out[-1]))
    return out


_POW2 = _powers()  # x^(2^k)
_TABLES: dict[int, tuple[list[int], list[int], list[int], list[int]]] = {}


def _table(k: int) -> tuple[list[int], list[int], list[int], list[int]]:
    t = _TABLES.get(k)
    if t is None:
        c = _POW2[k]
        t = _TABLES[k] = (
            [_mul(c, b) for b in range(256)], [_mul(c, b << 8) for b in range(256)],
            [_mul(c, b << 16) for b in range(256)], [_mul(c, b << 24) for b in range(256)])
    return t


def _shift_python(value: int, n: int) -> int:
    k = 3  # bit j of n stands for x^(2^(j+3)): 8 bits a byte
    while n:
        if n & 1:
            t0, t1, t2, t3 = _table(k)
            value = t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF] ^ t3[value >> 24]
        n >>= 1
        k += 1
    return value


def shift(value: int, n: int) -> int:
    """The raw CRC-32C register ``value`` after ``n`` zero bytes."""
    out = native.crc32c_shift(value, n)
    return _shift_python(value, n) if out is None else out


def raw_crc(data: bytes) -> int:
    """The CRC-32C register after ``data`` from zero, with no final inversion."""
    zeros = _HEADER_ZEROS_CRC.get(len(data))
    if zeros is None:
        zeros = crc32c(bytes(len(data)))
    return int(crc32c(data)) ^ zeros


def carry_over(crc: int, old_header: bytes | memoryview, new_header: bytes, tail: int) -> int:
    """The CRC of ``new_header`` followed by the ``tail`` bytes that followed ``old_header`` (of
    the same length) in the data whose CRC is ``crc``."""
    out = native.crc32c_carry(crc, old_header, new_header, tail)
    if out is not None:
        return out
    delta = int.from_bytes(old_header, "big") ^ int.from_bytes(new_header, "big")
    if not delta:
        return crc
    return crc ^ shift(raw_crc(delta.to_bytes(len(new_header), "big")), tail)
