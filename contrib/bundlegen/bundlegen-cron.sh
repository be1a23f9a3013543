#!/bin/sh
# Daily clone bundle generation for every repository given as an argument,
# for cron:
#   15 3 * * *  hg  /usr/local/bin/bundlegen-cron.sh /srv/hg/myrepo /srv/hg/other
# Each repository's .hg/hgrc carries its [bundlegen] settings (see
# hgrc.example).  It runs the hg of vcsperf's virtualenv (the layout of
# README.md in this directory; cron's PATH finds another hg or none), or
# the one $HG names:
#   15 3 * * *  hg  HG=/usr/local/venv/bin/hg /usr/local/bin/bundlegen-cron.sh /srv/hg/myrepo
# One failing repository does not stop the others; the exit status says
# whether any failed.
HG="${HG:-/opt/vcsperf/venv/bin/hg}"
status=0
for repo in "$@"; do
    if ! "$HG" -R "$repo" bundlegen; then
        echo "bundlegen failed for $repo; its manifest is unchanged" >&2
        status=1
    fi
done
exit $status
