"""What ``vcsperf check --quick`` works on: a repository of the newest
changesets of the copy, narrowed on a large tree to the files they touch
and a bounded sample of the rest, so that a quick run costs about the
same on any length of history and any size of tree.

The slice holds the newest ``slice_size(changesets)`` ancestors of the tip
(twice the square root of the history, at least ``MIN_SLICE``, at most
``MAX_SLICE``), written by ``hg check-slice`` (``checkcmds``) into a new
repository, in one transaction through Mercurial's own commit code: its
first changeset holds the tree of the oldest one (as a user's checkout
has it), then every changeset of the slice with its files, copies,
parents (within the slice), authors, dates, messages and phases; only
the changeset IDs differ (and a merge lists the files it changes as
core's commit does).  It costs about what ``hg commit`` does per
changeset, a tenth of ``hg convert``'s.

While the tip's files and the ones the slice touches are at most
``checkcmds.NARROW_ABOVE`` (10,000), the slice holds every file.  Above
that it holds the files its changesets touch (at most 8,000, spread over
their sorted names) and a sample of the rest of the tip's tree (1,000
files spread over their sorted names, and 200 of its Python files, which
the importer compiles): at most 9,200 files whatever the tree, and the
copy the slice is written from links only their filelogs
(``checkcmds.narrow_files``, ``copying.copy_repository``).  Every quick
feature runs on it end to end: conversion, bundles of the whole slice
beside core's, the pull of its last changesets, checkouts, commit IDs,
the importer on its tip.  The sample is given by the tip's node and the
slice's size, both in the report; ``--slice N`` runs the same sample
again (no random choice is made: the narrowing depends on the history
alone)."""

import math
import os

from vcsperf.check import checkcmds

#: The slice is this many times the square root of the history long ...
SLICE_FACTOR = 2
#: ... never shorter than this (a history shorter than it is whole) ...
MIN_SLICE = 200
#: ... and never longer than this, whatever the history.
MAX_SLICE = 1000
#: The file ``hg check-narrow`` writes the slice's files to, in the run's
#: scratch directory.
FILES_LIST = "slice-files"


def slice_size(changesets):
    """Changesets of the quick run's slice of a history of ``changesets``:
    it grows with the square root of the history, up to ``MAX_SLICE``."""
    return min(changesets, MAX_SLICE, max(
        MIN_SLICE, int(SLICE_FACTOR * math.sqrt(changesets))))


def slice_args(check, size):
    """The arguments ``hg check-narrow`` and ``check-slice`` take for the
    slice: the tip the survey found, and the ``size`` of its ancestors
    the slice holds."""
    return [check.info["tip"], str(size)]


def _checkcmds(check):
    return ["--config", "extensions.checkcmds=%s" % checkcmds.__file__]


def narrow_filelogs(check, size, copy):
    """The filelogs (names in the store) the slice of ``size`` changesets
    needs from the copy ``copy`` of the store, which has the changelog and
    the manifests: None for all of them, when the slice keeps every file;
    else the slice's files are written to ``FILES_LIST``."""
    listed = check.path(FILES_LIST)
    if os.path.exists(listed):
        os.unlink(listed)
    out = check.hg([*_checkcmds(check), "-R", copy, "check-narrow",
                    *slice_args(check, size), listed], check.hg_env())
    names = [os.fsdecode(bytes.fromhex(line)) for line in out.split()]
    return names or None


def build_slice(check, size, dest):
    """Write the newest ``size`` ancestors of the copy's tip into a new
    repository ``dest`` (narrowed to ``FILES_LIST`` when there is one);
    returns its number of changesets."""
    listed = check.path(FILES_LIST)
    return int(check.hg([*_checkcmds(check), "-R", check.copy,
                         "check-slice", *(["--files", listed]
                                          if os.path.exists(listed) else []),
                         *slice_args(check, size), dest], check.hg_env()))
