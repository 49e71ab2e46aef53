"""Finding and running the ``tpshard`` executable: the one implementation the API drives."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .errors import BinaryNotFound, TpshardError, error_for_exit_code
from .results import Progress

ProgressArg = Union[None, bool, Callable[[Progress], None]]


def binary() -> str:
    """The ``tpshard`` executable the API runs: $TPSHARD_BIN, else the one this distribution
    installed beside the interpreter's scripts (the wheel's ``bin/tpshard``), else the PATH's."""
    env = os.environ.get("TPSHARD_BIN")
    if env:
        return env
    dirs: List[str] = []
    for scheme in (None, "posix_user"):
        try:
            dirs.append(sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts"))
        except KeyError:
            pass
    dirs.append(os.path.dirname(sys.executable))
    for d in dirs:
        cand = os.path.join(d, "tpshard")
        if d and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("tpshard")
    if found:
        return found
    raise BinaryNotFound("no tpshard executable: not installed beside this Python (pip install tpshard), "
                         "not on PATH; set TPSHARD_BIN", -1)


def blas_library() -> Optional[str]:
    """The scipy-openblas32 library the wheel depends on, as that package documents it
    (``get_lib_dir()``, ``get_library(fullname=True)``), for $TPSHARD_BLAS; None without it.
    The executable also finds it beside itself (verify/math/blas.h); naming it here covers an
    executable that lives elsewhere ($TPSHARD_BIN, the PATH's)."""
    try:
        import scipy_openblas32  # type: ignore[import-not-found]
        return os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))
    except (ImportError, OSError, IndexError):
        return None


def option_args(options: Dict[str, Any]) -> List[str]:
    """``{"max_shard_size": "5GB", "force": True, "only_rank": [0, 1]}`` as CLI options:
    underscores become dashes, True a flag, None and False nothing, a list comma-joined."""
    out: List[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        opt = "--" + key.replace("_", "-")
        if value is True:
            out.append(opt)
        elif isinstance(value, (list, tuple)):
            out += [opt, ",".join(str(v) for v in value)]
        else:
            out += [opt, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return out


def _stderr_progress() -> Callable[[Progress], None]:
    """The CLI's progress line, drawn on sys.stderr (which need not be a terminal here)."""
    def show(p: Progress) -> None:
        pct = 100.0 * p.fraction
        sys.stderr.write(f"\r\033[K{p.verb} {p.done}/{p.total} bytes {pct:3.0f}%  {p.tensor}")
        if p.done >= p.total:
            sys.stderr.write("\r\033[K")
        sys.stderr.flush()
    return show


def _pump(fd: int, callback: Callable[[Progress], None], errors: List[BaseException]) -> None:
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
        for line in f:
            if errors:
                continue  # keep draining so the CLI never blocks on a full pipe
            try:
                d = json.loads(line)
                callback(Progress(verb=str(d.get("verb", "")), done=int(d.get("done", 0)),
                                  total=int(d.get("total", 0)), tensor=str(d.get("tensor", ""))))
            except BaseException as e:  # a callback's exception is raised after the run
                errors.append(e)


def _message(cmd: str, stderr: str) -> str:
    """The CLI's last error line for cmd, without its ``tpshard CMD:`` prefix."""
    prefix = f"tpshard {cmd}: "
    lines = [ln[len(prefix):] for ln in stderr.splitlines() if ln.startswith(prefix)]
    lines = [ln for ln in lines if not ln.startswith("see 'tpshard")]
    if lines:
        return lines[-1]
    rest = [ln for ln in stderr.splitlines() if ln.strip()]
    return rest[-1] if rest else "tpshard failed"


def run(cmd: str, args: Sequence[str], *, want_json: bool = False, progress: ProgressArg = None,
        cwd: Optional[str] = None) -> Tuple[str, str, Optional[Any]]:
    """Runs ``tpshard CMD ARGS...``; returns (stdout, stderr, parsed JSON report or None).
    A non-zero exit raises the exception class of its code (errors.py), with the report."""
    argv = [binary(), cmd] + [os.fspath(a) for a in args]
    env = dict(os.environ)
    if not env.get("TPSHARD_BLAS"):
        lib = blas_library()
        if lib:
            env["TPSHARD_BLAS"] = lib
    pass_fds: Tuple[int, ...] = ()
    rfd = wfd = -1
    pump = None
    cb_errors: List[BaseException] = []
    if progress:
        rfd, wfd = os.pipe()
        env["TPSHARD_PROGRESS_FD"] = str(wfd)
        pass_fds = (wfd,)
        callback = progress if callable(progress) else _stderr_progress()
        pump = threading.Thread(target=_pump, args=(rfd, callback, cb_errors), daemon=True)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, pass_fds=pass_fds,
                                cwd=cwd)
    except OSError as e:
        if rfd >= 0:
            os.close(rfd)
            os.close(wfd)
        raise BinaryNotFound(f"{argv[0]}: {e.strerror}", -1, argv) from e
    if pump is not None:
        os.close(wfd)  # the child holds the write end; EOF when it exits
        pump.start()
    try:
        out_b, err_b = proc.communicate()
    except KeyboardInterrupt:
        # The child got the same SIGINT: let it remove what it was writing before going on.
        proc.wait()
        raise
    if pump is not None:
        pump.join()
    out = out_b.decode("utf-8", errors="replace")
    err = err_b.decode("utf-8", errors="replace")
    report = None
    if want_json and out.strip():
        try:
            report = json.loads(out)
        except ValueError:
            report = None
    rc = proc.returncode
    if rc != 0:
        code = 128 - rc if rc < 0 else rc  # a signal death (-N) reads as the CLI's 128 + N
        exc = error_for_exit_code(code)(_message(cmd, err), code, argv, report, err)
        raise exc
    if cb_errors:
        raise cb_errors[0]
    return out, err, report


__all__ = ["binary", "run", "option_args", "TpshardError"]
