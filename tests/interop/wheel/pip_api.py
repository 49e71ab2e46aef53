"""The Python API as installed from the wheel (run by tests/interop/wheel/pip_wheel.sh with the fresh
venv's interpreter, in a scratch directory holding a copy of testdata/, the source tree out
of reach): typed results of inspect, plan, split, check, verify, reshard, merge; each
exception class with its exit code, message and report; the progress callback.
    python pip_api.py TESTDATA WRONG_SET
Prints TAP lines (ok - / not ok - )."""
import os
import stat
import sys
import tempfile

import tpshard

testdata, wrong = sys.argv[1], sys.argv[2]
M = os.path.join(testdata, "models", "tiny-llama")
SRC = os.path.join(M, "model.safetensors")
failed = 0


def t(name, cond, detail=""):
    global failed
    print(("ok - " if cond else "not ok - ") + "api: " + name)
    if not cond:
        failed += 1
        if detail:
            print("#   " + str(detail).replace("\n", "\n#   "))


def raises(name, cls, code, frag, fn):
    try:
        fn()
    except tpshard.TpshardError as e:
        t(name, type(e) is cls and e.exit_code == code and frag in e.message,
          f"{type(e).__name__} exit {e.exit_code}: {e.message}")
        return e
    t(name, False, "no exception")
    return None


t("the API runs the wheel's binary, not the source tree's",
  tpshard.binary() == os.path.join(os.path.dirname(sys.executable), "tpshard"), tpshard.binary())
t("tpshard.version() is the package's version", tpshard.version() == tpshard.__version__, tpshard.version())

ins = tpshard.inspect(SRC)
t("inspect: an InspectResult with 21 tensors", isinstance(ins, tpshard.InspectResult) and ins.totals["tensors"] == 21,
  ins.totals)
pl = tpshard.plan(SRC, tp=2, preset="llama")
t("plan: a PlanResult with two ranks' bytes", isinstance(pl, tpshard.PlanResult) and pl.tp == 2 and
  len(pl.rank_bytes) == 2, pl.rank_bytes)

updates = []
s = tpshard.split(SRC, tp=2, out="tp2", progress=updates.append)
t("split: a ShardSet with its manifest (tp 2, 2 files)", isinstance(s, tpshard.ShardSet) and s.tp == 2 and
  len(s.files) == 2 and s.manifest is not None, s)
t("split: progress updates reach the callback as Progress", updates and all(isinstance(u, tpshard.Progress) for u in updates)
  and updates[-1].done == updates[-1].total and updates[-1].verb == "split", updates[-1:])

c = tpshard.check("tp2")
t("check: a CheckResult, ok, every rank covered", isinstance(c, tpshard.CheckResult) and c.ok and c.findings == [] and
  c.checked.ranks == [0, 1] and c.checked.tensors == 21, c)
v = tpshard.verify("tp2", backend="cpu")
t("verify: a VerifyResult, two layers passed", isinstance(v, tpshard.VerifyResult) and v.passed and len(v.layers) == 2
  and all(isinstance(x, tpshard.LayerResult) and x.passed for x in v.layers) and v.backend == "cpu", v)
v1 = tpshard.verify("tp2", layers=1, junit="v1.xml")
t("verify layers=1 runs layer 1 only and writes the JUnit file", [x.layer for x in v1.layers] == [1] and
  os.path.exists("v1.xml"))
w = tpshard.verify("tp2", whole_model=True)
t("verify whole_model: a WholeModelResult that passed", isinstance(w.whole_model, tpshard.WholeModelResult) and
  w.whole_model.passed and w.passed, w.whole_model)
vd = tpshard.verify("tp2", backend="devsim", layers=0)
t("verify backend=devsim: the wheel's devsim plugin is found", vd.passed and vd.backend == "devsim", vd.backend)

r = tpshard.reshard("tp2", tp=4, out="tp4")
t("reshard: tp 4", r.tp == 4 and len(r.files) == 4, r)
m = tpshard.merge("tp4", "merged.safetensors")
with open(m.path, "rb") as a, open(SRC, "rb") as b:
    t("merge: bit-exact with the source", a.read() == b.read())

# One exception class per exit code.
raises("UsageError (2): tp 0", tpshard.UsageError, 2, "--tp", lambda: tpshard.split(SRC, tp=0, out="x"))
raises("UsageError (2): an unknown option", tpshard.UsageError, 2, "unknown option",
       lambda: tpshard.check("tp2", no_such_option=True))
raises("InvalidInputError (3): a missing source without --preset is a missing file", tpshard.InvalidInputError, 3,
       "/no/such/model.safetensors: No such file or directory",
       lambda: tpshard.split("/no/such/model.safetensors", tp=2, out="x"))
raises("InvalidInputError (3): a missing source with --preset", tpshard.InvalidInputError, 3,
       "No such file or directory", lambda: tpshard.split("/no/such/model.safetensors", tp=2, out="x", preset="llama"))
raises("InvalidInputError (3): check of a missing set", tpshard.InvalidInputError, 3, "No such file or directory",
       lambda: tpshard.check("/no/such/set"))
raises("InvalidInputError (3): verify of a missing set", tpshard.InvalidInputError, 3, "No such file or directory",
       lambda: tpshard.verify("/no/such/set"))
raises("InvalidInputError (3): inspect of a missing file", tpshard.InvalidInputError, 3, "No such file or directory",
       lambda: tpshard.inspect("/no/such/model.safetensors"))
raises("BackendUnavailable (5): the wheel has no cuda plugin", tpshard.BackendUnavailable, 5, "cuda",
       lambda: tpshard.verify("tp2", backend="cuda"))
# exit 4: the output's parent is a file, so the output directory cannot be made
open("afile", "w").close()
raises("IOFailure (4): the output cannot be created", tpshard.IOFailure, 4, "afile",
       lambda: tpshard.merge("tp2", "afile/sub/merged.safetensors"))

e = raises("MismatchError (1): verify of a wrong cut", tpshard.MismatchError, 1, "mismatch in layer 0",
           lambda: tpshard.verify(wrong))
res = getattr(e, "result", None)
t("MismatchError carries the report and the typed result naming the rank",
  e is not None and isinstance(e.report, dict) and isinstance(res, tpshard.VerifyResult) and not res.passed and
  res.layers[0].rank == 0 and res.layers[0].failed_stage == "attention", res)

# A byte flipped in rank 1's file: check's findings, in the report of the MismatchError.
os.system("cp -r tp2 flipped")
f1 = os.path.join("flipped", "model-rank-1-of-2.safetensors")
with open(f1, "r+b") as f:
    f.seek(os.path.getsize(f1) - 3)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
e = raises("MismatchError (1): check of a flipped byte", tpshard.MismatchError, 1, "finding",
           lambda: tpshard.check("flipped", junit="flipped.xml"))
t("the check report lists the findings", e is not None and isinstance(e.result, tpshard.CheckResult) and
  not e.result.ok and any("model-rank-1-of-2.safetensors" in x for x in e.result.findings),
  getattr(e, "report", None))

# Interrupted (130/143, or death by a signal): a stand-in binary that is stopped that way.
with tempfile.TemporaryDirectory() as d:
    for name, body in (("sigterm", "kill -TERM $$"), ("exit130", "exit 130"), ("exit143", "exit 143")):
        fake = os.path.join(d, name)
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'tpshard check: interrupted' >&2\n" + body + "\n")
        os.chmod(fake, stat.S_IRWXU)
        os.environ["TPSHARD_BIN"] = fake
        raises(f"Interrupted: {name}", tpshard.Interrupted, 143 if name != "exit130" else 130, "",
               lambda: tpshard.check("tp2"))
    del os.environ["TPSHARD_BIN"]
t("every class is a TpshardError", all(issubclass(c, tpshard.TpshardError) for c in (
    tpshard.MismatchError, tpshard.UsageError, tpshard.InvalidInputError, tpshard.IOFailure,
    tpshard.BackendUnavailable, tpshard.Interrupted)))
sys.exit(1 if failed else 0)
