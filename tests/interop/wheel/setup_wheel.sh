#!/bin/sh
# Installs what tests/interop/wheel/pip_wheel.sh (the Python distribution's tier) needs, only what is
# missing, saying what it does:
#   Debian: python3-venv, python3-setuptools and python3-wheel (the build backend the test
#     builds with, --no-build-isolation: setuptools 66, wheel 0.38 on Debian 12), python3-yaml
#     (reading docs/ci.md's jobs), binutils (readelf: the wheel's platform tag);
#   build/venv-wheel: a venv on /usr/bin/python3 that sees those, with PyPI's build,
#     auditwheel, xmlschema and junitparser, pinned.
# The fresh venv the wheel is installed into is made by the test itself, without these.
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=
for p in python3-venv python3-setuptools python3-wheel python3-yaml binutils; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "wheel setup: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
venv="$top/build/venv-wheel"
pins="build==1.2.2.post1 auditwheel==6.1.0 xmlschema==3.4.3 junitparser==5.0.3"
if [ ! -x "$venv/bin/python3" ]; then
    echo "wheel setup: creating $venv (system site packages visible: Debian's setuptools and wheel)"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python3" -c 'import build, auditwheel, xmlschema, junitparser' >/dev/null 2>&1; then
    echo "wheel setup: installing $pins from PyPI into $venv"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check $pins
fi
# The wheel's one dependency (pyproject.toml pins it), for tests/interop/wheel/pip_wheel.sh's offline
# install: --no-index --find-links build/wheelhouse.
openblas_pin=$(sed -n 's/^dependencies = \["\(scipy-openblas32==[^"]*\)"\]/\1/p' "$top/pyproject.toml")
if ! ls "$top/build/wheelhouse/scipy_openblas32-${openblas_pin#*==}-"*.whl >/dev/null 2>&1; then
    echo "wheel setup: downloading $openblas_pin from PyPI into $top/build/wheelhouse"
    "$venv/bin/python3" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$top/build/wheelhouse" "$openblas_pin"
fi
"$venv/bin/python3" -c 'import setuptools, wheel, yaml, build, xmlschema; from importlib.metadata import version as v; print("wheel setup: setuptools", setuptools.__version__, "wheel", wheel.__version__, "build", v("build"), "auditwheel", v("auditwheel"), "xmlschema", xmlschema.__version__, "junitparser", v("junitparser"))'
