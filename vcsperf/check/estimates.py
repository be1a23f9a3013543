"""What ``vcsperf check`` learns of the repository before it starts
(``survey``), and the time and free disk it estimates the run needs from
that: each feature's rates (its row in ``features``) times the amounts
they are per, here.  The report compares both with what the run took."""

import json
import os
import tempfile
import time

from vcsperf.check import checkcmds, sample, tree
from vcsperf.check.commitid import rewritten
from vcsperf.check.importer import QUICK_FILES
from vcsperf.core import pooling
from vcsperf.core.errors import Abort
from vcsperf.harness import tools

#: Room kept free beyond the estimate, for what the filesystem itself
#: needs and for surprises.
DISK_MARGIN = 256 * 2**20
#: What a small file's revlog takes on disk at least: one block.
REVLOG_BLOCK = 4096
#: Files of the run beside the features': the copy's own requirements and
#: caches, hgrc files, server logs.
SMALL_FILES = 2 * 2**20
#: Bytes the slice takes per byte of the checkout of its tip.
SLICE_PER_TREE = 0.9
#: What a time rate is seconds per (``Feature.seconds_per``).
TIME_UNITS = {
    "run": "the part itself, a fixed time",
    "MB": "MB of the store the features work on (the copy's, or with "
          "--quick the slice's)",
    "changesets": "changeset of the slice (writing it)",
    "kchangesets": "thousand changesets the features work on",
    "kfiles": "thousand files of the tree the features check out (the "
              "tip's, or the slice's)",
    "tip kfiles": "thousand files at the tip of the repository",
    "store kfiles": "thousand files in the repository's store",
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
#: Seconds the copy of the repository takes, per TIME_UNITS: walking and
#: hardlinking its store, reading the tip's manifest (to choose the
#: slice's files, and the slice's first changeset), writing the slice's
#: changesets and its first tree.  The survey and the fingerprint of the
#: original's files are measured, not estimated (``runner``).
COPY_SECONDS_PER = {"run": 0.2, "store kfiles": 0.0095, "tip kfiles": 0.007,
                    "changesets": 0.0028, "kfiles": 1.0}


def _walk_hg(top):
    """One walk of ``top``, a ``.hg`` (at 400,000 files each walk takes
    a minute on a busy machine): ``{"directories_bytes"}``, what its
    directories (itself included) take, what a hardlinked copy of it
    costs; and of its store, ``"store_bytes"`` (the files' sizes),
    ``"store_disk_bytes"`` (their blocks, each inode once) and
    ``"store_files"``."""
    found = {"directories_bytes": os.lstat(top).st_blocks * 512,
             "store_bytes": 0, "store_disk_bytes": 0, "store_files": 0}
    store = os.path.join(top, "store")
    seen = set()
    for root, dirs, names in os.walk(top):
        found["directories_bytes"] += sum(
            os.lstat(os.path.join(root, name)).st_blocks * 512
            for name in dirs)
        if root == store or root.startswith(store + os.sep):
            if root == store:
                found["store_disk_bytes"] += os.lstat(root).st_blocks * 512
            for name in dirs:
                found["store_disk_bytes"] += os.lstat(
                    os.path.join(root, name)).st_blocks * 512
            for name in names:
                st = os.lstat(os.path.join(root, name))
                found["store_files"] += 1
                found["store_bytes"] += st.st_size
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    found["store_disk_bytes"] += st.st_blocks * 512
    return found


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


def _survey_command(source, env, *options):
    """``hg check-survey`` (``checkcmds``) run on ``source``: its JSON
    line, and its ``(size, name)`` lines as ``tree.File`` objects sorted by
    name.  It reads revlogs alone: hg commands reading ``source`` may
    write its caches (hg 6.9 writes the tags cache resolving ``tip`` in
    a revset), and the check leaves the original untouched."""
    # Not the repository's own hgrc either: an extension or hook it
    # enables (blackbox, say) would write there.  Our engine is the one
    # store format the survey may need an extension to read.
    env = dict(env, HGRCSKIPREPO="1")
    engine = (["--config", "extensions.zstdstore="]
              if _engine(source) == "zstd-dict" else [])
    try:
        out = tools.hg(["--config", "extensions.checkcmds=%s"
                        % checkcmds.__file__, *engine, "-R", source,
                        "check-survey", *options], env)
    except tools.CommandError as err:
        lines = err.stderr.strip().splitlines() or ["exit %d"
                                                    % err.returncode]
        if lines[-1] == "abort: no changesets":
            raise Abort("%s has no changesets" % source)
        raise Abort("hg cannot read %s: %s" % (source, lines[-1]),
                    hint="check it with hg verify (the check reads what "
                    "core Mercurial and zstdstore read)")
    first, _, rest = out.partition("\n")
    listed = []
    for line in rest.split("\n"):
        if line:
            size, name = line.split(" ")
            listed.append(tree.File(os.fsdecode(bytes.fromhex(name)),
                                    int(size), ""))
    return json.loads(first), sorted(listed,
                                     key=lambda f: os.fsencode(f.path))


def visible_changesets(repo):
    """The visible changesets of ``repo``."""
    return _survey_command(repo, tools.isolated_env(
        tempfile.gettempdir()), "--names-only")[0]["visible"]


def tip_node(source):
    """The node of the tip of ``source``."""
    return _survey_command(source, tools.isolated_env(
        tempfile.gettempdir()), "--names-only")[0]["node"]


def _tree_sizes(source, files):
    """``(files, checkout_bytes, checkout_disk_bytes, python_files)`` of
    ``files`` (``tree.File`` objects) of ``source``."""
    sizes = [f.size for f in files]
    return (len(files), sum(sizes), _checkout_disk_bytes(
        [f.path for f in files], sizes, os.statvfs(source).f_frsize),
        sum(f.path.endswith(".py") for f in files))


def survey(source, git, quick, slice_size=None):
    """What the run works on: the repository ``source`` (and ``git``, when
    given) checked, and its sizes and counts, which the report starts
    with.  With ``quick`` on a history longer than its slice or a tree
    larger than ``checkcmds.NARROW_ABOVE``, what the slice holds
    (``slice``); the sizes of the tip's whole tree, which take reading
    every filelog, are then those of the slice's (``checkout_bytes`` and
    ``checkout_disk_bytes`` are None)."""
    if not os.path.isdir(os.path.join(source, ".hg")):
        raise Abort("%s is not a Mercurial repository" % source,
                    hint="give --repo the directory that holds .hg")
    if git and not os.path.exists(os.path.join(git, "HEAD")) \
            and not os.path.isdir(os.path.join(git, ".git")):
        raise Abort("%s is not a Git repository" % git,
                    hint="give --git a clone or a bare repository")
    env = tools.isolated_env(tempfile.gettempdir())
    found, _ = _survey_command(source, env, "--names-only")
    info = {
        "repository": source,
        # hidden ones too, until the copy counts the visible ones
        # (counting them here would write the original's caches)
        "changesets": found["tip"] + 1,
        # the store's sizes, and what they take on disk: whole blocks,
        # and directories
        **_walk_hg(os.path.join(source, ".hg")),
        "files_at_tip": found["files"],
        "python_files_at_tip": found["python_files"],
        "engine": _engine(source),
        "hg_version": tools.hg(["version", "-T", "{ver}"], env),
        "tip": found["node"],
        "quick": quick,
    }
    if sliced(info, quick, slice_size):
        size = slice_changesets(info, slice_size)
        found, files = _survey_command(source, env, "--slice", size)
        files, checkout, disk, python = _tree_sizes(source, files)
        # the slice's files, narrowed or not: at the tip (``files``) and
        # touched by its changesets
        info["slice"] = dict(found["slice"], files=files,
                             checkout_bytes=checkout,
                             checkout_disk_bytes=disk, python_files=python)
        if not info["slice"]["narrowed"]:
            info["checkout_bytes"] = checkout
            info["checkout_disk_bytes"] = disk
        else:
            info["checkout_bytes"] = info["checkout_disk_bytes"] = None
    else:
        _, info["checkout_bytes"], info["checkout_disk_bytes"], _ = \
            _tree_sizes(source, _survey_command(source, env)[1])
    return info


def slice_changesets(info, slice_size):
    """Changesets of the slice ``--quick`` works on (``slice_size``, the
    ``--slice`` given, or by the length of the history)."""
    return slice_size or sample.slice_size(info["changesets"])


def sliced(info, quick, slice_size):
    """Whether the features work on a slice of the history: with
    ``--quick``, unless the history is no longer than the slice and the
    tip has at most ``checkcmds.NARROW_ABOVE`` files."""
    return quick and (
        slice_changesets(info, slice_size) < info["changesets"]
        or info["files_at_tip"] > checkcmds.NARROW_ABOVE)


def _tree(info, quick, slice_size):
    """``(files, checkout disk bytes, Python files)`` of the tree the
    features check out: the tip's, or the slice's."""
    if sliced(info, quick, slice_size) and "slice" in info:
        part = info["slice"]
        return part["files"], part["checkout_disk_bytes"], \
            part["python_files"]
    return info["files_at_tip"], info["checkout_disk_bytes"], \
        info.get("python_files_at_tip", 0)


def _work_bytes(info, quick, slice_size):
    """Bytes of the store the features work on: the copy's, or the
    slice's (its share of the history, of the files it keeps, and its
    first changeset's tree, compressed)."""
    store = info["store_disk_bytes"]
    if not sliced(info, quick, slice_size):
        return store
    share = slice_changesets(info, slice_size) / info["changesets"]
    files, tree, _ = _tree(info, quick, slice_size)
    if info["files_at_tip"]:
        share *= min(1, files / info["files_at_tip"])
    # and a block at least for each file's revlog
    return int(store * share) + tree // 2 + files * REVLOG_BLOCK


def disk(features, info, quick, slice_size, checkouts, same_fs, git):
    """``{part: bytes}``: the disk the copy of the repository takes with
    the run's small files (``"copy"``; when hardlinked (``same_fs``),
    only its directories; with ``--quick``, with the slice), and what each
    of ``features`` takes at its peak besides; ``checkouts``, the
    revisions the checkouts features check out; ``git``, the Git
    repository or None."""
    work = _work_bytes(info, quick, slice_size)
    tree = _tree(info, quick, slice_size)[1]
    amounts = {"work": work, "pulled": work + work // 4, "tree": tree,
               "checkouts": (checkouts + 1) * tree,
               "git": pooling.disk_usage(git) if git else 0}
    directories = info["directories_bytes"]
    if sliced(info, quick, slice_size) and info["files_at_tip"]:
        # the copy has the directories of the slice's filelogs only
        directories = int(directories * min(
            # a sample spread over the tree: a directory for fewer files
            1, 2 * _tree(info, quick, slice_size)[0] / info["files_at_tip"]))
    parts = {"copy": SMALL_FILES + (
        directories if same_fs else info["store_disk_bytes"])
        # the slice: its first changeset's tree, compressed, with a block
        # at least per revlog, is most of it (0.78 and 0.89 of the tree
        # on pip's and the Firefox-scale repository's)
        + (int(SLICE_PER_TREE * tree) if sliced(info, quick, slice_size)
           else 0)}
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


def disk_peak(parts, features):
    """Bytes the scratch directory should take at its peak: the copy,
    plus the largest feature or pair of features run side by side (each
    feature's directory is removed when it ends)."""
    return parts["copy"] + max(_side_by_side(
        {k: v for k, v in parts.items() if k != "copy"}, features).values(
        ))


def disk_needed(parts, features):
    """Bytes of free disk the run needs: its peak, plus a margin."""
    return disk_peak(parts, features) + DISK_MARGIN


#: How long the share of a core the run gets is sampled: beside two busy
#: loops on 2 cores, samples of one second read 0.54 to 0.73 of a core,
#: of two seconds 0.62 to 0.73.
SHARE_SAMPLE_SECONDS = 2.0
#: The least share the estimate takes, so that its factor stays bounded.
SHARE_FLOOR = 0.05


def busy_factor():
    """``(factor, share)``: how many times an idle machine's time the run
    should take now, one over the share of a core a process of the run is
    given: it spins for two seconds and compares the CPU time it got with the
    time that passed.  That sees what a count of the cores other
    processes keep busy cannot, a run under ``nice`` beside them: with
    two busy loops on 2 cores, the share is 0.67 and a Firefox-scale
    quick run took 1.52 times its idle time; under ``nice -n 5``, 0.24
    and 3.92 times (BENCHMARKS.md)."""
    started, cpu_started = time.monotonic(), time.process_time()
    while time.monotonic() - started < SHARE_SAMPLE_SECONDS:
        pass
    given = time.process_time() - cpu_started
    # rounded first: the factor is the one the report's share gives
    share = round(min(1.0, max(SHARE_FLOOR, given / (
        time.monotonic() - started))), 2)
    return 1 / share, share


def seconds(features, info, quick, slice_size, busy=1.0):
    """``{part: seconds}`` the run should take on this machine: the copy
    and each of ``features``, their rates times the size of what they
    work on, times ``busy`` (``busy_factor``)."""
    files, _, python = _tree(info, quick, slice_size)
    amounts = {"MB": _work_bytes(info, quick, slice_size) / 1e6,
               "kfiles": files / 1000,
               "tip kfiles": info["files_at_tip"] / 1000,
               "store kfiles": info.get("store_files", 0) / 1000,
               "Python kfiles": min(
                   python, QUICK_FILES if quick else float("inf")) / 1000,
               "changesets": slice_changesets(info, slice_size)
               if sliced(info, quick, slice_size) else 0,
               "kchangesets": min(slice_changesets(info, slice_size)
                                  if quick else float("inf"),
                                  info["changesets"]) / 1000,
               "rewritten": rewritten(quick)}
    rates = {"copy": COPY_SECONDS_PER}
    rates.update((feature.name, feature.seconds_per) for feature in features)
    return {part: round(busy * (per.get("run", 0) + sum(
        rate * amounts[unit] for unit, rate in per.items() if unit != "run")),
        1) for part, per in rates.items()}
