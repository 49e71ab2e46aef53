#!/bin/sh
# The Python distribution (issue 38): the sdist and wheel pyproject.toml builds from this
# checkout (python -m build --no-isolation: Debian's setuptools and wheel, no download), its platform
# tag against auditwheel, the sdist's contents; the wheel installed with --no-index into a
# fresh venv (no system site packages, nothing of the source tree): tpshard --version, the
# binary needing only the C library, python -m tpshard, the API on the bundled tiny Llama
# (tests/interop/wheel/pip_api.py: typed results and each exception class), JUnit reports of check and
# verify parsed and validated against the JUnit schema (tests/schema/junit.xsd) and read by junitparser, and the GitHub Actions
# and GitLab jobs of docs/ci.md run as written, pip finding the wheel through PIP_FIND_LINKS.
# Needs build/venv-wheel (tests/interop/wheel/setup_wheel.sh, run by .ci/deps.sh test): without it
# the tier skips loudly, or fails when TPS_PYWHEEL=1 or ci (.ci/run) asks for it;
# TPS_PYWHEEL=0 leaves it out (the sanitized runs: they judge memory, not packaging).
. "${TPS_TOP:-$(cd "$(dirname "$0")/../../.." && pwd)}/tests/cli/lib.sh"

PYW="$TPS_TOP/build/venv-wheel/bin/python3"
case "${TPS_PYWHEEL:-auto}" in
0)
    skip "pip_wheel: TPS_PYWHEEL=0 leaves the Python distribution's tier out"
    exit 0
    ;;
esac
if ! "$PYW" -c 'import build, auditwheel, xmlschema, yaml, setuptools, wheel' >/dev/null 2>&1 ||
    ! /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || ! command -v readelf >/dev/null 2>&1; then
    why="the wheel tier's tools are not installed: build/venv-wheel with build, auditwheel, xmlschema, PyYAML, and python3-venv, readelf (sh tests/interop/wheel/setup_wheel.sh)"
    case "${TPS_PYWHEEL:-auto}" in
    1 | ci) notok "pip_wheel: TPS_PYWHEEL=${TPS_PYWHEEL} asks for this tier, but $why" ;;
    *) skip "pip_wheel: $why" ;;
    esac
    exit 0
fi
version=$(sed -n 's/^version = "\([^"]*\)".*/\1/p' "$TPS_TOP/pyproject.toml")

# --- build: the sdist from the checkout, the wheel from the sdist (a full compile of the C
# sources in the unpacked sdist, about 30 s on 2 cores), as python -m build does ---
if ! (cd "$TPS_TOP" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "$PYW" -m build --no-isolation \
    --outdir "$T/dist" . >"$T/build.log" 2>&1); then
    notok "python -m build --no-isolation builds the sdist, and the wheel from it"
    tail -20 "$T/build.log" | sed 's/^/#   /'
    exit 0
fi
ok "python -m build --no-isolation builds the sdist, and the wheel from it"
whl=$(ls "$T"/dist/tpshard-"$version"-py3-none-*.whl 2>/dev/null | head -1)
sdist=$(ls "$T"/dist/tpshard-"$version".tar.gz 2>/dev/null | head -1)
tag=${whl##*py3-none-}
tag=${tag%.whl}
[ -n "$whl" ] && [ -n "$sdist" ] && ok "pip_wheel: tpshard-$version: $(basename "$whl"), $(basename "$sdist")" ||
    { notok "pip_wheel: the wheel and sdist of version $version"; ls "$T/dist" | sed 's/^/#   /'; exit 0; }
"$PYW" -m auditwheel show "$whl" >"$T/audit" 2>&1
if tr -s '\n ' '  ' <"$T/audit" | grep -q "consistent with the following platform tag: \"$tag\"" && case $tag in manylinux_2_*) true ;; *) false ;; esac; then
    ok "auditwheel: the wheel's tag $tag is the one its binary allows"
else
    notok "auditwheel: the wheel's tag $tag is the one its binary allows"
    sed 's/^/#   /' "$T/audit" | head -12
fi
unzip -Z1 "$whl" >"$T/whl.list" 2>/dev/null || "$PYW" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$whl" >"$T/whl.list"
grep -qx "tpshard-$version.data/data/bin/tpshard" "$T/whl.list" &&
    grep -qx "tpshard-$version.data/data/lib/tpshard/libtpshard-devsim.so" "$T/whl.list" &&
    grep -qx -e "tpshard/__init__.py" -e "tpshard-$version.data/purelib/tpshard/__init__.py" "$T/whl.list" &&
    ok "the wheel holds bin/tpshard, lib/tpshard/libtpshard-devsim.so and the tpshard package" ||
    { notok "the wheel holds bin/tpshard, lib/tpshard/libtpshard-devsim.so and the tpshard package"; sed 's/^/#   /' "$T/whl.list"; }
tar -tzf "$sdist" | sed "s|^tpshard-$version/||" >"$T/sdist.list"
miss=
for f in Makefile pyproject.toml README.md cmd/main.c cmd/python/tpshard_build.py cmd/python/python.mk \
    cmd/python/tpshard/__init__.py lib/base/junit.c lib/presets/llama.yaml lib/presets/embed.sh \
    formats/open/checkpoint.h verify/backends/gpu.mk verify/backends/devsim/devsim.c tests/fuzz/fuzz.mk tests/bench/bench.mk; do
    grep -qx "$f" "$T/sdist.list" || miss="$miss $f"
done
[ -z "$miss" ] && ! grep -q '\.o$' "$T/sdist.list" && ok "the sdist holds the C sources, the Makefile and its fragments" ||
    notok "the sdist holds the C sources, the Makefile and its fragments (missing:$miss)"

# --- a fresh venv, the wheel alone ---
/usr/bin/python3 -m venv "$T/venv" >/dev/null 2>&1 || { notok "python3 -m venv"; exit 0; }
if "$T/venv/bin/python" -m pip install -q --no-index --find-links "$TPS_TOP/build/wheelhouse" \
    --disable-pip-version-check "$whl" >"$T/pip.log" 2>&1; then
    ok "pip install --no-index of the wheel and its dependency (scipy-openblas32) into a fresh venv (no system site packages)"
else
    notok "pip install --no-index of the wheel into a fresh venv"
    tail -5 "$T/pip.log" | sed 's/^/#   /'
    exit 0
fi
# The PATH a fresh shell has, less any directory that holds a tpshard (readme.sh's rule).
clean_path=$(path_without_tpshard)
mkdir "$T/work" && cp -R "$FIX" "$T/work/testdata"
cd "$T/work" || exit 1
V="$T/venv/bin"
got=$(env -u TPSHARD_BIN PATH="$V:$clean_path" tpshard --version 2>&1)
[ "$got" = "tpshard $version" ] && [ "$(env PATH="$V:$clean_path" sh -c 'command -v tpshard')" = "$V/tpshard" ] &&
    ok "tpshard --version from the venv's bin/: $got (pyproject.toml says $version)" ||
    notok "tpshard --version from the venv's bin/: '$got', pyproject.toml says $version"
libs=$(ldd "$V/tpshard" 2>&1 | awk '{print $1}' | grep -v -e '^linux-vdso' -e '^/lib.*/ld-linux' -e '^libc\.so' -e '^libm\.so' \
    -e '^libdl\.so' -e '^libpthread\.so' -e '^librt\.so' | tr '\n' ' ')
[ -z "$libs" ] && ok "the installed binary needs only the C library (ldd: no libz, no libyaml)" ||
    notok "the installed binary needs only the C library; ldd also names: $libs"
got=$(env -u TPSHARD_BIN PATH="$clean_path" "$V/python" -m tpshard --version 2>&1)
[ "$got" = "tpshard $version" ] && ok "python -m tpshard runs the CLI: $got" || notok "python -m tpshard --version: $got"

# verify's BLAS in a pip install is the scipy-openblas32 the wheel depends on, found beside the
# executable where the system's OpenBLAS cannot be seen (issue 46), and named by the API too.
TPS="$V/tpshard"
"$TPS" split testdata/models/tiny-llama --tp 2 -q -o blas-tp2 || notok "split of the tiny llama"
if blas_hidden true 2>/dev/null; then
    gemm=$(blas_hidden "$TPS" verify blas-tp2 --json 2>blas.err | sed -n 's/.*"gemm": *"\([^"]*\)".*/\1/p')
    case "$gemm" in *"(libscipy_openblas.so)") ok "the installed tpshard finds scipy-openblas32 with the system's BLAS hidden: $gemm" ;;
    *) notok "the installed tpshard finds scipy-openblas32 with the system's BLAS hidden: '$gemm'"; sed 's/^/#   /' blas.err ;; esac
else
    skip "the installed tpshard without the system's BLAS: this machine does not let the test hide it (unshare -m)"
fi
got=$(env -u TPSHARD_BLAS "$V/python" -c 'from tpshard import _cli; print(_cli.blas_library() or "")')
case "$got" in "$T/venv/lib/python"*/site-packages/scipy_openblas32/lib/libscipy_openblas.so) ok "the API names scipy-openblas32's library for \$TPSHARD_BLAS" ;;
*) notok "the API names scipy-openblas32's library for \$TPSHARD_BLAS: '$got'" ;; esac

# A set cut the wrong way (layer 0's o_proj by columns): intact bytes, the wrong model.
"$TPS" layout --preset llama >base.yaml
awk '{ print } /^rules:/ { print "  - match: model.layers.0.self_attn.o_proj.weight\n    split: column\n    unit: head_dim" }' \
    base.yaml >wrong.yaml
"$TPS" split testdata/models/tiny-llama --tp 2 --layout wrong.yaml --config testdata/models/tiny-llama/config.json \
    -o wrong -q || notok "split of the wrong cut"

# --- the API, in the venv's interpreter, with the source tree out of its path ---
env -u TPSHARD_BIN -u PYTHONPATH PATH="$clean_path" "$V/python" "$TPS_TOP/tests/interop/wheel/pip_api.py" testdata wrong \
    >api.out 2>&1
rc=$?
cat api.out
[ $rc -eq 0 ] || grep -q '^not ok' api.out || notok "pip_api.py exited $rc"

# --- JUnit reports: a wrong cut's verify and a flipped byte's check, parsed and validated ---
env PATH="$V:$clean_path" tpshard verify wrong --junit wrong.xml -q >/dev/null 2>&1
rc=$?
env PATH="$V:$clean_path" tpshard split testdata/models/tiny-llama/model.safetensors --tp 2 -o good -q 2>/dev/null
env PATH="$V:$clean_path" tpshard verify good --junit good.xml -q >/dev/null 2>&1
env PATH="$V:$clean_path" tpshard check flipped --junit flipped.xml -q >/dev/null 2>&1 # made by pip_api.py
env PATH="$V:$clean_path" tpshard check /no/such/set --junit missing.xml >/dev/null 2>&1
cat >junit_check.py <<'PY'
import sys
import xml.etree.ElementTree as ET
import junitparser
import xmlschema
top, rc = sys.argv[1], int(sys.argv[2])
schema = xmlschema.XMLSchema(f"{top}/tests/schema/junit.xsd")
def case(name, cond, why=""):
    print(("ok - " if cond else "not ok - ") + "junit: " + name)
    if not cond and why:
        print("#   " + str(why))
def counts(f):
    """What junitparser, a reader CI tooling uses, counts in f: tests, failures, errors."""
    suites = junitparser.JUnitXml.fromfile(f)
    suites = [suites] if isinstance(suites, junitparser.TestSuite) else list(suites)
    tally = [0, 0, 0]
    for suite in suites:
        for c in suite:
            tally[0] += 1
            kinds = {type(r).__name__ for r in c.result}
            tally[1] += "Failure" in kinds
            tally[2] += "Error" in kinds
    return tally
for f in ("wrong.xml", "good.xml", "flipped.xml", "missing.xml", "v1.xml"):
    errs = list(schema.iter_errors(f))
    case(f"{f} is valid against the JUnit schema (tests/schema/junit.xsd)", not errs, errs[:1])
    root = ET.parse(f).getroot()
    said = [int(root.get(k)) for k in ("tests", "failures", "errors")]
    case(f"{f}: junitparser reads the cases the suite counts", counts(f) == said, (counts(f), said))
# The schema can say no: the wrong cut's report with its failure's message taken away, and
# with a second failure in the case, each fails it.
for what, edit in (("a failure without its message", lambda c: c.find("failure").attrib.pop("message")),
                   ("a case with two failures", lambda c: c.append(c.find("failure")))):
    doc = ET.parse("wrong.xml")
    edit(next(c for c in doc.getroot().iter("testcase") if c.find("failure") is not None))
    doc.write("planted.xml")
    case(f"the schema rejects {what}", not schema.is_valid("planted.xml"))
w = ET.parse("wrong.xml").getroot()
fails = [c for c in w.iter("testcase") if c.find("failure") is not None]
case("verify of a wrong cut exits 1 and its report has one failing case, naming the rank",
     rc == 1 and w.get("failures") == "1" and len(fails) == 1 and fails[0].get("name") == "layer 0"
     and "rank 0" in fails[0].find("failure").get("message"), (rc, [ET.tostring(c)[:300] for c in fails]))
case("the suite's time is the whole run's, every layer a case", float(w.get("time")) >= sum(
    float(c.get("time")) for c in w.iter("testcase")) * 0.99 and w.get("tests") == "2")
g = ET.parse("good.xml").getroot()
case("a verify that passes: two passing cases", g.get("tests") == "2" and g.get("failures") == "0")
fl = ET.parse("flipped.xml").getroot()
bad = [c.get("name") for c in fl.iter("testcase") if c.find("failure") is not None]
case("check of a flipped byte: one case per rank file, rank 1's fails",
     bad == ["rank 1: model-rank-1-of-2.safetensors"] and fl.get("tests") == "3", bad)
m = ET.parse("missing.xml").getroot()
case("check of a missing set: an errored case with the message",
     m.get("errors") == "1" and "No such file or directory" in m.find("testcase/error").get("message"))
PY
"$PYW" junit_check.py "$TPS_TOP" "$rc"
ls .tpshard* .*.tmp.* 2>/dev/null | grep -q . && notok "a temporary report file was left behind" ||
    ok "no temporary report file left behind"

# --- docs/ci.md: its GitHub Actions and GitLab jobs, run as written ---
# A fresh venv stands in for the runner's Python (setup-python's; the python image's), pip
# finds the wheel (and its scipy-openblas32) through PIP_NO_INDEX/PIP_FIND_LINKS as it would
# your index; each `run:` step runs in bash -e, each GitLab script line in one bash -e; `uses:` steps are the
# runner's (checkout, publishing), not run here.
cat >jobs.py <<'PY'
import re, sys, yaml
text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"^```yaml (github-actions|gitlab-ci)\n(.*?)^```", text, re.S | re.M)
kinds = set()
for kind, body in blocks:
    doc = yaml.safe_load(body)
    kinds.add(kind)
    if kind == "github-actions":
        for name, job in doc["jobs"].items():
            env = dict(job.get("env", {}))
            steps = [s["run"] for s in job["steps"] if "run" in s]
            with open(f"{kind}.{name}.sh", "w") as f:
                for k, v in env.items():
                    f.write(f"export {k}='{v}'\n")
                for i, s in enumerate(steps):
                    f.write(f"bash -e <<'STEP{i}'\n{s}\nSTEP{i}\n")
    else:
        for name, job in doc.items():
            if not isinstance(job, dict) or "script" not in job:
                continue
            with open(f"{kind}.{name}.sh", "w") as f:
                for k, v in dict(job.get("variables", {})).items():
                    f.write(f"export {k}='{v}'\n")
                f.write("bash -e <<'SCRIPT'\n" + "\n".join(job["script"]) + "\nSCRIPT\n")
print(" ".join(sorted(kinds)))
PY
kinds=$("$PYW" jobs.py "$TPS_TOP/docs/ci.md" 2>&1)
[ "$kinds" = "github-actions gitlab-ci" ] && ok "docs/ci.md has a GitHub Actions job and a GitLab job" ||
    notok "docs/ci.md has a GitHub Actions job and a GitLab job: $kinds"
for job in github-actions.*.sh gitlab-ci.*.sh; do
    [ -f "$job" ] || continue
    dir="$T/job.$job"
    mkdir "$dir" && cp -R "$FIX" "$dir/testdata"
    /usr/bin/python3 -m venv "$dir/.runner-python" >/dev/null 2>&1
    (cd "$dir" && env -u TPSHARD_BIN PATH="$dir/.runner-python/bin:$clean_path" PIP_NO_INDEX=1 PIP_FIND_LINKS="$T/dist $TPS_TOP/build/wheelhouse" \
        PIP_DISABLE_PIP_VERSION_CHECK=1 sh -e "$T/work/$job") >"$job.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ -s "$dir/reports/check.xml" ] && [ -s "$dir/reports/verify.xml" ] &&
        "$PYW" -c 'import sys, xmlschema
s = xmlschema.XMLSchema(sys.argv[1] + "/tests/schema/junit.xsd")
[s.validate(f) for f in sys.argv[2:]]' "$TPS_TOP" "$dir/reports/check.xml" "$dir/reports/verify.xml" 2>"$job.val"; then
        ok "docs/ci.md ${job%.sh}: installs with pip, splits, checks, verifies; its reports are valid JUnit"
    else
        notok "docs/ci.md ${job%.sh}: exit $rc"
        tail -8 "$job.out" "$job.val" | sed 's/^/#   /'
    fi
done
