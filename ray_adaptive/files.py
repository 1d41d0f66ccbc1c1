"""Reading and writing the user's files: one error path for every command.

A policy, a scenario, a trace, a profile or a plan file the user names may be
missing, a directory, unreadable, not UTF-8, or (for ``--out``) in a folder
that does not exist. Each of those is the user's mistake, not a bug, so it is
one :class:`~ray_adaptive.errors.FileError` naming the path and the cause --
never an ``OSError`` or ``UnicodeDecodeError`` traceback.

Example:
    >>> import tempfile
    >>> try:
    ...     read_text(tempfile.mkdtemp(), "scenario")
    ... except FileError as err:
    ...     print(str(err).split(": ", 1)[1])
    cannot read the scenario: it is a directory
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

from ray_adaptive.errors import FileError

__all__ = ["read_bytes", "decode", "read_text", "write_text", "check_writable", "describe_os_error"]

# the causes a user can act on, worded for them (strerror is fine for the rest)
_CAUSES = {
    errno.ENOENT: "no such file",
    errno.EISDIR: "it is a directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "the file system is read-only",
    errno.ENAMETOOLONG: "the path is too long",
}


def describe_os_error(err: OSError) -> str:
    """The cause of ``err`` in a few words, without Python's ``[Errno N]`` prefix."""
    return _CAUSES.get(err.errno, err.strerror or type(err).__name__)


def read_bytes(path: "str | os.PathLike", what: str, limit: Optional[int] = None) -> bytes:
    """The bytes of ``path`` -- at most ``limit + 1`` of them when ``limit`` is given, so a caller can
    tell a file over its size limit without reading all of it."""
    try:
        if Path(path).is_dir():  # (open() of a directory fails late on some systems)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit + 1)
    except FileNotFoundError:
        raise FileError(str(path), f"no such {what} file") from None
    except OSError as err:
        raise FileError(str(path), f"cannot read the {what}: {describe_os_error(err)}") from None
    except ValueError as err:  # e.g. a NUL character in the path
        raise FileError(repr(str(path)), f"cannot read the {what}: {err}") from None


def decode(data: bytes, path: "str | os.PathLike", what: str) -> str:
    """``data`` as UTF-8 text, or a FileError naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileError(str(path), f"cannot read the {what}: not UTF-8 text "
                                   f"(byte 0x{data[err.start]:02x} at offset {err.start})") from None


def read_text(path: "str | os.PathLike", what: str) -> str:
    """The UTF-8 text of ``path`` (``what`` names it in errors: "policy", "scenario", ...)."""
    return decode(read_bytes(path, what), path, what)


def check_writable(path: "str | os.PathLike", what: str) -> None:
    """Fail now, before a long computation, if ``path`` cannot be written later: its folder is
    missing or read-only, or it is a directory."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise FileError(str(path), f"cannot write the {what}: it is a directory")
    if not folder.is_dir():
        raise FileError(str(path), f"cannot write the {what}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise FileError(str(path), f"cannot write the {what}: permission denied")


def write_text(path: "str | os.PathLike", text: str, what: str) -> None:
    """Write ``text`` to ``path`` (UTF-8), or raise a FileError naming the path and the cause."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise FileError(str(path), f"cannot write the {what}: {describe_os_error(err)}") from None
    except ValueError as err:
        raise FileError(repr(str(path)), f"cannot write the {what}: {err}") from None
