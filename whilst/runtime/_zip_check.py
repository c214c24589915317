"""The CRC-32 check of modules without a whilst seal.

`iree-compile` writes a `.vmfb` as a ZIP archive of stored (uncompressed) entries:
the module flatbuffer (`module.fb`) and each executable (e.g. the embedded ELF of
an llvm-cpu dispatch), each with the CRC-32 of its bytes. IREE itself ignores those
CRCs; checking them catches every single-bit (indeed every burst of up to 32 bits)
change to the module or its machine code, which otherwise runs damaged. Bytes the
CRCs do not cover (ZIP headers, padding) are still read by IREE's flatbuffer
verifier; a module written with `--iree-vm-emit-polyglot-zip=false` has no CRCs at all.
"""
from __future__ import annotations

import io
import zipfile

from whilst.runtime._errors import LoadError

_LOCAL_HEADER = b"PK\x03\x04"
_END_OF_DIRECTORY = b"PK\x05\x06"


def check_crcs(data: bytes) -> None:
    """Check the CRC-32 of every ZIP entry of an unsealed module, or raise LoadError.
    A module that is not a ZIP archive (nor a damaged one) is left to IREE."""
    if not _looks_like_zip(data):
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
    except Exception as e:  # zipfile raises BadZipFile, ValueError, struct.error, ...
        raise LoadError(f"the module is corrupted: its ZIP structure is damaged ({e}). "
                        f"Recompile it or copy it again.") from None
    if bad is not None:
        raise LoadError(f"the module is corrupted: the CRC-32 of its part {bad!r} does not "
                        f"match. Recompile it or copy it again.")
    trailing = _bytes_after_archive(data)
    if trailing:
        raise LoadError(f"the module is corrupted: {trailing} bytes follow the end of its "
                        f"archive (a whilst seal damaged past recognition, or another file "
                        f"appended). Recompile it or copy it again.")


def _bytes_after_archive(data: bytes) -> int:
    """How many bytes follow the ZIP end-of-directory record and its comment
    (`iree-compile` writes none; a sealed module's seal follows it)."""
    end = data.rfind(_END_OF_DIRECTORY)
    if end < 0 or end + 22 > len(data):
        return 0
    return max(0, len(data) - (end + 22 + int.from_bytes(data[end + 20:end + 22], "little")))


def _looks_like_zip(data: bytes) -> bool:
    head = int.from_bytes(data[:4], "little") ^ int.from_bytes(_LOCAL_HEADER, "little")
    return (len(data) >= 4 and head.bit_count() <= 8) or \
        _END_OF_DIRECTORY in data[-(65536 + 22):]
