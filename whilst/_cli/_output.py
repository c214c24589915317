"""The files the command writes (`-o`, `--output`, `--emit-mlir`, `--graph`): through
`whilst._files.write_file` (no overwrite without --force, no links followed,
atomic), with one-line errors that name the option."""
from __future__ import annotations

import os

from whilst._cli._errors import CLIError
from whilst._files import write_file


def write_output(path: str, data: bytes | str, force: bool, option: str) -> None:
    try:
        write_file(path, data, force=force)
    except FileExistsError:
        raise CLIError(f"{option}: {path!r} exists; pass --force to replace it, or choose "
                       f"another name.") from None
    except IsADirectoryError:
        raise CLIError(f"{option}: {path!r} is a directory; give a file name.") from None
    except OSError as e:
        raise CLIError(f"{option}: cannot write {path!r}: {e.strerror or e}.") from None


def output_dir(path: str, option: str) -> str:
    """`path` as a directory for output files, created if missing."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise CLIError(f"{option} {path!r} is a file, not a directory; give a directory "
                       f"for the output files.")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise CLIError(f"{option}: cannot create the directory {path!r}: "
                       f"{e.strerror or e}.") from None
    return path
