#!/bin/sh
# Installs Debian's chromium when the machine lacks it, and prints its
# path: tests/test_check_page.py renders the report page of vcsperf check
# in it (headless) and reads the page as the browser left it.
set -eu
if ! command -v chromium >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
command -v chromium
