"""``python -m tpshard ARGS...`` is ``tpshard ARGS...``: the installed executable, run in place
of this process (same exit codes, same terminal, progress line included)."""
import os
import sys

from ._cli import binary
from .errors import BinaryNotFound


def main() -> None:
    try:
        exe = binary()
    except BinaryNotFound as e:
        sys.stderr.write(f"tpshard: {e.message}\n")
        sys.exit(4)
    sys.stdout.flush()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
