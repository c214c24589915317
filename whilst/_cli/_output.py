"""The files the command writes (`-o`, `--output`, `--emit-mlir`, `--graph`): checked
before any work (`check_output`, `check_output_dir`), then written through
`whilst._files.write_file` (no overwrite without --force, regular files only, no
links followed, atomic), with one-line errors that name the option."""
from __future__ import annotations

import contextlib
import os

from whilst._cli._errors import CLIError
from whilst._files import NotRegularFileError, check_directory, check_writable, write_file


def check_output(path: str, force: bool, option: str, source: str | None = None,
                 function: str | None = None) -> None:
    """Refuse, before any work, an output `path` that `write_output` would refuse or
    that is `source`, the file of the traced `function` (also through a link)."""
    if source is not None and os.path.exists(path) and os.path.samefile(path, source):
        raise CLIError(f"{option} {path!r} is the source file of {function}; write the "
                       f"output to a file of its own.")
    with _one_line(path, option):
        check_writable(path, force)


def check_output_dir(path: str, option: str) -> None:
    """Refuse, before any work, a directory for output files that `output_dir` could
    not create or that cannot be written."""
    _check_is_directory(path, option)
    with _one_line(path, option):
        check_directory(path, create=True)


def write_output(path: str, data: bytes | str, force: bool, option: str) -> None:
    with _one_line(path, option):
        write_file(path, data, force=force)


def output_dir(path: str, option: str) -> str:
    """`path` as a directory for output files, created if missing."""
    _check_is_directory(path, option)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise CLIError(f"{option}: cannot create the directory {path!r}: "
                       f"{e.strerror or e}.") from None
    return path


def _check_is_directory(path: str, option: str) -> None:
    if os.path.lexists(path) and not os.path.isdir(path):
        raise CLIError(f"{option} {path!r} is a file, not a directory; give a directory "
                       f"for the output files.")


@contextlib.contextmanager
def _one_line(path: str, option: str):
    """The errors of checking or writing `path` as one CLIError naming `option`."""
    try:
        yield
    except FileExistsError:
        raise CLIError(f"{option}: {path!r} exists; pass --force to replace it, or choose "
                       f"another name.") from None
    except IsADirectoryError:
        raise CLIError(f"{option} {path!r} is a directory; give a file name.") from None
    except NotRegularFileError as e:
        raise CLIError(f"{option} {path!r} is a {e.kind}, not a regular file; whilst "
                       f"replaces only regular files, even with --force: give a file "
                       f"name.") from None
    except OSError as e:
        reason = e.strerror if e.errno is not None else str(e)
        hint = ("; create it first, or choose another place" if isinstance(e, FileNotFoundError)
                and e.errno is None else "")
        raise CLIError(f"{option}: cannot write {path!r}: {reason}{hint}.") from None
