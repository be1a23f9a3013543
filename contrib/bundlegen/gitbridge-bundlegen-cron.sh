#!/bin/sh
# Git clone bundles for every bare repository given as an argument, for
# cron (README.md in this directory has the crontab line).  Each
# repository's config carries its bundlegen settings (gitbridge bundlegen
# --help).  The virtualenv's gitbridge runs, not one on cron's PATH;
# VCSPERF_VENV names another virtualenv.  One failing repository does not
# stop the others; the exit status says whether any failed.
gitbridge=${VCSPERF_VENV:-/opt/vcsperf/venv}/bin/gitbridge
status=0
for repo in "$@"; do
    if ! "$gitbridge" bundlegen --repo "$repo"; then
        echo "gitbridge bundlegen failed for $repo (see above)" >&2
        status=1
    fi
done
exit $status
