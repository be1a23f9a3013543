"""What ``vcsperf check`` learns of the repository before it starts
(``survey``), and the time and free disk it estimates the run needs from
that: each feature's rates (its row in ``features``) times the amounts
they are per, here.  The report compares both with what the run took."""

import os
import tempfile

from vcsperf.check import sample, tree
from vcsperf.check.commitid import rewritten
from vcsperf.check.importer import QUICK_FILES
from vcsperf.core import pooling
from vcsperf.core.errors import Abort
from vcsperf.harness import measure, tools

#: Room kept free beyond the estimate, for what the filesystem itself
#: needs and for surprises.
DISK_MARGIN = 256 * 2**20
#: Files of the run beside the features': the copy's own requirements and
#: caches, hgrc files, server logs.
SMALL_FILES = 2**20
#: What a time rate is seconds per (``Feature.seconds_per``).
TIME_UNITS = {
    "run": "the part itself, a fixed time",
    "MB": "MB of the store the features work on (the copy's, or with "
          "--quick the slice's)",
    "store MB": "MB of the original store",
    "changesets": "changeset of the slice (writing it)",
    "kchangesets": "thousand changesets the features work on",
    "kfiles": "thousand files at the tip",
    "Python kfiles": "thousand Python files compiled",
    "rewritten": "changeset the commit IDs feature rewrites",
}
#: What a disk rate is bytes per (``Feature.disk_per``), as allocated on
#: disk (whole blocks, and directories).
DISK_UNITS = {
    "work": "byte of the store the features work on",
    "pulled": "byte of a clone by pull of it: it stores the deltas it "
              "computes, beside a journal (up to 1.1 times the store "
              "measured, a quarter kept)",
    "tree": "byte of a checkout of the tip",
    "checkouts": "byte of the checkouts of the checkouts features (each "
                 "revision's, and a plain clone's beside them)",
    "git": "byte of the Git repository (--git)",
}
#: Seconds the copy of the repository takes, per TIME_UNITS: hardlinking
#: it, writing the slice, listing the tip.
COPY_SECONDS_PER = {"run": 0.5, "store MB": 0.002, "changesets": 0.036,
                    "kfiles": 0.5}


def _directories_bytes(top):
    """Bytes the directories under ``top`` (itself included) take: what a
    hardlinked copy of the tree costs."""
    return sum(os.lstat(os.path.join(root, name)).st_blocks * 512
               for root, dirs, _ in os.walk(top) for name in dirs) + \
        os.lstat(top).st_blocks * 512


def _checkout_disk_bytes(paths, sizes, block):
    """Bytes a checkout of files of ``sizes`` at ``paths`` takes: each file
    in whole blocks, and a block per directory."""
    directories = {os.path.dirname(path) for path in paths}
    for directory in list(directories):
        while directory:
            directory = os.path.dirname(directory)
            directories.add(directory)
    return block * (sum(-(-size // block) for size in sizes)
                    + len(directories))


def _engine(source):
    """The revlog compression engine ``source`` uses, by its
    requirements."""
    requires = set()
    for name in ("requires", os.path.join("store", "requires")):
        try:
            with open(os.path.join(source, ".hg", name)) as fh:
                requires.update(fh.read().split())
        except FileNotFoundError:
            pass
    return ("zstd-dict" if "exp-compression-zstd-dict" in requires
            else "zstd" if "revlog-compression-zstd" in requires
            else "zlib")


def _tip(source, env):
    """The tip's revision number in ``source``, a readable repository
    with changesets."""
    try:
        tip = tools.hg(["log", "-R", source, "-r", "tip", "-T", "{rev}"],
                       env)
    except tools.CommandError as err:
        lines = err.stderr.strip().splitlines() or ["exit %d"
                                                    % err.returncode]
        raise Abort("hg cannot read %s: %s" % (source, lines[-1]),
                    hint="check it with hg verify, or enable the "
                    "extensions it needs")
    if tip == "-1":
        raise Abort("%s has no changesets" % source)
    return int(tip)


def survey(source, git, quick):
    """What the run works on: the repository ``source`` (and ``git``, when
    given) checked, and its sizes and counts, which the report starts
    with."""
    if not os.path.isdir(os.path.join(source, ".hg")):
        raise Abort("%s is not a Mercurial repository" % source,
                    hint="give --repo the directory that holds .hg")
    if git and not os.path.exists(os.path.join(git, "HEAD")) \
            and not os.path.isdir(os.path.join(git, ".git")):
        raise Abort("%s is not a Git repository" % git,
                    hint="give --git a clone or a bare repository")
    env = tools.isolated_env(tempfile.gettempdir())
    tip = _tip(source, env)
    files = tree.files(tools.hg, source, "tip", env)
    sizes = [f.size for f in files]
    return {
        "repository": source,
        # hidden ones too, until the copy counts the visible ones
        # (counting them here would write the original's caches)
        "changesets": tip + 1,
        "store_bytes": measure.store_bytes(source)["total"],
        # What they take on disk: whole blocks, and directories.
        "store_disk_bytes": pooling.disk_usage(
            os.path.join(source, ".hg", "store")),
        "directories_bytes": _directories_bytes(
            os.path.join(source, ".hg")),
        "checkout_bytes": sum(sizes),
        "checkout_disk_bytes": _checkout_disk_bytes(
            [f.path for f in files], sizes, os.statvfs(source).f_frsize),
        "files_at_tip": len(sizes),
        "python_files_at_tip": sum(f.path.endswith(".py") for f in files),
        "engine": _engine(source),
        "hg_version": tools.hg(["version", "-T", "{ver}"], env),
        "tip": tools.hg(["log", "-R", source, "-r", "tip", "-T",
                         "{node}"], env),
        "quick": quick,
    }


def slice_changesets(info, slice_size):
    """Changesets of the slice ``--quick`` works on (``slice_size``, the
    ``--slice`` given, or by the length of the history)."""
    return slice_size or sample.slice_size(info["changesets"])


def sliced(info, quick, slice_size):
    """Whether the features work on a slice of the history (with
    ``--quick``, unless the history is no longer than the slice)."""
    return quick and slice_changesets(info, slice_size) < info["changesets"]


def _work_bytes(info, quick, slice_size):
    """Bytes of the store the features work on: the copy's, or the
    slice's (its share of the history, and its first changeset's whole
    tree, compressed)."""
    store = info["store_disk_bytes"]
    if not sliced(info, quick, slice_size):
        return store
    share = slice_changesets(info, slice_size) / info["changesets"]
    return int(store * share) + info["checkout_disk_bytes"] // 2


def disk(features, info, quick, slice_size, checkouts, same_fs, git):
    """``{part: bytes}``: the disk the copy of the repository takes with
    the run's small files (``"copy"``; when hardlinked (``same_fs``),
    only its directories; with ``--quick``, with the slice), and what each
    of ``features`` takes at its peak besides; ``checkouts``, the
    revisions the checkouts features check out; ``git``, the Git
    repository or None."""
    work = _work_bytes(info, quick, slice_size)
    tree = info["checkout_disk_bytes"]
    amounts = {"work": work, "pulled": work + work // 4, "tree": tree,
               "checkouts": (checkouts + 1) * tree,
               "git": pooling.disk_usage(git) if git else 0}
    parts = {"copy": SMALL_FILES + (
        info["directories_bytes"] if same_fs else info["store_disk_bytes"])
        + (amounts["pulled"] if sliced(info, quick, slice_size) else 0)}
    for feature in features:
        parts[feature.name] = int(sum(
            factor * amounts[unit]
            for unit, factor in feature.disk_per.items()))
    return parts


def _side_by_side(parts, features):
    """``parts`` ({feature: bytes}) with each pair of ``features`` run
    side by side that is in it as one part, the sum of the two."""
    parts = dict(parts)
    for feature in features:
        if feature.name in parts and feature.beside in parts:
            parts[feature.name] += parts.pop(feature.beside)
    return parts


def disk_needed(parts, features):
    """Bytes of free disk the run needs at its peak: the copy, plus the
    largest feature or pair of features run side by side (each feature's
    directory is removed when it ends), plus a margin."""
    return parts["copy"] + max(_side_by_side(
        {k: v for k, v in parts.items() if k != "copy"}, features).values(
        )) + DISK_MARGIN


def seconds(features, info, quick, slice_size):
    """``{part: seconds}`` the run should take on this machine: the copy
    and each of ``features``, their rates times the size of what they
    work on."""
    amounts = {"MB": _work_bytes(info, quick, slice_size) / 1e6,
               "kfiles": info["files_at_tip"] / 1000,
               "Python kfiles": min(
                   info.get("python_files_at_tip", 0),
                   QUICK_FILES if quick else float("inf")) / 1000,
               "changesets": slice_changesets(info, slice_size)
               if sliced(info, quick, slice_size) else 0,
               "kchangesets": min(slice_changesets(info, slice_size)
                                  if quick else float("inf"),
                                  info["changesets"]) / 1000,
               "rewritten": rewritten(quick),
               "store MB": info["store_disk_bytes"] / 1e6}
    rates = {"copy": COPY_SECONDS_PER}
    rates.update((feature.name, feature.seconds_per) for feature in features)
    return {part: round(per.get("run", 0) + sum(
        rate * amounts[unit] for unit, rate in per.items() if unit != "run"),
        1) for part, per in rates.items()}
