"""What ``vcsperf check --quick`` works on: a repository of the newest
changesets of the copy, so that a quick run costs about the same on any
length of history.

The slice holds the newest ``slice_size(changesets)`` ancestors of the tip,
converted by core's ``hg convert`` into a new repository: its first
changeset holds the whole tree of the oldest one (the tree at that point,
as a user's checkout has it), then every changeset of the slice with its
files, parents (within the slice), authors and messages; only the
changeset IDs differ.  Every quick feature runs on it end to end:
conversion, bundles of the whole slice beside core's, the pull of its last
changesets, checkouts, commit IDs, the importer on its tip.  The sample is
given by the tip's node and the slice's size, both in the report; ``--slice
N`` runs the same sample again (no random choice is made)."""

import math

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
    """Convert the newest ``size`` ancestors of the copy's tip into a new
    repository ``dest``; returns its number of changesets."""
    env = check.hg_env(["convert"], "[convert]\nskiptags = true\n")
    check.hg(["convert", "--config", "convert.hg.revs=last(::%s, %d)"
              % (check.info["tip"], size), check.copy, dest], env)
    return int(check.hg(["log", "-R", dest, "-r", "tip", "-T", "{rev}"],
                        check.hg_env())) + 1
