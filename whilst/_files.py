"""Writing files for the user: never over an existing file unless asked (`force`),
never through a link, and atomically (the complete new file or the old one).

The data goes to a temporary file in the destination's directory, which is then
linked to the name (fails if the name exists: no overwrite) or, with `force`,
renamed over it (`os.replace` replaces a symbolic link itself, never its target).
Plain Python, no JAX: `whilst run` uses it too.
"""
from __future__ import annotations

import os
import tempfile


def write_file(path, data: bytes | str, force: bool = False) -> None:
    """Write `data` to `path` as described above.

    Raises:
      FileExistsError: `path` exists (as a file, a link or anything else) and
        `force` is false.
      IsADirectoryError: `path` is a directory.
      OSError: the directory is missing or not writable.
    """
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.islink(path):
        raise IsADirectoryError(f"{path!r} is a directory")
    if os.path.lexists(path) and not force:
        raise FileExistsError(f"{path!r} exists")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".whilst-", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if not force:
        os.unlink(tmp)

