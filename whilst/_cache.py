"""The compile cache: compiled modules keyed by what determines them, the prepared
module text, the iree-compile flags, the IREE compiler's version, and the code of
`whilst.lowering`, which derives from the text the form each flag set compiles (its
loops moved into dispatches, for one).

Entries live in `$WHILST_CACHE_DIR` (default `~/.cache/whilst`, or under
`$XDG_CACHE_HOME`); `WHILST_CACHE_DIR=off` (or `cache=False`, `whilst compile
--no-cache`) disables it. Entries are sealed modules written atomically; one whose
seal does not verify is ignored (and replaced), never loaded. Beside each, a text
file says how iree-compile made it (the compile stage's label: its fusion, and the
failures and loops left to the host on the way), for a cache hit to say the same.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pathlib

from whilst._files import write_file
from whilst.runtime import LoadError
from whilst.runtime.seal import is_sealed, unseal

DISABLED = "off"


def directory(cache=None) -> str | None:
    """The cache directory: `cache` if it is a path, None if it is False or the cache
    is disabled, else from the environment (see the module doc)."""
    if cache is False:
        return None
    if cache not in (None, True):
        return os.fspath(cache)
    env = os.environ.get("WHILST_CACHE_DIR")
    if env == DISABLED:
        return None
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "whilst")


def key(text: str, flags: list[str]) -> str:
    from iree.compiler import version

    h = hashlib.sha256()
    for part in (version.VERSION, *version.REVISIONS.values(), lowering_digest(), *flags,
                 text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def lowering_digest() -> str:
    """sha256 of the source files of `whilst.lowering`, in name order."""
    import whilst.lowering

    h = hashlib.sha256()
    folder = pathlib.Path(whilst.lowering.__file__).parent
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def lookup(where: str | None, entry: str) -> tuple[bytes, str | None] | None:
    """`(sealed module, how it was made)` cached under `entry` (how: None where its
    text is missing), or None (missing, unreadable, damaged)."""
    if where is None:
        return None
    try:
        with open(os.path.join(where, entry + ".vmfb"), "rb") as f:
            data = f.read()
        if is_sealed(data):
            unseal(data)
            return data, _read_how(os.path.join(where, entry + ".txt"))
    except (OSError, LoadError):
        pass
    return None


def _read_how(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def store(where: str | None, entry: str, sealed: bytes, how: str) -> None:
    """Cache `sealed` under `entry`, with `how` it was made; a cache that cannot be
    written is skipped."""
    if where is None:
        return
    try:
        os.makedirs(where, exist_ok=True)
        write_file(os.path.join(where, entry + ".txt"), how.encode(), force=True)
        write_file(os.path.join(where, entry + ".vmfb"), sealed, force=True)
    except OSError:
        pass
