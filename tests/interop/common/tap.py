"""What the interop tests share: where tpshard is, TAP-style result lines, a failure count.

Each test imports it (tests/run.sh puts this folder and every judge and tier folder of
tests/interop on PYTHONPATH) and ends with `return tap.status()`.
"""
import os
import subprocess

TOP = os.environ.get("TPS_TOP") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TPSHARD = os.environ.get("TPSHARD") or os.path.join(TOP, "tpshard")
failures = 0


def report(ok, what, detail=""):
    """Prints "ok - what" or "not ok - what" with the detail as "#" lines; returns ok."""
    global failures
    print(("ok - " if ok else "not ok - ") + what)
    if not ok:
        failures += 1
        for line in str(detail).splitlines():
            print("#   " + line)
    return ok


def tpshard(*args):
    return subprocess.run([TPSHARD] + [str(a) for a in args], capture_output=True, text=True)


def status():
    return 1 if failures else 0


def tpshard_missing():
    """1 after a "not ok" line when the tpshard binary is missing, else None."""
    if not os.access(TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + TPSHARD)
        return 1
    return None


def transformers_tier(name):
    """The prologue of a test against transformers: None to go on, else the exit status
    (0 after a loud skip when transformers cannot be imported, 1 when tpshard is missing)."""
    try:
        import transformers  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means the tier cannot run
        print("skip - %s: transformers cannot be imported (%s); run tests/interop/setup.sh" % (name, e))
        return 0
    return tpshard_missing()
