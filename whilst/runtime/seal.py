"""The whilst seal: an integrity checksum appended to every module whilst compiles.

A sealed module is `<IREE module> SEAL_MAGIC <SHA-256 of the IREE module>`. IREE
ignores the trailing bytes (the module still runs under `iree-run-module`); the
whilst loader refuses a module whose checksum does not match, before IREE reads it.

The seal checks integrity, not authenticity: anyone can compute a SHA-256, so it
detects damage (a flipped bit, a truncated copy), not tampering. `.vmfb` files
contain native code: load only modules from sources you trust.

Damage to the seal itself is detected too: trailing bytes that are a near miss of
`SEAL_MAGIC` (up to `_MAX_MARKER_DAMAGE` flipped bits, anywhere in the last
`_SEARCH` bytes, so a few lost or added bytes at the end are also caught) are a
damaged seal, never "no seal". A module from `iree-compile` itself ends in
flatbuffer data that differs from the marker in far more bits.
"""
from __future__ import annotations

import hashlib

from whilst.runtime._errors import LoadError

SEAL_MAGIC = b"\0whilst-sha256\0\0"
_DIGEST_LEN = 32
SEAL_LEN = len(SEAL_MAGIC) + _DIGEST_LEN
_MAX_MARKER_DAMAGE = 24  # of 128 bits
_SEARCH = SEAL_LEN + 64


def seal(data: bytes) -> bytes:
    """`data` (an IREE module) followed by its whilst seal."""
    return data + SEAL_MAGIC + hashlib.sha256(data).digest()


def is_sealed(data: bytes) -> bool:
    """Whether `data` ends in a seal marker, intact or damaged (see the module doc)."""
    return _marker_offset(data) is not None


def unseal(data: bytes) -> bytes:
    """The IREE module inside `data`, after checking its seal if it has one.

    Raises:
      LoadError: the seal or the module was changed or damaged.
    """
    offset = _marker_offset(data)
    if offset is None:
        return data
    body, marker, digest = data[:offset], data[offset:offset + len(SEAL_MAGIC)], \
        data[offset + len(SEAL_MAGIC):]
    if (marker != SEAL_MAGIC or len(digest) != _DIGEST_LEN
            or hashlib.sha256(body).digest() != digest):
        raise LoadError("the module is corrupted: its contents do not match the checksum "
                        "whilst stored when compiling it. Recompile it with `whilst compile` "
                        "or copy it again.")
    return body


def _marker_offset(data: bytes) -> int | None:
    """Where the (possibly damaged) seal marker starts, or None when there is none.
    The intact position (`len - SEAL_LEN`) is preferred over near misses elsewhere."""
    intact = len(data) - SEAL_LEN
    if intact >= 0 and data[intact:intact + len(SEAL_MAGIC)] == SEAL_MAGIC:
        return intact
    magic = int.from_bytes(SEAL_MAGIC, "little")
    best = None
    for offset in range(max(0, len(data) - _SEARCH), len(data) - len(SEAL_MAGIC) + 1):
        window = int.from_bytes(data[offset:offset + len(SEAL_MAGIC)], "little")
        distance = (window ^ magic).bit_count()
        if distance <= _MAX_MARKER_DAMAGE and (best is None or distance < best[0]):
            best = (distance, offset)
    return None if best is None else best[1]
