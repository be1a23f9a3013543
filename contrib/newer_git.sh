#!/bin/sh
# Builds Git 2.47 into the cache (once) and prints its git's path, so that
# the tests of gitbridge bundlegen's advertised bundle lists run a server
# and a client that speak protocol v2's bundle-uri command (Git 2.40 and
# later; Debian 12, CI's base, has 2.39).
set -eu
. "$(dirname "$0")/debian_source.sh"
version=2.47.3
prefix=$cache/git-$version
build_once "$prefix" \
    9c2eb1250781b3e5bfef098572d07fdf132d67e6c065e4307332ade9819a1501 \
    "http://deb.debian.org/debian/pool/main/g/git/git_$version.orig.tar.xz" \
    "git-$version" \
    "/usr/include/zlib.h:zlib1g-dev /usr/include/expat.h:libexpat1-dev
     curl-config:libcurl4-openssl-dev" \
    'make -j"$(nproc)" prefix="$prefix" NO_GETTEXT=1 NO_TCLTK=1 NO_PERL=1 \
         NO_PYTHON=1 NO_INSTALL_HARDLINKS=1 install'
git=$prefix/bin/git
if [ ! -e "$prefix/.complete" ]; then
    "$git" --version >/dev/null
    touch "$prefix/.complete"
fi
echo "$git"
