"""``vcsperf check``: every feature of the suite, run on a copy of a user's
own repository, with its figures beside core Mercurial's.

The repository given is only read, without taking its locks: the runner
hardlinks its history into a scratch directory (plain copies when the
scratch directory is on another filesystem; a clone by pull when the
repository keeps being written meanwhile), works on clones of that, and
removes the scratch directory at the end, after Ctrl-C or SIGTERM too.
Before and after, it records the name, size, inode and modification time
of every file under the repository's ``.hg`` and reports whether any
changed: a write by anything, the run or another process.  A reader of
the repository changes nothing of it that counts: a lock taken and
released (``hg clone`` takes one on its source) leaves no file, and the
caches hg rewrites as it reads are reported apart.

With ``--quick`` the features work on a slice of the newest changesets
(``sample``: twice the square root of the history, at least 200, or
``--slice N``) written into a repository of their own, so that a quick
run takes minutes on any history and grows with the square root of its
length; without it, on the copy, in time linear in the store.  The
features, each on its own directory, removed when it is done:

dictionaries
  train dictionaries on a hardlinked copy, convert it to ``zstd-dict``
  (zstdstore) with them in one rewrite, run ``hg verify``, and compare
  the full text of every revision of every revlog with the copy as it
  was; sizes and full-text read speed beside the engine the repository
  uses.
wire
  pulls by core zstd and by wirezstd (the whole history and the last 100
  changesets): bytes received and server CPU.
bundles
  ``hg bundlegen`` (zstd-max, gzip and stream), served over HTTP on
  127.0.0.1 with ``hg serve``; a stock hg clones from each bundle and the
  clone is verified; sizes beside core's gzip and zstd bundles of the same
  changesets, clone times beside the wire's pull of everything by core.
checkouts
  ``hg robustcheckout`` of several revisions into one pool, against a
  plain ``hg clone``: times and disk.
commit IDs
  a linear slice of the real history gets commit IDs, is rebased onto a
  new base and has every third changeset folded; the mapping by commit ID
  is then checked against core's obsolescence markers.
importer
  every Python file at the tip (with ``--quick``, 200 of them, named in
  the report) goes through the pastbytes rewrite and is compiled, beside
  a plain compile.
git checkouts (with ``--git``)
  ``gitbridge checkout`` of several commits into one pool, against a plain
  ``git clone``.

Each feature is a function ``(check, work)`` in a module of this package
(``store``, ``clones``, ``checkouts``, ``commit_ids``, ``importer``) that
returns None when it passed, a reason when it skipped, and raises
``outcome.Failed`` when it failed; this module runs them, one at a time
but for the pairs in ``BESIDE``, which run side by side on the two cores
while neither runs a timed step (a step whose time a comparison uses has
the machine to itself).

The report gives, per feature, passed or failed with the reason, and the
figures as ratios; then the wall time of every step, the peak memory and
the disk the run took.  The time and the free disk the run needs are
estimated before anything starts (``SECONDS_PER``; the disk is checked),
and the report says how far off both were.  Every step shows its progress
on stderr, with an ETA: a live line on a terminal, a line every 30 seconds
elsewhere.

With ``--resume DIR`` the scratch directory is ``DIR/vcsperf-check``,
which the run makes, marks as its own with a file in it, and keeps its
state in, written after each completed feature: a run killed or
interrupted keeps it, and the same command continues it from its last
completed feature; the finished report is the one an uninterrupted run
gives (its timings aside).  At the end the run removes that directory
only (and DIR, if it made DIR and DIR is empty): nothing else of DIR is
touched, a ``vcsperf-check`` it did not mark is refused, and so is a DIR
that holds the repository under test (or ``--git``'s), or a DIR or
``--scratch`` inside one's ``.hg``.  ``--json FILE`` is checked before
anything runs and written by write-then-rename.

The features work on the visible changesets (hidden ones are neither
pulled nor cloned; the dictionaries compare the copy with its converted
copy, hidden changesets and all), leave out changesets with
subrepositories where they would check them out or rebase them, take
file names as hg stores them (any byte), and read only regular files.
``vcsperf demo`` runs the same checks on the repository it builds.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time

from vcsperf.bench import zstdstore
from vcsperf.check import sample, tree
from vcsperf.check.checkouts import checkouts, git_checkouts
from vcsperf.check.clones import bundles, wire
from vcsperf.check.commit_ids import commit_ids, rewritten
from vcsperf.check.importer import QUICK_FILES, importer
from vcsperf.check.outcome import Failed, command_failure
from vcsperf.check.store import dictionaries
from vcsperf.core import pooling
from vcsperf.core.errors import Abort, print_abort
from vcsperf.harness import tools

#: Room kept free beyond the estimate, for what the filesystem itself
#: needs and for surprises.
DISK_MARGIN = 256 * 2**20
#: Copies of a repository that is being written to before the copy is
#: made by pull instead.
COPY_ATTEMPTS = 3
#: Files of the run beside the features': the copy's own requirements and
#: caches, hgrc files, server logs.
SMALL_FILES = 2**20
#: The directory a run under ``--resume DIR`` makes in DIR and works in,
#: the only one of DIR it ever removes; the file it writes there first,
#: by which a later run knows the directory as one it made; and the run's
#: state and the file a running one holds locked, both in that directory.
RUN_DIR = "vcsperf-check"
MARKER_FILE = "made-by-vcsperf-check"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
#: Seconds each part of a run takes on this machine: fixed (``run``), per
#: MB of the store the features work on (the copy's, or with --quick the
#: slice's), per MB of the original store, per changeset of the slice
#: (writing it), per thousand changesets the features work on, per
#: thousand files at the tip, per thousand Python files compiled, per
#: changeset the commit IDs feature rewrites.  Fitted to three runs on
#: this machine with the 2 cores shared with other jobs at load 1 to 4
#: (BENCHMARKS.md: sympy and vct quick, vct full; the wire's per-changeset
#: rate refitted to a later vct full run, once the base of its pull of the
#: last 100 was stripped instead of pulled); at load 10 a run takes 3 to 8
#: times as long.
SECONDS_PER = {
    "copy": {"run": 0.5, "store MB": 0.002, "changesets": 0.036,
             "kfiles": 0.5},
    "dictionaries": {"run": 7.4, "MB": 0.42, "kchangesets": 6.0},
    "wire": {"run": 16, "MB": 0.1, "kchangesets": 2.4},
    "bundles": {"run": 6, "MB": 2.2, "kchangesets": 1.9},
    "checkouts": {"run": 6, "MB": 0.27, "kfiles": 4, "kchangesets": 2.4},
    "commit IDs": {"kfiles": 5.5, "rewritten": 0.3},
    "importer": {"run": 1.5, "Python kfiles": 10},
    "git checkouts": {"run": 10, "kfiles": 5},
}


# Terminal ---------------------------------------------------------------

def _duration(seconds):
    seconds = int(seconds)
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % divmod(seconds, 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def _printable(text, stream):
    """``text`` as ``stream`` can write it: a file name that is not in
    its encoding (a byte that is not UTF-8) shown escaped."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding)


class _Task:
    """A step on the progress line."""

    def __init__(self, label):
        self.label = label
        self.detail = ""
        self.start = time.monotonic()


class Console:
    """Report lines on ``out``; progress on ``err`` for the running steps
    (one per thread): each one's elapsed time and progress bar (ours, with
    its ETA, or the one hg draws for the command the step runs, with hg's
    estimate), and the time the run has left by its estimate.  On a
    terminal it is a live line; elsewhere (a log file, a pipe) a line every
    ``LOG_INTERVAL`` seconds."""

    #: Seconds between two progress lines when ``err`` is not a terminal.
    LOG_INTERVAL = 30

    def __init__(self, out=None, err=None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = self.err.isatty()
        #: ``time.monotonic()`` at which the run should end, by its
        #: estimate; None until there is one.
        self.expected_end = None
        self._lock = threading.Lock()
        #: {thread ident: _Task} of the steps running
        self._tasks = {}
        #: the thread drawing the progress line, and its stop signal
        self._ticker = None

    def say(self, text=""):
        with self._lock:
            self._clear()
            self.out.write(_printable(text, self.out) + "\n")
            self.out.flush()

    def current(self):
        """The step the calling thread runs, or None."""
        return self._tasks.get(threading.get_ident())

    def detail(self, text, task=None):
        """Show ``text`` beside ``task`` (the calling thread's step)."""
        task = task or self.current()
        if task is not None:
            task.detail = text

    def count(self, done, total, unit):
        task = self.current()
        if task is None:
            return
        width = 24
        filled = width * done // max(total, 1)
        elapsed = time.monotonic() - task.start
        task.detail = "[%s%s] %d/%d %s%s" % (
            "=" * filled, " " * (width - filled), done, total, unit,
            " ETA %s" % _duration(elapsed * (total - done) / done)
            if done else "")

    @contextlib.contextmanager
    def task(self, label):
        ident = threading.get_ident()
        with self._lock:
            self._tasks[ident] = _Task(label)
            if self._ticker is None:
                stopped = threading.Event()
                self._ticker = (threading.Thread(
                    target=self._tick, args=(stopped,), daemon=True),
                    stopped)
                self._ticker[0].start()
        try:
            yield
        finally:
            ticker = None
            with self._lock:
                self._clear()
                del self._tasks[ident]
                if not self._tasks:
                    ticker, self._ticker = self._ticker, None
            if ticker:
                ticker[1].set()
                ticker[0].join()

    def _tick(self, stopped):
        interval = 0.25 if self.live else self.LOG_INTERVAL
        while not stopped.wait(interval):
            now = time.monotonic()
            line = "  " + "  |  ".join(
                "%s  %s  %s" % (task.label, _duration(now - task.start),
                                task.detail)
                for task in list(self._tasks.values()))
            if self.expected_end is not None:
                line += "  (run: about %s left)" % _duration(
                    max(0, self.expected_end - now))
            with self._lock:
                if self.live:
                    columns = shutil.get_terminal_size().columns - 1
                    self.err.write("\r" + _printable(
                        line[:columns].ljust(columns), self.err))
                else:
                    self.err.write(_printable(line, self.err) + "\n")
                self.err.flush()

    def _clear(self):
        if self.live and self._tasks:
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
    """Size, device and inode, and modification time of every file under
    ``repo/.hg``, by name: what any write changes (an append the size and
    time, a write-then-rename the inode, a new or removed file the
    names)."""
    prints = {}
    top = os.path.join(repo, ".hg")
    for root, _, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            prints[os.path.relpath(path, top)] = (
                st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns)
    return prints


#: Files under ``.hg`` that any reader of a repository may change without
#: changing the repository: locks, which ``hg clone`` takes on its source
#: and which leave nothing behind, and the caches, which hg rewrites as it
#: reads.
_LOCKS = ("wlock", "lock", os.path.join("store", "lock"))
_CACHES = ("cache" + os.sep, "wcache" + os.sep)


def _original_changes(before, after):
    """``(changed, caches)``: the files under ``.hg`` that were written,
    created or removed between two ``_fingerprint``s, and, apart from
    them, the caches that were."""
    names = sorted(name for name in set(before) | set(after)
                   if before.get(name) != after.get(name)
                   and name not in _LOCKS)
    caches = [name for name in names if name.startswith(_CACHES)]
    return [name for name in names if name not in caches], caches


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
    the tree.  ``where()`` says what is running, as a list of ``(feature,
    step)`` (features may run side by side): ``peak_where`` is where the
    largest sample, ``peak``, was taken (the first of them), and ``peaks``
    the largest sample taken while each feature ran."""

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
            if used > self.peak and where:
                self.peak, self.peak_where = used, where[0]
            for feature, _ in where:
                if used > self.peaks.get(feature, -1):
                    self.peaks[feature] = used
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


class Machine:
    """Who may run now.  A feature shares the machine with the one beside
    it, if any, for its untimed work (preparation, verification); a timed
    step has the machine to itself: it waits until nothing else runs, and
    nothing else starts before it ends."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._alone
                                and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        """For a thread that shares the machine: have it alone, then share
        it again (at once after an interrupt, which ends the run)."""
        with self._cond:
            self._shared -= 1
            self._waiting += 1
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: not self._alone
                                    and not self._shared)
            except BaseException:
                self._shared += 1
                raise
            finally:
                self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()
                try:
                    self._cond.wait_for(lambda: not self._alone
                                        and not self._waiting)
                finally:
                    self._shared += 1


class _Doing:
    """What a thread of the run does: the feature (the dict the report
    gets), its step's label, and its steps so far."""

    def __init__(self, feature, steps):
        self.feature = feature
        self.step = None
        self.steps = steps


#: Features run side by side, the second in a thread of its own, sharing
#: the machine while neither runs a timed step: commit IDs (nothing of it
#: timed but its last step) beside the dictionaries' training, conversion
#: and verification.
BESIDE = {"dictionaries": "commit IDs"}


def _side_by_side(parts):
    """``parts`` ({feature: bytes}) with each pair of ``BESIDE`` that is in
    it as one part, the sum of the two."""
    parts = dict(parts)
    for first, second in BESIDE.items():
        if first in parts and second in parts:
            parts[first] += parts.pop(second)
    return parts


class _Stopped(KeyboardInterrupt):
    """Raised in a feature running beside one that was interrupted."""


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: clean up, then stop."""


def _terminate(signum, frame):
    raise _Terminated()


def _made_by_check(run_dir):
    """The marker ``vcsperf check`` wrote in ``run_dir`` when it made it
    (a dict), or None when ``run_dir`` is not a directory it made."""
    marker = os.path.join(run_dir, MARKER_FILE)
    try:
        if os.path.islink(run_dir) or not stat.S_ISREG(
                os.lstat(marker).st_mode):
            return None
        with open(marker) as fh:
            made = json.loads(fh.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(made, dict) or made.get("made_by") != "vcsperf check":
        return None
    return made


def _state_digest(state):
    """What tells the state as the run wrote it from one damaged or
    edited since (JSON is ASCII: ``ensure_ascii``)."""
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode(
        "ascii")).hexdigest()


def _write_replacing(path, text):
    """Write ``text`` to ``path`` by write-then-rename: a reader sees the
    old file or the new one, whole."""
    fd, temporary = tempfile.mkstemp(prefix=".%s-" % os.path.basename(path),
                                     dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _inside(path, top):
    """Whether ``path`` is ``top`` or under it, symlinks resolved."""
    path, top = os.path.realpath(path), os.path.realpath(top)
    return os.path.commonpath([path, top]) == top


class Check:
    """One run of every feature on a copy of ``source``."""

    def __init__(self, source, git=None, quick=False, scratch=None,
                 reserve=0, console=None, keep=False, resume=None,
                 slice_size=None):
        self.source = os.path.abspath(source)
        self.git = os.path.abspath(git) if git else None
        self.quick = quick
        self.scratch_root = os.path.abspath(scratch or tempfile.gettempdir())
        self.reserve = reserve
        self.console = console or Console()
        self.keep = keep
        #: The directory of a resumable run: its scratch and its state.
        self.resume = os.path.abspath(resume) if resume else None
        self.slice_size = slice_size
        self.scratch = None
        #: The repository the features work on: the copy, or with
        #: ``quick`` the slice of its newest changesets; and its length.
        self.base = self.copy = None
        self.base_changesets = None
        self._resume_lock = None
        self.steps = []
        self.features = []
        #: {thread ident: _Doing} of the features running
        self._running = {}
        self._machine = Machine()
        self._state_lock = threading.Lock()
        #: set when the run is interrupted while a feature runs beside:
        #: that one stops before its next command
        self._stopping = False
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
        # hg draws its progress bars on a pipe only if told to; the
        # runner shows them on its progress line.
        env["HGPLAINEXCEPT"] = "progress"
        return env

    def copy_base(self, dest):
        """A hardlinked copy of the repository the features work on, in
        ``dest``, every changeset of it (hidden ones too)."""
        if not copy_repository(self.base, dest):
            raise Failed("%s was written to while it was copied" % self.base)

    def path(self, *names):
        return os.path.join(self.scratch, *names)

    # -- steps ------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, label, timed=True):
        """Time one step of the current feature, with a live line.  A
        step whose time counts in a comparison (``timed``) has the machine
        to itself; one that only prepares or verifies shares it with the
        feature running beside, if any."""
        doing = self._doing()
        with self._machine.alone() if timed else contextlib.nullcontext():
            start = time.perf_counter()
            doing.step = label
            title = "%s: %s" % (doing.feature["name"], label)
            try:
                with self.console.task(title):
                    yield
            finally:
                seconds = time.perf_counter() - start
                doing.steps.append({"feature": doing.feature["name"],
                                    "step": label,
                                    "seconds": round(seconds, 3)})
                self._after_step(title)
                doing.step = None

    def _doing(self):
        """The _Doing of the feature this thread runs."""
        return self._running[threading.get_ident()]

    def _after_step(self, title):
        self._disk.sample()
        peak = _peak_child_rss()
        if self._peak_step is None or peak > self._peak_step[1]:
            self._peak_step = (title, peak)

    def _where(self):
        return [(doing.feature["name"], doing.step)
                for doing in list(self._running.values())]

    def hg(self, args, env, cwd=None, on_line=None, check=True):
        """Run hg; its progress bars feed the live line, ``on_line`` gets
        each line of its output as it comes; returns the output."""
        args = [tools.executable("hg"), *map(str, args), "--config",
                "progress.assume-tty=yes", "--config", "progress.delay=0.5"]
        return self.command(args, env, cwd, on_line, check)

    def command(self, args, env, cwd=None, on_line=None, check=True):
        """Run any command as ``hg`` is run; a failure raises
        ``tools.CommandError`` with what it wrote to stderr."""
        if self._stopping:
            raise _Stopped()
        task = self.console.current()
        return tools.run(args, env, cwd, check, on_line=on_line,
                         on_progress=lambda text: self.console.detail(
                             text, task))

    # -- comparisons ------------------------------------------------------

    def compare(self, what, core, ours, unit, better, core_label="core"):
        """One figure of the current feature beside core's."""
        self._doing().feature["comparisons"].append({
            "what": what, "core_label": core_label, "core": core,
            "ours": ours, "unit": unit, "better": better,
            "ratio": round(ours / core, 4) if core else None})

    def fact(self, name, value):
        self._doing().feature["facts"][name] = value

    def fact_of(self, feature, name):
        """A fact of a feature that ran before (None if it did not get
        that far): a resumed run has it too."""
        return next((f["facts"].get(name) for f in self.features
                     if f["name"] == feature), None)

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
        files = tree.files(tools.hg, self.source, "tip", env)
        sizes = [f.size for f in files]
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
            # hidden ones too, until the copy counts the visible ones
            # (counting them here would write the original's caches)
            "changesets": int(tip) + 1,
            "store_bytes": zstdstore.store_bytes(self.source)["total"],
            # What they take on disk: whole blocks, and directories.
            "store_disk_bytes": pooling.disk_usage(store),
            "directories_bytes": _directories_bytes(
                os.path.join(self.source, ".hg")),
            "checkout_bytes": sum(sizes),
            "checkout_disk_bytes": _checkout_disk_bytes(
                [f.path for f in files], sizes,
                os.statvfs(self.source).f_frsize),
            "files_at_tip": len(sizes),
            "python_files_at_tip": sum(f.path.endswith(".py")
                                       for f in files),
            "engine": ("zstd-dict" if "exp-compression-zstd-dict" in requires
                       else "zstd" if "revlog-compression-zstd" in requires
                       else "zlib"),
            "hg_version": tools.hg(["version", "-T", "{ver}"], env),
            "tip": tools.hg(["log", "-R", self.source, "-r", "tip", "-T",
                             "{node}"], env),
            "quick": self.quick,
        }

    def checkouts_count(self):
        return 2 if self.quick else 4

    def _slice_changesets(self, info):
        return self.slice_size or sample.slice_size(info["changesets"])

    def _sliced(self, info):
        """Whether the features work on a slice of the history (with
        ``--quick``, unless the history is no longer than the slice)."""
        return self.quick and self._slice_changesets(info) < info[
            "changesets"]

    def _work_bytes(self, info):
        """Bytes of the store the features work on: the copy's, or the
        slice's (its share of the history, and its first changeset's
        whole tree, compressed)."""
        store = info["store_disk_bytes"]
        if not self._sliced(info):
            return store
        share = self._slice_changesets(info) / info["changesets"]
        return int(store * share) + info["checkout_disk_bytes"] // 2

    def estimate_disk(self, info):
        """``{part: bytes}``: the disk the copy of the repository takes
        with the run's small files (``"copy"``; when hardlinked, only its
        directories; with ``--quick``, with the slice), and what each
        feature takes at its peak besides.  Sizes are as allocated on disk
        (``info``'s ``*_disk_bytes``)."""
        store, tree = info["store_disk_bytes"], info["checkout_disk_bytes"]
        work = self._work_bytes(info)
        same_fs = os.stat(self.source).st_dev == os.stat(
            self.scratch_root).st_dev
        # A clone by pull stores the deltas it computes, beside a journal:
        # up to 1.1 times the original's store measured, a quarter kept.
        pulled = work + work // 4
        checkouts = self.checkouts_count()
        parts = {
            "copy": SMALL_FILES + (info["directories_bytes"] if same_fs
                                   else store) + (
                                       pulled if self._sliced(info) else 0),
            # the upgraded store beside the old one, then the revlogs
            # being recompressed
            "dictionaries": 2 * work,
            # every bundle (zstd-max, gzip, stream, core zstd-v2), each
            # smaller than the store, and a clone from each of the three,
            # verified together at the end
            "bundles": 4 * work + 3 * pulled,
            "wire": pulled,
            # the pool, the checkouts, and a plain clone beside them
            "checkouts": 2 * pulled + (checkouts + 1) * tree,
            # writing to a hardlinked revlog copies it first: the rewritten
            # revlogs, up to the whole store, and a working directory
            "commit IDs": work + tree,
            # the Python files at tip
            "importer": tree,
        }
        if self.git:
            git = pooling.disk_usage(self.git)
            parts["git checkouts"] = 2 * git + (checkouts + 1) * tree
        return parts

    def disk_needed(self, parts):
        """Bytes of free disk the run needs at its peak: the copy, plus
        the largest feature or pair of features run side by side (each
        feature's directory is removed when it ends), plus a margin."""
        return parts["copy"] + max(_side_by_side(
            {k: v for k, v in parts.items() if k != "copy"}).values(
            )) + DISK_MARGIN

    def estimate_seconds(self, info):
        """``{part: seconds}`` the run should take on this machine, from
        ``SECONDS_PER`` and the size of what each part works on."""
        amounts = {"MB": self._work_bytes(info) / 1e6,
                   "kfiles": info["files_at_tip"] / 1000,
                   "Python kfiles": min(
                       info.get("python_files_at_tip", 0),
                       QUICK_FILES if self.quick else float("inf"))
                   / 1000,
                   "changesets": self._slice_changesets(info)
                   if self._sliced(info) else 0,
                   "kchangesets": min(self._slice_changesets(info)
                                      if self.quick else float("inf"),
                                      info["changesets"]) / 1000,
                   "rewritten": rewritten(self.quick),
                   "store MB": info["store_disk_bytes"] / 1e6}
        parts = ["copy"] + [name for name, _ in self._features()]
        seconds = {}
        for part in parts:
            rates = SECONDS_PER[part]
            seconds[part] = round(rates.get("run", 0) + sum(
                rate * amounts[unit] for unit, rate in rates.items()
                if unit != "run"), 1)
        return seconds

    def _features(self):
        features = [("dictionaries", dictionaries), ("wire", wire),
                    ("bundles", bundles), ("checkouts", checkouts),
                    ("commit IDs", commit_ids), ("importer", importer)]
        if self.git:
            features.append(("git checkouts", git_checkouts))
        return features

    # -- the directory and state of a resumable run ------------------------

    def _run_dir(self):
        return os.path.join(self.resume, RUN_DIR)

    def _state_path(self):
        return os.path.join(self._run_dir(), STATE_FILE)

    def _open_run_dir(self):
        """Make ``DIR/vcsperf-check`` with its marker, or take the one an
        earlier run made (known by the marker), and lock it for this run
        (the lock goes with the process, killed or not).  Nothing else of
        DIR is ever written or removed."""
        if os.path.lexists(self.resume) and not os.path.isdir(self.resume):
            raise Abort("--resume %s is not a directory" % self.resume)
        run_dir = self._run_dir()
        made_parent = not os.path.lexists(self.resume)
        try:
            os.makedirs(self.resume, exist_ok=True)
            os.mkdir(run_dir)
        except FileExistsError:
            if _made_by_check(run_dir) is None:
                raise Abort("%s was not made by vcsperf check" % run_dir,
                            hint="give --resume another directory, or move "
                            "%s away" % run_dir)
        except OSError as err:
            raise Abort("cannot make %s: %s" % (run_dir, err.strerror),
                        hint="give --resume a directory you can write to")
        else:
            try:
                with open(os.path.join(run_dir, MARKER_FILE), "w") as fh:
                    json.dump({"made_by": "vcsperf check",
                               "made_parent": made_parent}, fh)
            except OSError as err:
                # just made, and not yet known as the run's by another
                shutil.rmtree(run_dir, ignore_errors=True)
                raise Abort("cannot write in %s: %s" % (run_dir,
                                                        err.strerror),
                            hint="give --resume a directory you can write "
                            "to")
        path = os.path.join(run_dir, LOCK_FILE)
        try:
            lock = open(path, "a")
        except OSError as err:
            raise Abort("cannot lock %s: %s" % (run_dir, err.strerror),
                        hint="give --resume a directory you can write to")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A run that ended meanwhile removed the directory, and the
            # lock with it.
            ended = not os.path.samestat(os.fstat(lock.fileno()),
                                         os.stat(path))
        except BlockingIOError:
            lock.close()
            raise Abort("another vcsperf check is running in %s"
                        % self.resume, hint="wait for it to end, or stop "
                        "it first")
        except FileNotFoundError:
            ended = True
        if ended:
            lock.close()
            raise Abort("another vcsperf check has just ended in %s"
                        % self.resume, hint="run the command again")
        self._resume_lock = lock

    def _remove_scratch(self):
        """Remove what the run made: its scratch directory; under
        ``--resume DIR``, ``DIR/vcsperf-check`` if it still carries the
        marker, and DIR if the run made it and it is empty."""
        if not self.resume:
            shutil.rmtree(self.scratch, ignore_errors=True)
            return
        marker = _made_by_check(self._run_dir())
        if marker is None:
            return
        shutil.rmtree(self._run_dir(), ignore_errors=True)
        if marker.get("made_parent"):
            with contextlib.suppress(OSError):
                os.rmdir(self.resume)

    def _load_state(self):
        """The state a run under ``--resume DIR`` left, or None."""
        self._open_run_dir()
        try:
            with open(self._state_path()) as fh:
                saved = json.load(fh)
            state = saved["state"]
            if saved["sha256"] != _state_digest(state):
                raise ValueError("not the state as it was written")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise Abort("%s is damaged (%s)" % (self._state_path(), err),
                        hint="remove %s to start again" % self._run_dir())
        options = {"source": self.source, "git": self.git,
                   "quick": self.quick, "slice_size": self.slice_size}
        if state.get("options") != options:
            raise Abort("%s holds a run with other options: %s"
                        % (self.resume, ", ".join(
                            "%s %s" % (k, v) for k, v in
                            state.get("options", {}).items())),
                        hint="give the same options, or remove %s to start "
                        "again" % self._run_dir())
        return state

    def _save_state(self):
        if not self.resume:
            return
        state = dict(self._state, features=self.features, steps=self.steps,
                     disk={"peak": self._disk.peak,
                           "peak_where": self._disk.peak_where,
                           "peaks": self._disk.peaks},
                     memory=self._peak_step,
                     seconds=self._previous_seconds + time.perf_counter()
                     - self._started)
        try:
            _write_replacing(self._state_path(), json.dumps(
                {"sha256": _state_digest(state), "state": state}, indent=1))
        except OSError as err:
            raise Abort("cannot save the run's state in %s: %s"
                        % (self._run_dir(), err.strerror or err),
                        hint="the run cannot be resumed; start it again")

    # -- the whole run ----------------------------------------------------

    def _start(self):
        """The state of a new run, with the free disk checked; or the
        state of the run to resume."""
        state = self._load_state() if self.resume else None
        if state is not None:
            info = state["info"]
            if self._inspect()["tip"] != info["tip"]:
                raise Abort("%s has new changesets since the run in %s "
                            "started" % (self.source, self.resume),
                            hint="remove %s to start again"
                            % self._run_dir())
            self.console.say("resuming the run in %s: %d of %d features "
                             "done" % (self.resume, len(state["features"]),
                                       len(self._features())))
            return state
        before = _fingerprint(self.source)
        info = self._inspect()
        try:
            os.makedirs(self.scratch_root, exist_ok=True)
        except OSError as err:
            raise Abort("cannot make %s: %s" % (self.scratch_root,
                                                err.strerror),
                        hint="give --scratch a directory you can write to")
        disk = self.estimate_disk(info)
        need = self.disk_needed(disk)
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
        return {
            "options": {"source": self.source, "git": self.git,
                        "quick": self.quick, "slice_size": self.slice_size},
            "fingerprint": before, "info": info, "free": free,
            "estimate": {"disk": disk, "disk_needed": need,
                         "seconds": self.estimate_seconds(info)},
            "prepared": [], "features": [], "steps": [], "disk": None,
            "memory": None, "seconds": 0.0}

    def run(self):
        """Check every feature; returns the report (a dict)."""
        self._refuse_places()
        try:
            return self._run()
        finally:
            if self._resume_lock is not None:
                # A run stopped before its first state has nothing to
                # resume: what it made goes.
                if not self.keep and not os.path.exists(
                        self._state_path()):
                    self._remove_scratch()
                self._resume_lock.close()
                self._resume_lock = None

    def _refuse_places(self):
        """Refuse a scratch or resume directory where the run would write
        into a repository under test, or whose removal would reach one."""
        repositories = [self.source] + ([self.git] if self.git else [])
        inner = [os.path.join(self.source, ".hg")]
        if self.git:
            dot_git = os.path.join(self.git, ".git")
            inner.append(dot_git if os.path.isdir(dot_git) else self.git)
        if self.resume:
            for repository in repositories:
                if _inside(repository, self.resume):
                    raise Abort("--resume %s holds the repository %s"
                                % (self.resume, repository),
                                hint="give --resume a directory outside "
                                "the repositories under test")
        for option, path in (("--resume", self.resume),
                             ("--scratch", self.scratch_root)):
            for top in inner:
                if path and _inside(path, top):
                    raise Abort("%s %s is inside %s" % (option, path, top),
                                hint="give %s a directory outside the "
                                "repositories under test" % option)

    def _run(self):
        self._started = time.perf_counter()
        self._state = state = self._start()
        self._previous_seconds = state["seconds"]
        info = self.info = state["info"]
        before = {name: tuple(p) for name, p in state["fingerprint"].items()}
        estimate, need = state["estimate"], state["estimate"]["disk_needed"]
        if self.resume:
            self.scratch = self._run_dir()
        else:
            try:
                self.scratch = tempfile.mkdtemp(prefix="vcsperf-check-",
                                                dir=self.scratch_root)
            except OSError as err:
                raise Abort("cannot write in %s: %s" % (self.scratch_root,
                                                        err.strerror),
                            hint="give --scratch a directory you can write "
                            "to")
        self.features = state["features"]
        self.steps = state["steps"]
        self._peak_step = state["memory"]
        # A hardlink to a file of the original costs no disk.
        self._disk = DiskWatch(
            self.scratch, {(p[1], p[2]) for p in before.values()},
            self._where)
        if state["disk"]:
            self._disk.peak = state["disk"]["peak"]
            if state["disk"]["peak_where"]:
                self._disk.peak_where = tuple(state["disk"]["peak_where"])
            self._disk.peaks = state["disk"]["peaks"]
        # Features side by side are counted one after the other: on this
        # machine, shared with other jobs, the pair took about 94% of that.
        total = sum(estimate["seconds"].values())
        self.console.expected_end = time.monotonic() + max(
            0, total - self._previous_seconds)
        previous = signal.signal(signal.SIGTERM, _terminate)
        completed = False
        try:
            self.console.say("vcsperf check of %s: %d changesets, store %s "
                             "(%s), hg %s%s" % (
                                 self.source, info["changesets"],
                                 pooling.format_bytes(info["store_bytes"]),
                                 info["engine"], info["hg_version"],
                                 ", quick" if self.quick else ""))
            self.console.say("estimate: %s and %s of scratch disk (%s free) "
                             "in %s" % (
                                 _duration(total), pooling.format_bytes(need),
                                 pooling.format_bytes(state["free"]),
                                 self.scratch))
            try:
                self._run_features()
            except OSError as err:
                # The features report their own; this is the scratch
                # directory itself failing (removed, full, read-only).
                raise Abort("the run cannot go on in %s: %s"
                            % (self.scratch, err),
                            hint="check the directory, then run the "
                            "command again")
            completed = True
        finally:
            signal.signal(signal.SIGTERM, previous)
            if not self.keep and (completed or not self.resume):
                self._remove_scratch()
        changed, caches = _original_changes(before, _fingerprint(
            self.source))
        seconds = self._previous_seconds + time.perf_counter() - self._started
        report = dict(info)
        report.update({
            "scratch": {"path": self.scratch, "kept": self.keep,
                        "estimated_bytes": need, "free_bytes": state["free"],
                        "peak_used_bytes": self._disk.peak,
                        "peak_reached_in": "%s: %s" % self._disk.peak_where
                        if self._disk.peak_where else None,
                        "peak_used_bytes_by_feature": self._disk.peaks,
                        # each with the copy, which stays all along
                        "estimated_bytes_by_feature": {
                            name: estimate["disk"]["copy"] + (
                                value if name != "copy" else 0)
                            for name, value in estimate["disk"].items()},
                        "actual_vs_estimate": round(
                            self._disk.peak / need, 3)},
            "estimate": {
                "seconds": round(total, 1),
                "seconds_by_part": estimate["seconds"],
                "actual_seconds_by_part": self._seconds_by_part(),
                "actual_vs_estimate": round(seconds / total, 3)
                if total else None},
            "features": self.features,
            "steps": self.steps,
            "peak_memory": {
                "runner_bytes": resource.getrusage(
                    resource.RUSAGE_SELF).ru_maxrss * 1024,
                "largest_process_bytes": max(
                    _peak_child_rss(),
                    self._peak_step[1] if self._peak_step else 0),
                "reached_in": self._peak_step[0] if self._peak_step
                else None},
            "original_unchanged": not changed,
            "original_changed_files": changed[:20],
            "original_caches_rewritten": caches[:20],
            "seconds": round(seconds, 1),
            "minutes_per_10k_changesets": round(
                seconds / 60 / info["changesets"] * 10000, 2),
        })
        if self.quick:
            report["sample"] = {
                "tip": info["tip"],
                "slice_changesets": self.base_changesets,
                "checkout_revisions": next(
                    (f["facts"].get("revisions") for f in self.features
                     if f["name"] == "checkouts"), None)}
        report["passed"] = not changed and all(
            f["status"] != "failed" for f in self.features)
        return report

    def _seconds_by_part(self):
        parts = {}
        for step in self.steps:
            parts[step["feature"]] = round(
                parts.get(step["feature"], 0) + step["seconds"], 1)
        return parts

    @contextlib.contextmanager
    def _doing_feature(self, feature, steps):
        """Run ``feature`` (its report) in this thread, its steps going to
        ``steps``, sharing the machine but for its timed steps."""
        ident = threading.get_ident()
        self._running[ident] = _Doing(feature, steps)
        try:
            with self._machine.shared():
                yield
        finally:
            del self._running[ident]

    def _run_features(self):
        done = {f["name"] for f in self.features}
        prepared = self._state["prepared"]
        copy = {"name": "copy", "status": "passed", "comparisons": [],
                "facts": {}}
        with self._disk:
            with self._doing_feature(copy, self.steps):
                self.copy = self.base = self.path("copy")
                if "copy" not in prepared:
                    shutil.rmtree(self.copy, ignore_errors=True)
                    with self.step("hardlinked copy of the repository"):
                        self._copy_source()
                    prepared.append("copy")
                    self._save_state()
                # Hidden changesets are neither pulled nor cloned: the
                # features count the visible ones.
                self.info["changesets"] = self._visible_changesets(self.copy)
                self.base_changesets = self.info["changesets"]
                size = self._slice_changesets(self.info)
                if self.quick and size < self.info["changesets"]:
                    self.base = self.path("slice")
                    if "slice" not in prepared:
                        shutil.rmtree(self.base, ignore_errors=True)
                        with self.step("write the newest %d changesets"
                                       % size):
                            sample.build_slice(self, size, self.base)
                        prepared.append("slice")
                        self._save_state()
                    self.base_changesets = self._visible_changesets(
                        self.base)
            todo = dict((name, function) for name, function
                        in self._features() if name not in done)
            while todo:
                name = next(iter(todo))
                function = todo.pop(name)
                beside = BESIDE.get(name)
                if beside in todo:
                    self._side_by_side((name, function),
                                       (beside, todo.pop(beside)))
                else:
                    self._run_feature(name, function)
        # in the order of an uninterrupted run, whichever ended first
        order = ["copy"] + [name for name, _ in self._features()]
        self.steps.sort(key=lambda s: order.index(s["feature"]))

    def _visible_changesets(self, repo):
        return int(self.hg(["log", "-R", repo, "-r", "tip", "-T",
                            "{revset('all()')|count}"], self.hg_env()))

    def _side_by_side(self, first, second):
        """Run two features at once, ``second`` in a thread of its own."""
        raised = []

        def beside():
            try:
                self._run_feature(*second)
            except BaseException as exc:  # handed to this thread
                raised.append(exc)
        thread = threading.Thread(target=beside, daemon=True)
        thread.start()
        try:
            self._run_feature(*first)
        except BaseException:
            # Interrupted: the other stops too, before the scratch
            # directory is removed under the command it runs.
            self._stopping = True
            raise
        finally:
            thread.join()
        if raised and not self._stopping:
            raise raised[0]

    def _copy_source(self):
        """The copy, without a lock on the original; a repository that
        keeps being written while it is copied is cloned by pull instead,
        which reads it without a lock too, only slower."""
        for _ in range(COPY_ATTEMPTS):
            if copy_repository(self.source, self.copy):
                return
            time.sleep(1)
        self.console.say("(%s was written to while it was copied; cloning "
                         "it by pull)" % self.source)
        self.hg(["clone", "-q", "-U", "--pull", self.source, self.copy],
                self.hg_env())

    def _run_feature(self, name, function):
        feature = {"name": name, "status": "passed", "error": None,
                   "comparisons": [], "facts": {}}
        steps = []
        workdir = self.path(name.replace(" ", "-"))
        # what a killed run left of this feature
        shutil.rmtree(workdir, ignore_errors=True)
        os.mkdir(workdir)
        start = time.perf_counter()
        try:
            with self._doing_feature(feature, steps):
                reason = function(self, workdir)
            if reason:
                feature["status"] = "skipped"
                feature["error"] = reason
        except Failed as failure:
            feature["status"] = "failed"
            feature["error"] = str(failure)
        except tools.CommandError as err:
            feature["status"] = "failed"
            feature["error"] = command_failure(err)
        except Exception as exc:
            # A bug or a surprise in one feature must not cost the report
            # of the others.
            feature["status"] = "failed"
            feature["error"] = "%s: %s" % (type(exc).__name__, exc)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            feature["seconds"] = round(time.perf_counter() - start, 1)
        # Only a feature that ran to its end is in the report (and in the
        # state a resumed run starts from), with its steps.
        order = [name for name, _ in self._features()]
        with self._state_lock:
            self.features.append(feature)
            self.features.sort(key=lambda f: order.index(f["name"]))
            self.steps += steps
            self._save_state()
        self.console.say(format_feature(feature))


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
    if "sample" in report:
        lines += ["", "sample: the newest %d changesets (tip %s); replay "
                  "with --quick --slice %d" % (
                      report["sample"]["slice_changesets"],
                      report["tip"][:12],
                      report["sample"]["slice_changesets"])]
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
        "%s estimated (%.2fx)" % (
            pooling.format_bytes(scratch["peak_used_bytes"]),
            scratch["peak_reached_in"],
            pooling.format_bytes(scratch["estimated_bytes"]),
            scratch["actual_vs_estimate"]),
        "time: %.1f s against %.1f s estimated (%.2fx)" % (
            report["seconds"], report["estimate"]["seconds"],
            report["estimate"]["actual_vs_estimate"] or 0),
        "original repository unchanged: %s%s" % (
            "yes" if report["original_unchanged"] else
            "NO: " + ", ".join(report["original_changed_files"]),
            " (hg rewrote its caches meanwhile: %s)"
            % ", ".join(report["original_caches_rewritten"])
            if report["original_caches_rewritten"] else ""),
        "total: %.1f s for %d changesets (%.2f min per 10k changesets): %s"
        % (report["seconds"], report["changesets"],
           report["minutes_per_10k_changesets"],
           "PASSED" if report["passed"] else "FAILED"),
    ]
    return "\n".join(lines)


def check_output(path):
    """Refuse, before any work, a ``--json`` path the report could not be
    written to at the end: its directory must exist and be writable, and
    it must not be a directory."""
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise Abort("cannot write the report to %s: no directory %s"
                    % (path, directory), hint="give --json a file in a "
                    "directory that exists")
    if os.path.isdir(path):
        raise Abort("cannot write the report to %s: it is a directory"
                    % path, hint="give --json a file name")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Abort("cannot write the report to %s: %s is not writable"
                    % (path, directory), hint="give --json a file in a "
                    "directory you can write to")


def report_run(check, json_path=None):
    """Run ``check``, print its report and write it as JSON to
    ``json_path`` (by write-then-rename); the exit status: 0 when every
    feature passed, 1 when one failed, 255 when the check could not start
    or its report could not be written, 130 after Ctrl-C and 143 after
    SIGTERM."""
    try:
        check_output(json_path)
        report = check.run()
    except Abort as abort:
        return print_abort(abort)
    except KeyboardInterrupt as interrupt:
        sys.stderr.write("\ninterrupted%s\n" % (
            "" if check.scratch is None else ": %s %s" % (
                check.scratch, "kept (continue with --resume %s)"
                % check.resume if check.resume else "kept" if check.keep
                else "removed")))
        return 128 + (signal.SIGTERM if isinstance(interrupt, _Terminated)
                      else signal.SIGINT)
    check.console.say(format_report(report))
    if json_path:
        try:
            _write_replacing(json_path, json.dumps(report, indent=2))
        except OSError as err:
            return print_abort(Abort("cannot write the report to %s: %s"
                                     % (json_path, err.strerror or err)))
    return 0 if report["passed"] else 1


def main(args):
    """``vcsperf check`` with its parsed command line."""
    return report_run(Check(args.repo, git=args.git, quick=args.quick,
                            scratch=args.scratch, reserve=args.reserve,
                            keep=args.keep, resume=args.resume,
                            slice_size=args.slice), args.json)
