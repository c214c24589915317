"""The user's files: written never over anything but a regular file (and only when
asked), never through a link, atomically; read only from regular files, up to a
stated size.

Writing: the data goes to a temporary file in the destination's directory, which is
then linked to the name (fails if the name exists: no overwrite) or, with `force`,
renamed over it (`os.replace` replaces a symbolic link itself, never its target).
A device, FIFO, socket or directory at the name is refused even with `force`: a
rename would put a regular file in its place.

Reading: the file is opened without blocking (a FIFO with no writer would wait
forever) and refused unless it is a regular file no larger than the limit, so
`/dev/zero` or a FIFO is an error, not a hang or an unbounded read.
Plain Python, no JAX: `whilst run` and `whilst.runtime` use it too.
"""
from __future__ import annotations

import os
import stat
import tempfile

_KINDS = [(stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")]


class NotRegularFileError(OSError):
    """A path names a device, FIFO, socket or directory where a regular file is needed;
    `kind` says which ("FIFO", "character device", ...)."""

    def __init__(self, path, kind: str, consequence: str):
        super().__init__(f"{os.fspath(path)!r} is a {kind}, not a regular file; {consequence}")
        self.kind = kind


class FileTooLargeError(OSError):
    """A file is larger than the reader's limit."""


def kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, in words ("FIFO", "character device", ...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "regular file" if stat.S_ISREG(mode) else "special file"


def check_writable(path, force: bool = False) -> None:
    """Raise what `write_file(path, ..., force)` would raise about `path` and its
    directory, without writing `path`.

    Raises:
      FileExistsError: `path` exists (a regular file or a link) and `force` is false.
      IsADirectoryError: `path` is a directory.
      NotRegularFileError: `path` is a device, FIFO or socket.
      FileNotFoundError, NotADirectoryError, OSError: see `check_directory`.
    """
    path = os.fspath(path)
    check_replaceable(path, force)
    check_directory(os.path.dirname(path) or ".")


def check_directory(directory, create: bool = False) -> None:
    """Raise unless files can be written in `directory` (or, with `create`, in the
    directory `os.makedirs` would make there), proven by creating and removing a
    temporary file in it (or in its nearest existing ancestor).

    Raises:
      FileNotFoundError: `directory` does not exist (without `create`).
      NotADirectoryError: it, or the ancestor it would be made in, is not a directory.
      OSError: it cannot be written.
    """
    directory = os.fspath(directory)
    existing = directory
    while create and not os.path.lexists(existing):
        parent = os.path.dirname(os.path.abspath(existing))
        if parent == os.path.abspath(existing):
            break
        existing = parent
    if not os.path.exists(existing):
        raise FileNotFoundError(f"the directory {existing!r} does not exist")
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"{existing!r} is not a directory")
    fd, tmp = tempfile.mkstemp(dir=existing, prefix=".whilst-", suffix=".tmp")
    os.close(fd)
    os.unlink(tmp)


def check_replaceable(path, force: bool) -> None:
    """Raise unless `write_file(path, ..., force)` may put a file at `path` (see
    `check_writable`)."""
    path = os.fspath(path)
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return      # nothing there (its directory is checked, or fails, apart)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path!r} is a directory")
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise NotRegularFileError(path, kind(mode), "only regular files are replaced")
    if not force:
        raise FileExistsError(f"{path!r} exists")


def write_file(path, data: bytes | str, force: bool = False) -> None:
    """Write `data` to `path` as described above.

    Raises:
      FileExistsError: `path` exists (as a file or a link) and `force` is false.
      IsADirectoryError: `path` is a directory.
      NotRegularFileError: `path` is a device, FIFO or socket (whatever `force`).
      OSError: the directory is missing or not writable.
    """
    path = os.fspath(path)
    check_replaceable(path, force)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".whilst-", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        if force:
            check_replaceable(path, force)     # nothing else appeared there meanwhile
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if not force:
        os.unlink(tmp)


def open_regular(path, limit: int | None = None):
    """`path` opened for reading in binary mode, if it is a regular file (of at most
    `limit` bytes, if given).

    Raises:
      NotRegularFileError: it is a device, FIFO, socket or directory.
      FileTooLargeError: it is larger than `limit`.
      OSError: it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(path, kind(info.st_mode), "only regular files are read")
        if limit is not None and info.st_size > limit:
            raise FileTooLargeError(f"{os.fspath(path)!r} is larger than the "
                                    f"{describe_size(limit)} whilst reads ({info.st_size} "
                                    f"bytes).")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, limit: int) -> bytes:
    """The bytes of the regular file `path` (see `open_regular`), as many as its size
    when it was opened."""
    with open_regular(path, limit) as f:
        return f.read(os.fstat(f.fileno()).st_size)


def describe_size(n: int) -> str:
    """`n` bytes in the largest binary unit that divides it ("4 GiB", "512 KiB")."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"
