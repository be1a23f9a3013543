#!/bin/sh
# Builds Git 2.47 into the cache (once) and prints its git's path, so that
# the tests of gitbridge bundlegen's advertised bundle lists run a server
# and a client that speak protocol v2's bundle-uri command (Git 2.40 and
# later; Debian 12, CI's base, has 2.39).  Debian's archive carries the
# upstream source, which is checked by its sha256 before it is built.
set -eu
version=2.47.3
sha256=9c2eb1250781b3e5bfef098572d07fdf132d67e6c065e4307332ade9819a1501
url=http://deb.debian.org/debian/pool/main/g/git/git_$version.orig.tar.xz
cache=${VCSPERF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vcsperf}
prefix=$cache/git-$version
git=$prefix/bin/git
if [ ! -e "$prefix/.complete" ]; then
    packages=""
    command -v curl >/dev/null 2>&1 || packages="$packages curl"
    command -v make >/dev/null 2>&1 || packages="$packages make"
    command -v cc >/dev/null 2>&1 || packages="$packages gcc"
    command -v xz >/dev/null 2>&1 || packages="$packages xz-utils"
    [ -e /usr/include/zlib.h ] || packages="$packages zlib1g-dev"
    [ -e /usr/include/expat.h ] || packages="$packages libexpat1-dev"
    command -v curl-config >/dev/null 2>&1 ||
        packages="$packages libcurl4-openssl-dev"
    if [ -n "$packages" ]; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages >/dev/null
    fi
    mkdir -p "$cache"
    rm -rf "$prefix"
    work=$(mktemp -d "$cache/git-build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    curl -fsS -o "$work/src.tar.xz" "$url"
    echo "$sha256  $work/src.tar.xz" | sha256sum -c --quiet
    tar -C "$work" -xf "$work/src.tar.xz"
    if ! (cd "$work/git-$version" &&
          make -j"$(nproc)" prefix="$prefix" NO_GETTEXT=1 NO_TCLTK=1 \
              NO_PERL=1 NO_PYTHON=1 NO_INSTALL_HARDLINKS=1 install) \
            >"$work/build.log" 2>&1; then
        tail -30 "$work/build.log" >&2
        echo "abort: building Git $version failed (log above)" >&2
        exit 1
    fi
    "$git" --version >/dev/null
    touch "$prefix/.complete"
fi
echo "$git"
