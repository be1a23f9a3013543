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

Each feature is a row of ``features.FEATURES`` and a function ``(check,
work)`` in a module named after it (``dictionaries``, ``wire``,
``bundles``, ``checkouts``, ``commitid``, ``importer``) that returns None
when it passed, a reason when it skipped, and raises ``outcome.Failed``
when it failed; this module runs them, one at a time but for a feature
and the one its row runs ``beside``, which run side by side on the two
cores while neither runs a timed step (a step whose time a comparison
uses has the machine to itself).  The rest of the run has modules of its
own: ``console`` (what it shows), ``copying`` (the original, only read),
``resources`` (disk, memory, cores), ``estimates``, ``resume`` and
``report``.

The report gives, per feature, passed or failed with the reason, and the
figures as ratios; then the wall time of every step, the peak memory and
the disk the run took.  The time and the free disk the run needs are
estimated before anything starts (``estimates``; the disk is checked),
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
anything runs and written by write-then-rename; so is ``--html FILE``,
the report as a page of plots (``page``).

The features work on the visible changesets (hidden ones are neither
pulled nor cloned; the dictionaries compare the copy with its converted
copy, hidden changesets and all), leave out changesets with
subrepositories where they would check them out or rebase them, take
file names as hg stores them (any byte), and read only regular files.
``vcsperf demo`` runs the same checks on the repository it builds.
"""

import contextlib
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from vcsperf.check import (
    copying,
    estimates,
    features,
    page,
    report,
    sample,
)
from vcsperf.check.console import Console, duration
from vcsperf.check.outcome import Failed, command_failure
from vcsperf.check.resources import DiskWatch, Machine, peak_child_rss
from vcsperf.check.resume import RunDirectory, write_replacing
from vcsperf.core import pooling
from vcsperf.core.errors import Abort, print_abort
from vcsperf.harness import tools

#: The steps of the run outside its features, in its ``copy`` part: what
#: it learns of the repository before it estimates anything (its files'
#: fingerprint, the survey), and the fingerprint taken again at the end.
SURVEY_STEP = "survey the repository, fingerprint its files"
FINGERPRINT_STEP = "fingerprint the original's files again"


class _Doing:
    """What a thread of the run does: the feature (the dict the report
    gets), its step's label, and its steps so far."""

    def __init__(self, feature, steps):
        self.feature = feature
        self.step = None
        self.steps = steps


class _Stopped(KeyboardInterrupt):
    """Raised in a feature running beside one that was interrupted."""


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: clean up, then stop."""


def _terminate(signum, frame):
    raise _Terminated()


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
        self._run_dir = RunDirectory(self.resume) if resume else None
        self.slice_size = slice_size
        self.scratch = None
        #: The repository the features work on: the copy, or with
        #: ``quick`` the slice of its newest changesets; and its length.
        self.base = self.copy = None
        self.base_changesets = None
        self.steps = []
        self.features = []
        #: {thread ident: _Doing} of the features running
        self._running = {}
        self._machine = Machine()
        self._state_lock = threading.Lock()
        #: set when the run is interrupted while a feature runs beside:
        #: that one stops before its next command
        self._stopping = False
        #: the scratch disk taken, and the step that reached the largest
        #: process's peak memory, with that peak
        self.disk = None
        self.peak_step = None
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
        if not copying.copy_repository(self.base, dest):
            raise Failed("%s was written to while it was copied" % self.base)

    def path(self, *names):
        return os.path.join(self.scratch, *names)

    def checkouts_count(self):
        """Revisions the checkouts features check out."""
        return 2 if self.quick else 4

    def _features(self):
        """The features this run runs, in their order."""
        return [feature for feature in features.FEATURES
                if self.git or not feature.git]

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
                                    "seconds": round(seconds, 3),
                                    "largest_process_bytes_so_far":
                                    self._after_step(title)})
                doing.step = None

    def _doing(self):
        """The _Doing of the feature this thread runs."""
        return self._running[threading.get_ident()]

    def _after_step(self, title):
        """Sample the disk and the memory after a step; the largest
        resident memory of any process the run started, so far (the
        kernel keeps the high-water mark of the processes waited for, not
        one per step)."""
        self.disk.sample()
        peak = peak_child_rss()
        if self.peak_step is None or peak > self.peak_step[1]:
            self.peak_step = (title, peak)
        return peak

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

    def fact_of(self, name):
        """The fact ``name`` of a feature that ran before (None if none
        got that far): a resumed run has it too."""
        return next((f["facts"][name] for f in self.features
                     if name in f["facts"]), None)

    # -- the state of the run ---------------------------------------------

    def _options(self):
        return {"source": self.source, "git": self.git,
                "quick": self.quick, "slice_size": self.slice_size}

    def _resumed_state(self):
        """The state of the run under ``--resume`` to continue, or None."""
        self._run_dir.open()
        state = self._run_dir.load(self._options())
        if state is None:
            return None
        if estimates.tip_node(self.source) != state["info"]["tip"]:
            raise Abort("%s has new changesets since the run in %s "
                        "started" % (self.source, self.resume),
                        hint="remove %s to start again"
                        % self._run_dir.path)
        self.console.say("resuming the run in %s: %d of %d features "
                         "done" % (self.resume, len(state["features"]),
                                   len(self._features())))
        return state

    def _new_state(self):
        """The state of a new run, with the free disk checked."""
        start = time.perf_counter()
        before = copying.fingerprint(self.source)
        fingerprint_seconds = time.perf_counter() - start
        info = estimates.survey(self.source, self.git, self.quick,
                                self.slice_size)
        survey_seconds = time.perf_counter() - start
        try:
            os.makedirs(self.scratch_root, exist_ok=True)
        except OSError as err:
            raise Abort("cannot make %s: %s" % (self.scratch_root,
                                                err.strerror),
                        hint="give --scratch a directory you can write to")
        disk = estimates.disk(
            self._features(), info, self.quick, self.slice_size,
            self.checkouts_count(), os.stat(self.source).st_dev
            == os.stat(self.scratch_root).st_dev, self.git)
        need = estimates.disk_needed(disk, self._features())
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
        busy, share = estimates.busy_factor()
        seconds = estimates.seconds(self._features(), info, self.quick,
                                    self.slice_size, busy)
        # What the run has taken before its estimate, and the original's
        # files read again at its end, as long as they took now: at
        # 400,000 files, a minute or two that no rate of a feature has.
        seconds["copy"] = round(seconds["copy"] + survey_seconds
                                + fingerprint_seconds, 1)
        return {
            "options": self._options(), "fingerprint": before, "info": info,
            "sliced": estimates.sliced(info, self.quick, self.slice_size),
            "started": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"),
            "free": free, "estimate": {"disk": disk, "disk_needed": need,
                                       "seconds": seconds, "busy": {
                                           "factor": round(busy, 2),
                                           "share": share}},
            "prepared": [], "features": [], "steps": [
                {"feature": "copy", "step": SURVEY_STEP,
                 "seconds": round(survey_seconds, 3),
                 "largest_process_bytes_so_far": peak_child_rss()}],
            "disk": None,
            "memory": None, "seconds": 0.0}

    def _save_state(self):
        if not self.resume:
            return
        self._run_dir.save(dict(
            self.state, features=self.features, steps=self.steps,
            disk={"peak": self.disk.peak, "peak_where": self.disk.peak_where,
                  "peaks": self.disk.peaks},
            memory=self.peak_step, seconds=self._seconds()))

    def _seconds(self):
        """Seconds the run has taken, before it was resumed too."""
        return self.state["seconds"] + time.perf_counter() - self._started

    def _remove_scratch(self):
        """Remove what the run made: its scratch directory, or under
        ``--resume DIR`` what ``RunDirectory.remove`` does."""
        if self.resume:
            self._run_dir.remove()
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # -- the whole run ----------------------------------------------------

    def run(self):
        """Check every feature; returns the report (a dict)."""
        copying.refuse_places(self.source, self.git, self.resume,
                              self.scratch_root)
        try:
            return self._run()
        finally:
            if self.resume and self._run_dir.lock is not None:
                # A run stopped before its first state has nothing to
                # resume: what it made goes.
                if not self.keep and not os.path.exists(
                        self._run_dir.state_path):
                    self._remove_scratch()
                self._run_dir.close()

    def _run(self):
        self._started = time.perf_counter()
        self.state = state = (self.resume and self._resumed_state()) \
            or self._new_state()
        self.info = state["info"]
        before = {name: tuple(p) for name, p in state["fingerprint"].items()}
        self.scratch = self._make_scratch()
        self.features = state["features"]
        self.steps = state["steps"]
        self.peak_step = state["memory"]
        self.disk = self._disk_watch(before)
        # Features side by side are counted one after the other: on this
        # machine, shared with other jobs, the pair took about 94% of that.
        total = sum(state["estimate"]["seconds"].values())
        self.console.expected_end = time.monotonic() + max(
            0, total - state["seconds"])
        previous = signal.signal(signal.SIGTERM, _terminate)
        completed = False
        try:
            self._announce(total)
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
        start = time.perf_counter()
        changed, caches = copying.original_changes(
            before, copying.fingerprint(self.source))
        self.steps.append({"feature": "copy", "step": FINGERPRINT_STEP,
                           "seconds": round(time.perf_counter() - start, 3),
                           "largest_process_bytes_so_far": peak_child_rss()})
        self._sort_steps()
        return report.build(self, changed, caches, self._seconds())

    def _make_scratch(self):
        if self.resume:
            return self._run_dir.path
        try:
            return tempfile.mkdtemp(prefix="vcsperf-check-",
                                    dir=self.scratch_root)
        except OSError as err:
            raise Abort("cannot write in %s: %s" % (self.scratch_root,
                                                    err.strerror),
                        hint="give --scratch a directory you can write to")

    def _disk_watch(self, before):
        """The DiskWatch of the scratch directory, with what a resumed run
        had measured."""
        # A hardlink to a file of the original costs no disk.
        disk = DiskWatch(self.scratch,
                         {(p[1], p[2]) for p in before.values()},
                         self._where)
        measured = self.state["disk"]
        if measured:
            disk.peak = measured["peak"]
            if measured["peak_where"]:
                disk.peak_where = tuple(measured["peak_where"])
            disk.peaks = measured["peaks"]
        return disk

    def _announce(self, total):
        info = self.info
        self.console.say("vcsperf check of %s: %d changesets, store %s "
                         "(%s), hg %s%s" % (
                             self.source, info["changesets"],
                             pooling.format_bytes(info["store_bytes"]),
                             info["engine"], info["hg_version"],
                             ", quick" if self.quick else ""))
        self.console.say("estimate: %s and %s of scratch disk (%s free) "
                         "in %s" % (
                             duration(total), pooling.format_bytes(
                                 self.state["estimate"]["disk_needed"]),
                             pooling.format_bytes(self.state["free"]),
                             self.scratch))
        # (a run begun by an older release, resumed, has no share)
        busy = self.state["estimate"].get("busy") or {}
        if busy.get("share") and busy["factor"] >= 1.05:
            self.console.say("(other processes leave this run %d%% of a "
                             "core: the estimate is %.2f times an idle "
                             "machine's)" % (round(busy["share"] * 100),
                                             busy["factor"]))

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
        with self.disk:
            self._prepare()
            todo = {feature.name: feature for feature in self._features()
                    if feature.name not in done}
            while todo:
                feature = todo.pop(next(iter(todo)))
                if feature.beside in todo:
                    self._side_by_side(feature, todo.pop(feature.beside))
                else:
                    self._run_feature(feature)
        self._sort_steps()

    def _sort_steps(self):
        """The steps in the order of an uninterrupted run, whichever
        ended first."""
        order = ["copy"] + [feature.name for feature in self._features()]
        self.steps.sort(key=lambda s: order.index(s["feature"]))

    def _prepare(self):
        """The copy, and with ``--quick`` the slice, unless a resumed run
        has them."""
        prepared = self.state["prepared"]
        copy = {"name": "copy", "status": "passed", "comparisons": [],
                "facts": {}}
        with self._doing_feature(copy, self.steps):
            self.copy = self.base = self.path("copy")
            size = estimates.slice_changesets(self.info, self.slice_size)
            sliced = self.state.get("sliced")
            if sliced is None:  # the state of an older release
                sliced = self.quick and size < self.info["changesets"]
            if "copy" not in prepared:
                shutil.rmtree(self.copy, ignore_errors=True)
                with self.step("hardlinked copy of the repository" + (
                        ", the slice's files" if sliced else "")):
                    self._copy_source(size if sliced else None)
                prepared.append("copy")
                self._save_state()
            # Hidden changesets are neither pulled nor cloned: the
            # features count the visible ones.
            self.info["changesets"] = self._visible_changesets(self.copy)
            self.base_changesets = self.info["changesets"]
            if sliced:
                self.base = self.path("slice")
                if "slice" not in prepared:
                    shutil.rmtree(self.base, ignore_errors=True)
                    with self.step("write the newest %d changesets" % size):
                        sample.build_slice(self, size, self.base)
                    prepared.append("slice")
                    self._save_state()
                self.base_changesets = self._visible_changesets(self.base)

    def _visible_changesets(self, repo):
        return estimates.visible_changesets(repo)

    def _side_by_side(self, first, second):
        """Run two features at once, ``second`` in a thread of its own."""
        raised = []

        def beside():
            try:
                self._run_feature(second)
            except BaseException as exc:  # handed to this thread
                raised.append(exc)
        thread = threading.Thread(target=beside, daemon=True)
        thread.start()
        try:
            self._run_feature(first)
        except BaseException:
            # Interrupted: the other stops too, before the scratch
            # directory is removed under the command it runs.
            self._stopping = True
            raise
        finally:
            thread.join()
        if raised and not self._stopping:
            raise raised[0]

    def _copy_source(self, slice_size):
        """The copy, without a lock on the original; a repository that
        keeps being written while it is copied is cloned by pull instead,
        which reads it without a lock too, only slower, through a view
        that takes what hg writes where it pulls from
        (``copying.read_only_view``).  With ``slice_size``, the changesets
        of the slice the features work on, only the filelogs of the
        slice's files are linked."""
        filelogs = None
        if slice_size is not None:
            def filelogs(copy):
                return sample.narrow_filelogs(self, slice_size, copy)
        for _ in range(copying.COPY_ATTEMPTS):
            if copying.copy_repository(self.source, self.copy, filelogs):
                return
            time.sleep(1)
        self.console.say("(%s was written to while it was copied; cloning "
                         "it by pull)" % self.source)
        view = self.path("original-view")
        # what a killed run left (a symbolic link is removed, not followed)
        shutil.rmtree(view, ignore_errors=True)
        copying.read_only_view(self.source, view)
        try:
            self.hg(["clone", "-q", "-U", "--pull", view, self.copy],
                    self.hg_env())
        finally:
            shutil.rmtree(view)
        # as a linked copy: no hgrc (this one names the view)
        os.unlink(os.path.join(self.copy, ".hg", "hgrc"))
        if filelogs:
            filelogs(self.copy)

    def _run_feature(self, feature):
        result = {"name": feature.name, "status": "passed", "error": None,
                  "comparisons": [], "facts": {}}
        steps = []
        workdir = self.path(feature.directory)
        # what a killed run left of this feature
        shutil.rmtree(workdir, ignore_errors=True)
        os.mkdir(workdir)
        start = time.perf_counter()
        try:
            with self._doing_feature(result, steps):
                reason = feature.function(self, workdir)
            if reason:
                result["status"] = "skipped"
                result["error"] = reason
        except Failed as failure:
            result["status"] = "failed"
            result["error"] = str(failure)
        except tools.CommandError as err:
            result["status"] = "failed"
            result["error"] = command_failure(err)
        except Exception as exc:
            # A bug or a surprise in one feature must not cost the report
            # of the others.
            result["status"] = "failed"
            result["error"] = "%s: %s" % (type(exc).__name__, exc)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            result["seconds"] = round(time.perf_counter() - start, 1)
        self._completed(result, steps)

    def _completed(self, result, steps):
        """Only a feature that ran to its end is in the report (and in the
        state a resumed run starts from), with its steps."""
        order = [feature.name for feature in self._features()]
        with self._state_lock:
            self.features.append(result)
            self.features.sort(key=lambda f: order.index(f["name"]))
            self.steps += steps
            self._save_state()
        self.console.say(report.format_feature(result))


def report_run(check, json_path=None, html_path=None):
    """Run ``check``, print its report and write it as JSON to
    ``json_path`` and as a page to ``html_path`` (``page``; each by
    write-then-rename); the exit status: 0 when every feature passed, 1
    when one failed, 255 when the check could not start or its report
    could not be written, 130 after Ctrl-C and 143 after SIGTERM."""
    try:
        report.check_output(json_path)
        page.check_output(html_path)
        result = check.run()
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
    check.console.say(report.format_report(result))
    if json_path:
        try:
            write_replacing(json_path, json.dumps(result, indent=2))
        except OSError as err:
            return print_abort(Abort("cannot write the report to %s: %s"
                                     % (json_path, err.strerror or err)))
    if html_path:
        try:
            page.write_from_report(result, html_path)
        except Abort as abort:
            return print_abort(abort)
        check.console.say("report page: %s" % os.path.abspath(html_path))
    return 0 if result["passed"] else 1


def main(args):
    """``vcsperf check`` with its parsed command line."""
    return report_run(Check(args.repo, git=args.git, quick=args.quick,
                            scratch=args.scratch, reserve=args.reserve,
                            keep=args.keep, resume=args.resume,
                            slice_size=args.slice), args.json,
                      args.html)
