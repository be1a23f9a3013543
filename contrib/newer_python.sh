#!/bin/sh
# Builds CPython 3.13 into the cache (once) and prints its interpreter's
# path, so that the importer's tests also run on the 3.12+ tokenizer.
# Debian 12, CI's base, has Python 3.11 only, and no registry we reach
# ships a 3.12+ binary.
set -eu
. "$(dirname "$0")/debian_source.sh"
version=3.13.5
prefix=$cache/python-$version
build_once "$prefix" \
    93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640 \
    "http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_$version.orig.tar.xz" \
    "Python-$version" "" \
    './configure --prefix="$prefix" --without-ensurepip && make -j"$(nproc)" && make install'
python=$prefix/bin/python3.13
if [ ! -e "$prefix/.complete" ]; then
    "$python" -c 'import json, tokenize'
    touch "$prefix/.complete"
fi
echo "$python"
