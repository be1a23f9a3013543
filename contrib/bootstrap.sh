#!/bin/sh
# Installs vcsperf into ./.venv from nothing, on Debian or anything with
# python3 >= 3.9.  With --test it adds the test extras.  System packages it
# needs (git, python3-venv) are installed with apt-get when missing.
set -eu
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
apt_install() {
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

command -v git >/dev/null 2>&1 || apt_install git
if [ ! -x .venv/bin/python ]; then
    # Debian ships venv without ensurepip until python3-venv is installed.
    python3 -m venv .venv 2>/dev/null || {
        rm -rf .venv
        apt_install python3-venv
        python3 -m venv .venv
    }
fi
# html: the report page the demo writes (matplotlib).
extras="[html]"
[ "${1:-}" = "--test" ] && extras="[html,test]"
# setuptools builds in ./build and copies what it finds there into the
# install: a module since moved or removed would come back from it.
rm -rf build
.venv/bin/python -m pip install -q -c constraints.txt ".$extras"
