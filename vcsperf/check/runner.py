"""``vcsperf check``: every feature of the suite, run on a copy of a user's
own repository, with its figures beside core Mercurial's.

The repository given is only read, without taking its locks: the runner
hardlinks its history into a scratch directory (plain copies when the
scratch directory is on another filesystem; a clone by pull when the
repository keeps being written meanwhile), works on clones of that, and
removes the scratch directory at the end, after Ctrl-C or SIGTERM too.
Before and after, it records the name, size, inode and modification time
of every file and directory under the repository's ``.hg`` and reports
whether any changed.

The features, each on its own directory, removed when it is done:

dictionaries
  convert a clone to ``zstd-dict`` (zstdstore), train, recompress, run
  ``hg verify``, and compare the full text of every revision of every
  revlog with the copy as it was (with ``--quick``, of every 20th); sizes
  and full-text read speed beside the engine the repository uses.
bundles
  ``hg bundlegen`` (zstd-max, gzip and, without ``--quick``, stream),
  served over HTTP on 127.0.0.1 with ``hg serve``; a stock hg clones from
  each bundle and the clone is verified; sizes beside core's gzip and zstd
  bundles, clone times beside a plain clone.
wire
  pulls by core zstd and by wirezstd (the last 100 changesets and, without
  ``--quick``, the whole history): bytes received and server CPU.
checkouts
  ``hg robustcheckout`` of several revisions into one pool, against a
  plain ``hg clone``: times and disk.
commit IDs
  a linear slice of the real history gets commit IDs, is rebased onto a
  new base and has every third changeset folded; the mapping by commit ID
  is then checked against core's obsolescence markers.
importer
  every Python file at the tip goes through the pastbytes rewrite and is
  compiled, beside a plain compile.
git checkouts (with ``--git``)
  ``gitbridge checkout`` of several commits into one pool, against a plain
  ``git clone``.

The report gives, per feature, passed or failed with the reason, and the
figures as ratios; then the wall time of every step, the peak memory and
the disk the run took.  The free disk it needs is estimated and checked
before anything starts.  ``vcsperf demo`` runs the same checks on the
repository it builds.
"""

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from vcsperf.bench import wirezstd, zstdstore
from vcsperf.check import checkcmds
from vcsperf.core import commitids, pastbytes, pooling
from vcsperf.core.errors import Abort, print_abort
from vcsperf.harness import servers, tools

#: Revisions between two sampled ones in the full-text comparison of
#: ``--quick``.
QUICK_EVERY = 20
#: Room kept free beyond the estimate, for what the filesystem itself
#: needs and for surprises.
DISK_MARGIN = 256 * 2**20
#: Copies of a repository that is being written to before the copy is
#: made by pull instead.
COPY_ATTEMPTS = 3
#: Files of the run beside the features': the copy's own requirements and
#: caches, hgrc files, server logs.
SMALL_FILES = 2**20


class Failed(Exception):
    """Something a feature promises did not hold: the feature failed."""


# Terminal ---------------------------------------------------------------

class Console:
    """Report lines on ``out``; on a terminal, a live line on ``err`` for
    the running step with its elapsed time and a progress bar (ours, or
    the one hg draws for the command the step runs)."""

    def __init__(self, out=None, err=None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = self.err.isatty()
        self._lock = threading.Lock()
        self._label = None
        self._detail = ""
        self._start = 0.0
        self._ticker = None
        self._stopped = threading.Event()

    def say(self, text=""):
        with self._lock:
            self._clear()
            self.out.write(text + "\n")
            self.out.flush()

    def detail(self, text):
        self._detail = text

    def count(self, done, total, unit):
        width = 24
        filled = width * done // max(total, 1)
        self._detail = "[%s%s] %d/%d %s" % (
            "=" * filled, " " * (width - filled), done, total, unit)

    @contextlib.contextmanager
    def task(self, label):
        self._label, self._detail = label, ""
        self._start = time.monotonic()
        if self.live:
            self._stopped.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        try:
            yield
        finally:
            if self._ticker:
                self._stopped.set()
                self._ticker.join()
                self._ticker = None
            with self._lock:
                self._clear()
            self._label = None

    def _tick(self):
        while not self._stopped.wait(0.25):
            line = "  %s  %ds  %s" % (self._label,
                                      time.monotonic() - self._start,
                                      self._detail)
            columns = shutil.get_terminal_size().columns - 1
            with self._lock:
                self.err.write("\r" + line[:columns].ljust(columns))
                self.err.flush()

    def _clear(self):
        if self.live and self._label is not None:
            columns = shutil.get_terminal_size().columns - 1
            self.err.write("\r%s\r" % (" " * columns))
            self.err.flush()


# The run ----------------------------------------------------------------

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

def _fingerprint(repo):
    """Name, size, device and inode, and modification time of every file
    and directory under ``repo/.hg`` (a directory's name ends in ``/``): a
    file created and removed again, such as a lock, changes its
    directory's modification time."""
    prints = {}
    top = os.path.join(repo, ".hg")
    for root, _, files in os.walk(top):
        for path, name in [(root, os.path.relpath(root, top) + "/")] + [
                (os.path.join(root, name), None) for name in files]:
            st = os.lstat(path)
            name = name or os.path.relpath(path, top)
            prints["" if name == "./" else name] = (
                st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns)
    return prints


#: Files of a store that belong to a lock or a transaction, not history.
_STORE_LOCK, _STORE_JOURNAL = "lock", "journal"
_NOT_HISTORY = (_STORE_LOCK, _STORE_JOURNAL, "undo")


def _store_path(repo):
    """The store of ``repo``, which may be a share of another's."""
    hgdir = os.path.join(repo, ".hg")
    try:
        with open(os.path.join(hgdir, "sharedpath")) as fh:
            shared = fh.read().strip()
    except FileNotFoundError:
        return os.path.join(hgdir, "store")
    return os.path.join(hgdir, shared, "store")


def _quiet_state(store):
    """What any write to ``store`` changes -- the directory's modification
    time (a lock or journal comes and goes) and the changelog's identity
    -- or None while it is being written."""
    if any(os.path.lexists(os.path.join(store, name))
           for name in (_STORE_LOCK, _STORE_JOURNAL)):
        return None
    state = [os.stat(store).st_mtime_ns]
    for name in ("00changelog.i", "00changelog.d"):
        try:
            st = os.stat(os.path.join(store, name))
        except FileNotFoundError:
            state.append(None)
            continue
        state.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return state


def copy_repository(source, dest):
    """Copy the history of ``source`` to a new repository ``dest`` with
    hardlinks (plain copies across filesystems), writing nothing in
    ``source`` -- ``hg clone`` takes its store lock.  Mercurial breaks a
    hardlink before it writes to a file, so neither side can change the
    other.

    Without a lock, the copy is checked instead: the changelog is linked
    first, so every changeset it names has its data in the files linked
    after it, and nothing may have written the store meanwhile.  Returns
    False, with ``dest`` removed, when something did."""
    store = _store_path(source)
    before = _quiet_state(store)
    if before is None:
        return False
    os.makedirs(os.path.join(dest, ".hg", "store"))
    with open(os.path.join(source, ".hg", "requires")) as fh:
        requires = [line for line in fh.read().split()
                    if line not in ("shared", "relshared")]
    with open(os.path.join(dest, ".hg", "requires"), "w") as fh:
        fh.writelines(line + "\n" for line in requires)
    bookmarks = os.path.join(source, ".hg", "bookmarks")
    if os.path.exists(bookmarks):
        shutil.copyfile(bookmarks, os.path.join(dest, ".hg", "bookmarks"))
    files = []
    for root, dirs, names in os.walk(store):
        relative = os.path.relpath(root, store)
        for name in dirs:
            os.mkdir(os.path.join(dest, ".hg", "store", relative, name))
        files += [os.path.normpath(os.path.join(relative, name))
                  for name in names
                  # dot files are temporary (store names never start so)
                  if not name.startswith(".") and not (
                      relative == "." and name.startswith(_NOT_HISTORY))]
    files.sort(key=lambda name: not name.startswith("00changelog"))
    for name in files:
        target = os.path.join(dest, ".hg", "store", name)
        try:
            os.link(os.path.join(store, name), target)
        except OSError:  # another filesystem, or no hardlinks there
            shutil.copyfile(os.path.join(store, name), target)
    if _quiet_state(store) != before:
        shutil.rmtree(dest)
        return False
    return True


class DiskWatch:
    """The disk a directory tree takes beyond what is already on disk: the
    blocks allocated under ``root`` (each inode once) except the inodes in
    ``known``, ``(st_dev, st_ino)`` pairs such as the files of the original
    repository, which a hardlinked clone shares at no cost.  Unlike the
    filesystem's free space, other processes do not change it.

    ``sample()`` measures now; used as a context manager, a thread samples
    on its own in between, spending at most a tenth of its time walking
    the tree.  ``where()`` says what is running, as ``(feature, step)``:
    ``peak_where`` is where the largest sample, ``peak``, was taken, and
    ``peaks`` the largest sample per feature."""

    MIN_INTERVAL = 0.25

    def __init__(self, root, known, where):
        self.root = root
        self.known = frozenset(known)
        self.where = where
        self.peak = 0
        self.peak_where = None
        self.peaks = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def sample(self):
        where = self.where()
        start = time.monotonic()
        used = pooling.disk_usage(self.root, counted=self.known)
        with self._lock:
            if used > self.peak:
                self.peak, self.peak_where = used, where
            if used > self.peaks.get(where[0], -1):
                self.peaks[where[0]] = used
        return time.monotonic() - start

    def __enter__(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        interval = self.MIN_INTERVAL
        while not self._stop.wait(interval):
            interval = max(self.MIN_INTERVAL, 9 * self.sample())


def _peak_child_rss():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: clean up, then stop."""


def _terminate(signum, frame):
    raise _Terminated()


class Check:
    """One run of every feature on a copy of ``source``."""

    def __init__(self, source, git=None, quick=False, scratch=None,
                 reserve=0, console=None, keep=False):
        self.source = os.path.abspath(source)
        self.git = os.path.abspath(git) if git else None
        self.quick = quick
        self.scratch_root = os.path.abspath(scratch or tempfile.gettempdir())
        self.reserve = reserve
        self.console = console or Console()
        self.keep = keep
        self.scratch = None
        self.steps = []
        self.features = []
        self._feature = None
        self._step = None
        self._disk = None
        self._peak_step = None
        self._hgrcs = 0

    # -- environment ----------------------------------------------------

    def hg_env(self, extensions=(), config=""):
        """An isolated environment for hg: no extension at all (core), or
        ``extensions`` from this installation plus ``config``."""
        hgrc = None
        if extensions or config:
            self._hgrcs += 1
            hgrc = os.path.join(self.scratch, "hgrc-%d" % self._hgrcs)
            with open(hgrc, "w") as fh:
                fh.write("[extensions]\n")
                fh.writelines("%s =\n" % name for name in extensions)
                fh.write(config)
        env = tools.isolated_env(self.scratch, hgrc)
        if self.console.live:
            # hg draws its progress bars on a pipe only if told to; the
            # runner shows them on its live line.
            env["HGPLAINEXCEPT"] = "progress"
        return env

    def path(self, *names):
        return os.path.join(self.scratch, *names)

    # -- steps ------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, label):
        """Time one step of the current feature, with a live line."""
        start = time.perf_counter()
        self._step = label
        try:
            with self.console.task("%s: %s" % (self._feature["name"],
                                               label)):
                yield
        finally:
            seconds = time.perf_counter() - start
            self.steps.append({"feature": self._feature["name"],
                               "step": label, "seconds": round(seconds, 3)})
            self._after_step(label)
            self._step = None

    def _after_step(self, label):
        self._disk.sample()
        peak = _peak_child_rss()
        if self._peak_step is None or peak > self._peak_step[1]:
            self._peak_step = ("%s: %s" % (self._feature["name"], label),
                               peak)

    def hg(self, args, env, cwd=None, on_line=None, check=True):
        """Run hg; its progress bars feed the live line, ``on_line`` gets
        each line of its output as it comes; returns the output."""
        args = [tools.executable("hg"), *map(str, args)]
        if self.console.live:
            args += ["--config", "progress.assume-tty=yes", "--config",
                     "progress.delay=0.5"]
        return self.command(args, env, cwd, on_line, check)

    def command(self, args, env, cwd=None, on_line=None, check=True):
        """Run any command as ``hg`` does; a failure raises
        ``tools.CommandError`` with what it wrote to stderr."""
        proc = subprocess.Popen(args, env=env, cwd=cwd,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        messages = []
        reader = threading.Thread(target=self._read_stderr,
                                  args=(proc.stderr, messages), daemon=True)
        reader.start()
        out = []
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                out.append(line)
                if on_line:
                    on_line(line)
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            reader.join()
        if proc.returncode and check:
            raise tools.CommandError(proc.returncode, args, "".join(out),
                                     "".join(messages))
        return "".join(out)

    def _read_stderr(self, stream, messages):
        """Lines end in "\\n"; what ends in "\\r" is a progress bar."""
        pending = b""
        for block in iter(lambda: stream.read1(4096), b""):
            pending += block
            while True:
                cut = min((i for i in (pending.find(b"\r"),
                                       pending.find(b"\n")) if i >= 0),
                          default=-1)
                if cut < 0:
                    break
                text = pending[:cut].decode("utf-8", "replace")
                if pending[cut:cut + 1] == b"\n":
                    messages.append(text + "\n")
                elif text.strip():
                    self.console.detail(text.strip())
                pending = pending[cut + 1:]
        if pending:
            messages.append(pending.decode("utf-8", "replace"))

    # -- comparisons ------------------------------------------------------

    def compare(self, what, core, ours, unit, better, core_label="core"):
        """One figure of the current feature beside core's."""
        self._feature["comparisons"].append({
            "what": what, "core_label": core_label, "core": core,
            "ours": ours, "unit": unit, "better": better,
            "ratio": round(ours / core, 4) if core else None})

    def fact(self, name, value):
        self._feature["facts"][name] = value

    # -- the whole run ----------------------------------------------------

    def _inspect(self):
        if not os.path.isdir(os.path.join(self.source, ".hg")):
            raise Abort("%s is not a Mercurial repository" % self.source,
                        hint="give --repo the directory that holds .hg")
        if self.git and not os.path.exists(os.path.join(self.git, "HEAD")) \
                and not os.path.isdir(os.path.join(self.git, ".git")):
            raise Abort("%s is not a Git repository" % self.git,
                        hint="give --git a clone or a bare repository")
        env = tools.isolated_env(tempfile.gettempdir())
        try:
            tip = tools.hg(["log", "-R", self.source, "-r", "tip", "-T",
                            "{rev}"], env)
        except tools.CommandError as err:
            lines = err.stderr.strip().splitlines() or ["exit %d"
                                                        % err.returncode]
            raise Abort("hg cannot read %s: %s" % (self.source, lines[-1]),
                        hint="check it with hg verify, or enable the "
                        "extensions it needs")
        if tip == "-1":
            raise Abort("%s has no changesets" % self.source)
        files = [line.split(" ", 1) for line in tools.hg(
            ["files", "-R", self.source, "-r", "tip", "-T",
             "{size} {path}\n"], env).splitlines()]
        sizes = [int(size) for size, _ in files]
        store = os.path.join(self.source, ".hg", "store")
        requires = set()
        for name in ("requires", os.path.join("store", "requires")):
            try:
                with open(os.path.join(self.source, ".hg", name)) as fh:
                    requires.update(fh.read().split())
            except FileNotFoundError:
                pass
        return {
            "repository": self.source,
            "changesets": int(tip) + 1,
            "store_bytes": zstdstore.store_bytes(self.source)["total"],
            # What they take on disk: whole blocks, and directories.
            "store_disk_bytes": pooling.disk_usage(store),
            "directories_bytes": _directories_bytes(
                os.path.join(self.source, ".hg")),
            "checkout_bytes": sum(sizes),
            "checkout_disk_bytes": _checkout_disk_bytes(
                [path for _, path in files], sizes,
                os.statvfs(self.source).f_frsize),
            "files_at_tip": len(sizes),
            "engine": ("zstd-dict" if "exp-compression-zstd-dict" in requires
                       else "zstd" if "revlog-compression-zstd" in requires
                       else "zlib"),
            "hg_version": tools.hg(["version", "-T", "{ver}"], env),
            "quick": self.quick,
        }

    def checkouts_count(self):
        return 2 if self.quick else 4

    def estimate_disk(self, info):
        """``{part: bytes}``: the disk the copy of the repository takes
        with the run's small files (``"copy"``; when hardlinked, only its
        directories), and what each feature takes at its peak besides.
        Sizes are as allocated on disk (``info``'s ``*_disk_bytes``)."""
        store, tree = info["store_disk_bytes"], info["checkout_disk_bytes"]
        same_fs = os.stat(self.source).st_dev == os.stat(
            self.scratch_root).st_dev
        # A clone by pull stores the deltas it computes, beside a journal:
        # up to 1.1 times the original's store measured, a quarter kept.
        pulled = store + store // 4
        checkouts = self.checkouts_count()
        parts = {
            "copy": SMALL_FILES + (info["directories_bytes"] if same_fs
                                   else store),
            # the upgraded store beside the old one, then the revlogs
            # being recompressed
            "dictionaries": 2 * store,
            # every bundle (zstd-max, gzip, and without --quick stream
            # and core zstd-v2), each smaller than the store, and a clone
            "bundles": (2 if self.quick else 4) * store + pulled,
            "wire": pulled,
            # the pool, the checkouts, and a plain clone beside them
            "checkouts": 2 * pulled + (checkouts + 1) * tree,
            # writing to a hardlinked revlog copies it first: the rewritten
            # revlogs, up to the whole store, and a working directory
            "commit IDs": store + tree,
            # the Python files at tip
            "importer": tree,
        }
        if self.git:
            git = pooling.disk_usage(self.git)
            parts["git checkouts"] = 2 * git + (checkouts + 1) * tree
        return parts

    def disk_needed(self, parts):
        """Bytes of free disk the run needs at its peak: the copy, plus
        the largest feature (each feature's directory is removed before
        the next starts), plus a margin."""
        return parts["copy"] + max(v for k, v in parts.items()
                                   if k != "copy") + DISK_MARGIN

    def run(self):
        """Check every feature; returns the report (a dict)."""
        started = time.perf_counter()
        before = _fingerprint(self.source)
        info = self._inspect()
        os.makedirs(self.scratch_root, exist_ok=True)
        estimate = self.estimate_disk(info)
        need = self.disk_needed(estimate)
        free = pooling.free_space(self.scratch_root)
        if free < need + self.reserve:
            raise Abort(
                "vcsperf check needs about %s free in %s, and %s is free%s"
                % (pooling.format_bytes(need), self.scratch_root,
                   pooling.format_bytes(free),
                   " (with %s kept in reserve)"
                   % pooling.format_bytes(self.reserve)
                   if self.reserve else ""),
                hint="give --scratch a directory with more room, on the "
                "repository's filesystem if you can (copies are then "
                "hardlinks)")
        self.scratch = tempfile.mkdtemp(prefix="vcsperf-check-",
                                        dir=self.scratch_root)
        # A hardlink to a file of the original costs no disk.
        self._disk = DiskWatch(
            self.scratch, {(p[1], p[2]) for p in before.values()},
            lambda: (self._feature["name"], self._step))
        self.info = info
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            self.console.say("vcsperf check of %s: %d changesets, store %s "
                             "(%s), hg %s%s" % (
                                 self.source, info["changesets"],
                                 pooling.format_bytes(info["store_bytes"]),
                                 info["engine"], info["hg_version"],
                                 ", quick" if self.quick else ""))
            self.console.say("scratch: %s (needs about %s, %s free)"
                             % (self.scratch, pooling.format_bytes(need),
                                pooling.format_bytes(free)))
            self._run_features()
        finally:
            signal.signal(signal.SIGTERM, previous)
            if not self.keep:
                shutil.rmtree(self.scratch, ignore_errors=True)
        after = _fingerprint(self.source)
        changed = sorted(name for name in set(before) | set(after)
                         if before.get(name) != after.get(name))
        seconds = time.perf_counter() - started
        report = dict(info)
        report.update({
            "scratch": {"path": self.scratch, "kept": self.keep,
                        "estimated_bytes": need, "free_bytes": free,
                        "peak_used_bytes": self._disk.peak,
                        "peak_reached_in": "%s: %s" % self._disk.peak_where
                        if self._disk.peak_where else None,
                        "peak_used_bytes_by_feature": self._disk.peaks,
                        # each with the copy, which stays all along
                        "estimated_bytes_by_feature": {
                            name: estimate["copy"] + (
                                estimate[name] if name != "copy" else 0)
                            for name in estimate}},
            "features": self.features,
            "steps": self.steps,
            "peak_memory": {
                "runner_bytes": resource.getrusage(
                    resource.RUSAGE_SELF).ru_maxrss * 1024,
                "largest_process_bytes": _peak_child_rss(),
                "reached_in": self._peak_step[0] if self._peak_step
                else None},
            "original_unchanged": not changed,
            "original_changed_files": changed[:20],
            "seconds": round(seconds, 1),
            "minutes_per_10k_changesets": round(
                seconds / 60 / info["changesets"] * 10000, 2),
        })
        report["passed"] = not changed and all(
            f["status"] != "failed" for f in self.features)
        return report

    def _run_features(self):
        features = [("dictionaries", dictionaries), ("bundles", bundles),
                    ("wire", wire), ("checkouts", checkouts),
                    ("commit IDs", commit_ids), ("importer", importer)]
        if self.git:
            features.append(("git checkouts", git_checkouts))
        self._feature = {"name": "copy", "status": "passed",
                         "comparisons": [], "facts": {}}
        with self._disk:
            with self.step("hardlinked copy of the repository"):
                self.base = self.path("copy")
                self._copy_source()
            for name, function in features:
                self._run_feature(name, function)

    def _copy_source(self):
        """The copy, without a lock on the original; a repository that
        keeps being written while it is copied is cloned by pull instead,
        which reads it without a lock too, only slower."""
        for _ in range(COPY_ATTEMPTS):
            if copy_repository(self.source, self.base):
                return
            time.sleep(1)
        self.console.say("(%s was written to while it was copied; cloning "
                         "it by pull)" % self.source)
        self.hg(["clone", "-q", "-U", "--pull", self.source, self.base],
                self.hg_env())

    def _run_feature(self, name, function):
        self._feature = {"name": name, "status": "passed", "error": None,
                         "comparisons": [], "facts": {}}
        self.features.append(self._feature)
        workdir = self.path(name.replace(" ", "-"))
        os.mkdir(workdir)
        start = time.perf_counter()
        try:
            reason = function(self, workdir)
            if reason:
                self._feature["status"] = "skipped"
                self._feature["error"] = reason
        except Failed as failure:
            self._feature["status"] = "failed"
            self._feature["error"] = str(failure)
        except tools.CommandError as err:
            self._feature["status"] = "failed"
            self._feature["error"] = _command_failure(err)
        except Exception as exc:
            # A bug or a surprise in one feature must not cost the report
            # of the others.
            self._feature["status"] = "failed"
            self._feature["error"] = "%s: %s" % (type(exc).__name__, exc)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self._feature["seconds"] = round(time.perf_counter() - start, 1)
        self.console.say(format_feature(self._feature))


def _command_failure(err):
    """What a failed command said, in one line."""
    lines = [line for line in (err.stderr or "").splitlines()
             if line.strip()]
    command = os.path.basename(str(err.cmd[0])) + " " + " ".join(
        str(a) for a in err.cmd[1:3])
    last = next((line for line in reversed(lines)
                 if line.startswith("abort:")), lines[-1] if lines else
                "exit %d" % err.returncode)
    return "%s ...: %s" % (command, last.strip())


# Features ------------------------------------------------------------------

def _fulltexts(check, repo, env):
    """{revlog: line of hg check-fulltexts} for ``repo``."""
    lines = {}
    total = [0]

    def on_line(line):
        record = json.loads(line)
        if "revlogs" in record:
            total[0] = record["revlogs"]
        else:
            lines[record["name"]] = record
            if len(lines) % 50 == 0 or len(lines) == total[0]:
                check.console.count(len(lines), total[0], "revlogs")
    check.hg(["--config", "extensions.checkcmds=%s" % checkcmds.__file__,
              "check-fulltexts", "--every",
              QUICK_EVERY if check.quick else 1], env, cwd=repo,
             on_line=on_line)
    return lines


def _read_speeds(lines):
    """{class: bytes per second} of the full-text reads."""
    totals = {}
    for record in lines.values():
        size, seconds = totals.get(record["class"], (0, 0.0))
        totals[record["class"]] = (size + record["bytes"],
                                   seconds + record["seconds"])
    return {name: size / seconds for name, (size, seconds) in totals.items()
            if seconds}


def dictionaries(check, work):
    ours = check.hg_env(["zstdstore"])
    core = check.hg_env()
    repo = os.path.join(work, "zstd-dict")
    with check.step("clone the copy"):
        check.hg(["clone", "-q", "-U", check.base, repo], core)
    with check.step("convert to zstd-dict"):
        check.hg(["debugupgraderepo", "--run", "--no-backup", "-q",
                  "--config", "format.revlog-compression=zstd-dict"], ours,
                 cwd=repo)
    with check.step("train dictionaries"):
        check.hg(["zstd-train"], ours, cwd=repo)
    with check.step("recompress"):
        check.hg(["zstd-recompress"], ours, cwd=repo)
    with check.step("hg verify"):
        try:
            check.hg(["verify", "-q"], ours, cwd=repo)
            verified = True
        except tools.CommandError as err:
            verified = _command_failure(err)
    with check.step("read full texts, as stored"):
        before = _fulltexts(check, check.base, core)
    with check.step("read full texts, zstd-dict"):
        after = _fulltexts(check, repo, ours)
    engine = check.info["engine"]
    sizes = {"core": zstdstore.store_bytes(check.base),
             "ours": zstdstore.store_bytes(repo)}
    for name in ("changelog", "manifest", "filelog", "total"):
        check.compare("store bytes, %s" % name, sizes["core"][name],
                      sizes["ours"][name], "bytes", "lower", engine)
    speeds = {"core": _read_speeds(before), "ours": _read_speeds(after)}
    for name in ("changelog", "manifest", "filelog"):
        if name in speeds["core"] and name in speeds["ours"]:
            check.compare("full-text reads, %s" % name,
                          speeds["core"][name], speeds["ours"][name],
                          "bytes/s", "higher", engine)
    revisions = sum(r["revisions"] for r in before.values())
    check.fact("revlogs", len(before))
    check.fact("revisions compared", revisions)
    check.fact("dictionaries bytes", sizes["ours"]["dictionaries"])
    broken = [name for name, r in before.items() if r["unreadable"]]
    if broken:
        rev, message = before[broken[0]]["unreadable"][0]
        raise Failed("the repository itself is damaged: %d revlogs have "
                     "unreadable revisions, the first %s rev %d (%s)"
                     % (len(broken), broken[0], rev, message))
    differ = [name for name in before if name not in after
              or (after[name]["digest"], after[name]["revisions"])
              != (before[name]["digest"], before[name]["revisions"])]
    differ += [name for name in after if name not in before]
    if differ:
        raise Failed("%d revlogs read differently after recompression, "
                     "the first %s" % (len(differ), differ[0]))
    if verified is not True:
        raise Failed("hg verify failed on the zstd-dict copy: %s"
                     % verified)
    check.fact("identical", "%d revisions in %d revlogs"
               % (revisions, len(before)))


def _node_set(check, repo, env, revset="heads(all())"):
    return set(check.hg(["log", "-R", repo, "-r", revset, "-T",
                         "{node}\n"], env).split())


def bundles(check, work):
    core = check.hg_env()
    ours = check.hg_env(["bundlegen", "clonebundles"])
    served = check.hg_env(["clonebundles"])
    formats = ["zstd-max", "gzip"] + ([] if check.quick else ["stream"])
    out = os.path.join(work, "bundles")
    manifest = os.path.join(check.base, ".hg", "clonebundles.manifest")
    heads = _node_set(check, check.base, core)
    try:
        with servers.FileServer(work) as files:
            with check.step("hg bundlegen %s" % ", ".join(formats)):
                check.hg(["-R", check.base, "bundlegen", "--output", out,
                          "--base-url", files.url + "bundles/",
                          "--config", "bundlegen.formats=%s"
                          % ",".join(formats)], ours)
            with open(os.path.join(out, "bundles.json")) as fh:
                built = {b["format"]: b for b in json.load(fh)["bundles"]}
            with open(manifest) as fh:
                by_url = {line.split()[0]: line for line in fh
                          if line.strip()}
            lines = {fmt: by_url[bundle["url"]]
                     for fmt, bundle in built.items()}
            if not check.quick:
                with check.step("core zstd-v2 bundle"):
                    path = os.path.join(work, "core-zstd.hg")
                    check.hg(["-R", check.base, "bundle", "-q", "-a", "-t",
                              "zstd-v2", path], core)
                    check.compare("bundle bytes, zstd-max",
                                  os.path.getsize(path),
                                  built["zstd-max"]["size"], "bytes",
                                  "lower", "core zstd-v2")
            check.compare("bundle bytes, zstd-max", built["gzip"]["size"],
                          built["zstd-max"]["size"], "bytes", "lower",
                          "core gzip-v2")
            clones = {}
            for fmt in formats:
                with open(manifest, "w") as fh:
                    fh.write(lines[fmt])
                with check.step("stock hg clones from %s over HTTP" % fmt):
                    clones[fmt] = _clone(check, work, core, served,
                                         ["--stream"] if fmt == "stream"
                                         else [], heads, expect_bundle=True)
            os.unlink(manifest)
            with check.step("plain clone --pull over HTTP"):
                plain = _clone(check, work, core, core, ["--pull"], heads)
    finally:
        if os.path.exists(manifest):
            os.unlink(manifest)
    for fmt in formats:
        check.compare("clone seconds from %s" % fmt, plain, clones[fmt],
                      "seconds", "lower", "core clone --pull")
    check.fact("bundles", {fmt: {"bytes": b["size"], "seconds": b["seconds"]}
                           for fmt, b in built.items()})
    check.fact("clones verified", len(clones))


def _clone(check, work, client, server_env, options, heads,
           expect_bundle=False):
    """Seconds a stock hg takes to clone the copy over HTTP; the clone is
    verified, holds the copy's heads, and is removed."""
    dest = os.path.join(work, "clone")
    with servers.HgServer(server_env, check.base) as server:
        start = time.perf_counter()
        out = check.hg(["clone", "-U", *options, server.url, dest], client)
        seconds = time.perf_counter() - start
    try:
        if expect_bundle and "applying clone bundle" not in out:
            raise Failed("the clone did not use the clone bundle:\n%s"
                         % out.strip())
        try:
            check.hg(["verify", "-q", "-R", dest], client)
        except tools.CommandError as err:
            raise Failed("hg verify failed on a clone: %s"
                         % _command_failure(err))
        if _node_set(check, dest, client) != heads:
            raise Failed("a clone does not hold the repository's heads")
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    return seconds


def wire(check, work):
    core = check.hg_env()
    ours = check.hg_env(["wirezstd"])
    with check.step("pulls, core zstd and wirezstd"):
        results = wirezstd.measure_wire(check.base, work, core, ours,
                                         full=not check.quick)
    for label in ("full pull", "pull of last 100"):
        if "%s, core zstd" % label not in results:
            continue
        core_r, ours_r = (results["%s, %s" % (label, side)]
                          for side in ("core zstd", "wirezstd"))
        check.compare("%s, bytes received" % label, core_r["bytes"],
                      ours_r["bytes"], "bytes", "lower", "core zstd")
        check.compare("%s, server CPU" % label, core_r["server_cpu"],
                      ours_r["server_cpu"], "seconds", "lower", "core zstd")
        if ours_r["changesets"] != core_r["changesets"]:
            raise Failed("%s: wirezstd brought %d changesets, core %d"
                         % (label, ours_r["changesets"],
                            core_r["changesets"]))
    full = results.get("full pull, wirezstd")
    if full and full["changesets"] != check.info["changesets"]:
        raise Failed("the full pull brought %d of %d changesets"
                     % (full["changesets"], check.info["changesets"]))


def _spread(count, total, usable):
    """``count`` revisions spread over ``0..total-1``, the tip first, each
    accepted by ``usable``."""
    picks = []
    for fraction in (1.0, 0.5, 0.9, 0.25, 0.75, 0.1, 0.6, 0.4, 0.95, 0.05,
                     0.85, 0.15, 0.7, 0.3, 0.8, 0.2):
        rev = max(0, int(round((total - 1) * fraction)))
        if rev not in picks and usable(rev):
            picks.append(rev)
            if len(picks) == count:
                break
    return picks


def _without_subrepos(check, env, rev):
    """Whether revision ``rev`` of the copy has no subrepositories, whose
    checkout would reach for their servers (a converted Git submodule
    aborts: git subrepos are not allowed by default)."""
    return not check.hg(["files", "-R", check.base, "-r", rev,
                         "-I", "path:.hgsub"], env, check=False).strip()


def checkouts(check, work):
    core = check.hg_env()
    ours = check.hg_env(["sharepool", "share"])
    revs = _spread(check.checkouts_count(), check.info["changesets"],
                   lambda rev: _without_subrepos(check, core, rev))
    if len(revs) < 2:
        return "fewer than 2 revisions without subrepositories"
    nodes = [check.hg(["log", "-R", check.base, "-r", rev, "-T", "{node}"],
                      core) for rev in revs]
    with servers.HgServer(core, check.base) as server:
        _pooled_checkouts(
            check, work, nodes, "hg clone",
            lambda node, dest: check.hg(["clone", "-q", "-u", node,
                                         server.url, dest], core),
            "robustcheckout",
            lambda node, dest, pool: check.hg([
                "robustcheckout", "--sharebase", pool, "-r", node,
                server.url, dest], ours),
            lambda dest: (
                check.hg(["log", "-R", dest, "-r", ".", "-T", "{node}"],
                         ours),
                check.hg(["status", "-R", dest], ours)))
    check.fact("revisions", revs)


def _pooled_checkouts(check, work, targets, plain_name, plain, pooled_name,
                      pooled, state):
    """Time ``plain(target, dest)`` (a whole clone) for the first target,
    then ``pooled(target, dest, pool)`` for each, checking that
    ``state(dest)`` (the node checked out, the local changes) is right."""
    with check.step("plain %s, checked out" % plain_name):
        dest = os.path.join(work, "plain")
        start = time.perf_counter()
        plain(targets[0], dest)
        plain_seconds = time.perf_counter() - start
        plain_bytes = pooling.disk_usage(dest)
        shutil.rmtree(dest)
    pool = os.path.join(work, "pool")
    dests = [os.path.join(work, "checkout-%d" % i)
             for i in range(len(targets))]
    times = []
    for index, (target, dest) in enumerate(zip(targets, dests)):
        with check.step("%s %d of %d" % (pooled_name, index + 1,
                                         len(targets))):
            start = time.perf_counter()
            pooled(target, dest, pool)
            times.append(time.perf_counter() - start)
        found, changes = state(dest)
        if found.strip() != target:
            raise Failed("checkout %d is at %s, not %s"
                         % (index + 1, found.strip()[:12], target[:12]))
        if changes.strip():
            raise Failed("checkout %d has local changes" % (index + 1))
    check.compare("first checkout, seconds", plain_seconds, times[0],
                  "seconds", "lower", plain_name)
    check.compare("each later checkout, seconds", plain_seconds,
                  sum(times[1:]) / len(times[1:]), "seconds", "lower",
                  plain_name)
    check.compare("disk for %d checkouts" % len(targets),
                  plain_bytes * len(targets),
                  pooling.disk_usage(pool, *dests), "bytes", "lower",
                  "%s each" % plain_name)


def _linear_slice(check, env, length):
    """Revisions ``(first, last)`` of the newest linear run of history
    (no merges, each changeset the only child of the one before, each
    touching files), at most ``length`` long."""
    out = check.hg(["log", "-R", check.base, "-r", "last(all(), 5000)",
                    "-T", "{rev} {p1rev} {p2rev} {files|count}\n"], env)
    rows = [tuple(map(int, line.split())) for line in out.splitlines()]
    children = {}
    for rev, p1, p2, _ in rows:
        for parent in (p1, p2):
            children[parent] = children.get(parent, 0) + 1
    best = None
    run = []
    for rev, p1, p2, files in rows:
        linear = p2 == -1 and files > 0 and p1 != -1
        if linear and run and p1 == run[-1] and children[p1] == 1:
            run.append(rev)
        else:
            run = [rev] if linear else []
        if run and (best is None or len(run) >= min(len(best), length)):
            best = run[-length:]
    if not best or len(best) < 3:
        return None
    return best[0], best[-1]


def commit_ids(check, work):
    core = check.hg_env()
    ours = check.hg_env(
        ["commitid", "rebase", "histedit"],
        "[experimental]\nevolution = all\n"
        "[rebase]\nexperimental.inmemory = yes\n"
        "[ui]\neditor = true\n")
    length = 12 if check.quick else 100
    found = _linear_slice(check, core, length)
    if found is None:
        return "the history has no linear run of 3 changesets to rewrite"
    first, last = found
    repo = os.path.join(work, "repo")
    with check.step("clone, give %d changesets commit IDs"
                    % (last - first + 1)):
        check.hg(["clone", "-q", "-U", check.base, repo], core)
        check.hg(["phase", "--draft", "--force", "-r", "%d::" % first],
                 ours, cwd=repo)
        check.hg(["commitid-add", "-r", "%d::%d" % (first, last)], ours,
                 cwd=repo)
    with_ids = "successors(%d::%d) - obsolete()" % (first, last)
    old = commitids.read_series(repo, with_ids, hidden=True, env=ours)
    if any(c.commit_id is None for c in old):
        raise Failed("commitid-add left %d changesets without an ID"
                     % sum(c.commit_id is None for c in old))
    with check.step("rebase onto a new base"):
        base = check.hg(["--config", "extensions.checkcmds=%s"
                         % checkcmds.__file__, "check-newbase",
                         "p1(%s)" % old[0].node], ours, cwd=repo).strip()
        check.hg(["rebase", "-q", "-r", "%s::%s" % (old[0].node,
                                                   old[-1].node),
                  "-d", base], ours, cwd=repo)
    above = "descendants(%s) and not %s" % (base, base)
    rebased = check.hg(["log", "-R", repo, "-r", above, "-T", "{node}\n"],
                       ours).split()
    plan = os.path.join(work, "plan")
    folds = 0
    with open(plan, "w") as fh:
        for index, node in enumerate(rebased):
            action = "fold" if index % 3 == 2 else "pick"
            folds += action == "fold"
            fh.write("%s %s\n" % (action, node))
    with check.step("update, histedit: fold every third"):
        # histedit works in the working directory, from its parent down.
        check.hg(["update", "-q", "-r", rebased[-1]], ours, cwd=repo)
        check.hg(["histedit", "-q", "--commands", plan, rebased[0]], ours,
                 cwd=repo)
    with check.step("map by commit ID"):
        start = time.perf_counter()
        new = commitids.read_series(repo, above, env=ours)
        mapping = commitids.map_series(old, new)
        id_seconds = time.perf_counter() - start
        start = time.perf_counter()
        truth = commitids.with_predecessors(repo, old, new, env=ours)
        marker_seconds = time.perf_counter() - start
    by_id = [m for m in mapping.matches if m.how == "commit-id"]
    agree = [m for m, t in zip(mapping.matches, truth)
             if m.old is not None and m.old.node in t.predecessors]
    folded = [o for o in mapping.unmatched_old
              if any(o.node in t.predecessors for t in truth)]
    check.compare("changesets mapped", len(new), len(by_id), "changesets",
                  "higher", "core obsolescence markers")
    check.compare("mapping seconds", marker_seconds, id_seconds, "seconds",
                  "lower", "core obsolescence markers")
    check.fact("slice", "%d changesets, revisions %d to %d"
               % (len(old), first, last))
    check.fact("folded", folds)
    problems = []
    if len(new) != len(old) - folds:
        problems.append("%d changesets after folding %d of %d"
                        % (len(new), folds, len(old)))
    if len(agree) != len(new):
        problems.append("%d of %d mapped as the obsolescence markers say"
                        % (len(agree), len(new)))
    if len(folded) != folds or len(mapping.unmatched_old) != folds:
        problems.append("%d folded changesets accounted for, of %d"
                        % (len(folded), folds))
    if mapping.conflicts or mapping.duplicate_ids:
        problems.append("%d conflicts, %d duplicate IDs" % (
            len(mapping.conflicts), len(mapping.duplicate_ids)))
    if problems:
        raise Failed("; ".join(problems))


def importer(check, work):
    tree = os.path.join(work, "tree")
    with check.step("hg archive the Python files at tip"):
        try:
            check.hg(["archive", "-r", "tip", "-t", "files", "-I",
                      "glob:**.py", tree], check.hg_env(), cwd=check.base)
        except tools.CommandError as err:
            if "no files match the archive pattern" in err.stderr:
                return "the repository has no Python files at tip"
            raise
    paths = sorted(os.path.join(root, name)
                   for root, _, names in os.walk(tree) for name in names
                   if name.endswith(".py"))
    if not paths:
        return "the repository has no Python files at tip"
    plain_seconds = ours_seconds = 0.0
    python2 = []
    broken = []
    with check.step("compile %d files, plain and rewritten" % len(paths)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for index, path in enumerate(paths):
                if index % 50 == 0:
                    check.console.count(index, len(paths), "files")
                with open(path, "rb") as fh:
                    data = fh.read()
                start = time.perf_counter()
                try:
                    compile(data, path, "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    python2.append(path)
                    continue
                finally:
                    plain_seconds += time.perf_counter() - start
                start = time.perf_counter()
                try:
                    pastbytes.compile_source(data, path)
                except (SyntaxError, ValueError, pastbytes.ScanError) as exc:
                    broken.append("%s: %s" % (os.path.relpath(path, tree),
                                              exc))
                finally:
                    ours_seconds += time.perf_counter() - start
    check.compare("compile seconds", plain_seconds, ours_seconds,
                  "seconds", "lower", "plain compile")
    check.fact("python files", len(paths))
    check.fact("not Python 3 as they are", len(python2))
    check.fact("compile after the rewrite", len(paths) - len(python2)
               - len(broken))
    if broken:
        raise Failed("%d files compile as they are but not after the "
                     "rewrite, the first %s" % (len(broken), broken[0]))


def git_checkouts(check, work):
    env = check.hg_env()
    commits = tools.run(["git", "-C", check.git, "rev-list",
                         "--first-parent", "HEAD"], env).split()[::-1]
    picks = [commits[i] for i in _spread(check.checkouts_count(),
                                         len(commits), lambda i: True)]
    url = "file://" + check.git

    def plain(commit, dest):
        tools.run(["git", "clone", "-q", "--no-checkout", url, dest], env)
        tools.run(["git", "-C", dest, "checkout", "-q", commit], env)

    _pooled_checkouts(
        check, work, picks, "git clone", plain, "gitbridge checkout",
        lambda commit, dest, pool: check.command([
            tools.executable("gitbridge"), "checkout", "--sharebase", pool,
            "-r", commit, url, dest], env),
        lambda dest: (
            tools.run(["git", "-C", dest, "rev-parse", "HEAD"], env),
            tools.run(["git", "-C", dest, "status", "--porcelain"], env)))


# Report -------------------------------------------------------------------

def _amount(value, unit):
    if unit == "bytes":
        return pooling.format_bytes(value)
    if unit == "bytes/s":
        return "%.1f MB/s" % (value / 1e6)
    if unit == "seconds":
        return "%.2f s" % value
    return "%d %s" % (value, unit)


def format_feature(feature):
    lines = ["%-14s %s  (%.1f s)%s" % (
        feature["name"], feature["status"].upper(), feature["seconds"],
        ": " + feature["error"] if feature["error"] else "")]
    for c in feature["comparisons"]:
        lines.append("    %-36s %-26s %12s  ours %12s  %7s" % (
            c["what"], c["core_label"], _amount(c["core"], c["unit"]),
            _amount(c["ours"], c["unit"]),
            "%.3fx" % c["ratio"] if c["ratio"] is not None else "-"))
    for name, value in feature["facts"].items():
        if not isinstance(value, (dict, list)):
            lines.append("    %s: %s" % (name, value))
    return "\n".join(lines)


def format_report(report):
    """The whole report for people: the summary, then steps and totals."""
    lines = ["", "%-14s %-8s %8s  %s" % ("feature", "result", "seconds",
                                          "headline (ours vs core)")]
    for feature in report["features"]:
        head = feature["comparisons"][:1]
        lines.append("%-14s %-8s %8.1f  %s" % (
            feature["name"], feature["status"], feature["seconds"],
            "%s: %.3fx %s" % (head[0]["what"], head[0]["ratio"],
                              head[0]["core_label"])
            if head and head[0]["ratio"] is not None else
            feature["error"] or ""))
    lines += ["", "steps (wall seconds):"]
    for step in report["steps"]:
        lines.append("  %-14s %-44s %8.1f" % (step["feature"], step["step"],
                                              step["seconds"]))
    memory = report["peak_memory"]
    scratch = report["scratch"]
    lines += [
        "",
        "peak memory: %s in the largest process (during %s), %s in the "
        "runner" % (pooling.format_bytes(memory["largest_process_bytes"]),
                    memory["reached_in"],
                    pooling.format_bytes(memory["runner_bytes"])),
        "disk: the scratch directory took at most %s (during %s) of the "
        "%s estimated" % (pooling.format_bytes(scratch["peak_used_bytes"]),
                          scratch["peak_reached_in"],
                          pooling.format_bytes(scratch["estimated_bytes"])),
        "original repository unchanged: %s" % (
            "yes" if report["original_unchanged"] else
            "NO: " + ", ".join(report["original_changed_files"])),
        "total: %.1f s for %d changesets (%.2f min per 10k changesets): %s"
        % (report["seconds"], report["changesets"],
           report["minutes_per_10k_changesets"],
           "PASSED" if report["passed"] else "FAILED"),
    ]
    return "\n".join(lines)


def report_run(check, json_path=None):
    """Run ``check``, print its report and write it as JSON to
    ``json_path``; the exit status: 0 when every feature passed, 1 when one
    failed, 255 when the check could not start, 130 after Ctrl-C and 143
    after SIGTERM."""
    try:
        report = check.run()
    except Abort as abort:
        return print_abort(abort)
    except KeyboardInterrupt as interrupt:
        sys.stderr.write("\ninterrupted%s\n" % (
            "" if check.scratch is None else ": %s %s" % (
                check.scratch, "kept" if check.keep else "removed")))
        return 128 + (signal.SIGTERM if isinstance(interrupt, _Terminated)
                      else signal.SIGINT)
    check.console.say(format_report(report))
    if json_path:
        with open(json_path + ".tmp", "w") as fh:
            json.dump(report, fh, indent=2)
        os.replace(json_path + ".tmp", json_path)
    return 0 if report["passed"] else 1


def main(args):
    """``vcsperf check`` with its parsed command line."""
    return report_run(Check(args.repo, git=args.git, quick=args.quick,
                            scratch=args.scratch, reserve=args.reserve,
                            keep=args.keep), args.json)
