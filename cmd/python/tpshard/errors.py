"""One exception class per tpshard exit code (README "Exit codes").

Every failure of the CLI raises a subclass of :class:`TpshardError` carrying the message the
CLI printed (its ``tpshard CMD: ...`` lines), the exit code, the command line, and the JSON
report when the command printed one (``check`` and ``verify`` print theirs even when they
find a mismatch, so :class:`MismatchError` has the whole report).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Type

__all__ = [
    "TpshardError",
    "MismatchError",
    "UsageError",
    "InvalidInputError",
    "IOFailure",
    "BackendUnavailable",
    "Interrupted",
    "BinaryNotFound",
    "error_for_exit_code",
]


class TpshardError(Exception):
    """A tpshard command failed.

    Attributes:
        message: the CLI's error lines (stderr, without the ``tpshard CMD:`` prefix of the first).
        exit_code: the process's exit status (1 to 5, 128 + a signal).
        args_: the command line that was run.
        report: the parsed ``--json`` report, or None when none was printed.
        stderr: everything the command wrote to stderr.
    """

    exit_code: int = -1

    def __init__(self, message: str, exit_code: int, argv: Sequence[str] = (),
                 report: Optional[Any] = None, stderr: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.argv: List[str] = list(argv)
        self.report = report
        self.stderr = stderr

    def __str__(self) -> str:
        return f"{self.message} (exit {self.exit_code})"


class MismatchError(TpshardError):
    """Exit 1: ``check`` or ``verify`` (or reshard/merge re-reading a set) found a difference."""


class UsageError(TpshardError):
    """Exit 2: an unknown option, a bad value, a missing argument, a request out of range."""


class InvalidInputError(TpshardError):
    """Exit 3: a malformed or missing file, layout or manifest; a layout that does not fit."""


class IOFailure(TpshardError):
    """Exit 4: I/O or resource failure (disk full, permission, out of memory)."""


class BackendUnavailable(TpshardError):
    """Exit 5: the requested verify backend is not there (no GPU, no NCCL, no MPI plugin)."""


class Interrupted(TpshardError):
    """Exit 130/143 (128 + the signal): stopped by SIGINT/SIGTERM after removing its output."""


class BinaryNotFound(TpshardError):
    """The ``tpshard`` executable could not be found (set TPSHARD_BIN to its path)."""


_BY_CODE: Dict[int, Type[TpshardError]] = {
    1: MismatchError,
    2: UsageError,
    3: InvalidInputError,
    4: IOFailure,
    5: BackendUnavailable,
}


def error_for_exit_code(code: int) -> Type[TpshardError]:
    """The exception class for a tpshard exit status (Interrupted for 128 + a signal)."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if code > 128 or code < 0:  # 128 + N from the CLI, -N from subprocess for a signal death
        return Interrupted
    return TpshardError
