#!/bin/sh
# Builds CPython 3.13 into the cache (once) and prints its interpreter's
# path, so that the importer's tests also run on the 3.12+ tokenizer.
# Debian 12, CI's base, has Python 3.11 only, and no registry we reach
# ships a 3.12+ binary; Debian's archive does carry the upstream source,
# which is checked by its sha256 before it is built.
set -eu
version=3.13.5
sha256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
url=http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_$version.orig.tar.xz
cache=${VCSPERF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vcsperf}
prefix=$cache/python-$version
python=$prefix/bin/python3.13
if [ ! -e "$prefix/.complete" ]; then
    packages=""
    command -v curl >/dev/null 2>&1 || packages="$packages curl"
    command -v make >/dev/null 2>&1 || packages="$packages make"
    command -v cc >/dev/null 2>&1 || packages="$packages gcc"
    command -v xz >/dev/null 2>&1 || packages="$packages xz-utils"
    if [ -n "$packages" ]; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages >/dev/null
    fi
    mkdir -p "$cache"
    rm -rf "$prefix"
    work=$(mktemp -d "$cache/python-build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    curl -fsS -o "$work/src.tar.xz" "$url"
    echo "$sha256  $work/src.tar.xz" | sha256sum -c --quiet
    tar -C "$work" -xf "$work/src.tar.xz"
    if ! (cd "$work/Python-$version" &&
          ./configure --prefix="$prefix" --without-ensurepip &&
          make -j"$(nproc)" && make install) >"$work/build.log" 2>&1; then
        tail -30 "$work/build.log" >&2
        echo "abort: building Python $version failed (log above)" >&2
        exit 1
    fi
    "$python" -c 'import json, tokenize'
    touch "$prefix/.complete"
fi
echo "$python"
