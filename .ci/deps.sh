#!/bin/sh
# Installs what tpshard needs on Debian/Ubuntu, only what is missing, and says what it does.
#   sh .ci/deps.sh build   compiler, make, pkg-config, zlib and libyaml headers
#   sh .ci/deps.sh test    the above, plus OpenMPI and the interop tier's Python packages
#                          (Debian's python3-torch and python3-numpy, PyPI's safetensors in build/venv)
set -eu
what=${1:-build}
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
pkgs="gcc make pkg-config zlib1g-dev libyaml-dev"
[ "$what" = test ] && pkgs="$pkgs python3 python3-venv python3-torch python3-numpy openmpi-bin libopenmpi-dev"
missing=
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "deps: Debian packages present: $pkgs"
fi
if [ "$what" = test ]; then
    sh "$(dirname "$0")/../tests/interop/setup.sh"
fi
