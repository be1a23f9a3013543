"""What ``vcsperf check --quick`` works on: a repository of the newest
changesets of the copy, so that a quick run costs about the same on any
length of history.

The slice holds the newest ``slice_size(changesets)`` ancestors of the tip,
written by ``hg check-slice`` (``checkcmds``) into a new repository, in
one transaction through Mercurial's own commit code: its first changeset
holds the whole tree of the oldest one (the tree at that point, as a
user's checkout has it), then every changeset of the slice with its files,
copies, parents (within the slice), authors, dates, messages and phases;
only the changeset IDs differ (and a merge lists the files it changes as
core's commit does).  It costs about what ``hg commit`` does per
changeset, a tenth of ``hg convert``'s.  Every quick feature runs on it
end to end: conversion, bundles of the whole slice beside core's, the pull of its last
changesets, checkouts, commit IDs, the importer on its tip.  The sample is
given by the tip's node and the slice's size, both in the report; ``--slice
N`` runs the same sample again (no random choice is made)."""

import math

from vcsperf.check import checkcmds

#: The slice is this many times the square root of the history long ...
SLICE_FACTOR = 2
#: ... and never shorter than this (a history shorter than it is whole).
MIN_SLICE = 200


def slice_size(changesets):
    """Changesets of the quick run's slice of a history of ``changesets``:
    it grows with the square root of the history."""
    return min(changesets, max(MIN_SLICE,
                               int(SLICE_FACTOR * math.sqrt(changesets))))


def build_slice(check, size, dest):
    """Write the newest ``size`` ancestors of the copy's tip into a new
    repository ``dest``; returns its number of changesets."""
    return int(check.hg(["--config", "extensions.checkcmds=%s"
                         % checkcmds.__file__, "-R", check.copy,
                         "check-slice", "last(::%s, %d)"
                         % (check.info["tip"], size), dest],
                        check.hg_env()))
