"""``vcsperf check`` on the real-content repository: a quick run where
every feature passes, damage in the copy and in the original reported as
failures, Ctrl-C and SIGTERM leaving nothing behind, and the disk check."""

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import campaign
from vcsperf.check import (
    copying,
    features as check_features,
    resources,
    runner,
)
from vcsperf.check.resume import RUN_DIR, STATE_FILE
from vcsperf.harness import tools

FEATURES = ["dictionaries", "wire", "bundles", "checkouts", "commit IDs",
            "importer"]


def _digest_tree(root):
    """sha256 of every file's path and content under ``root``."""
    digest = hashlib.sha256()
    for top, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            digest.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as fh:
                digest.update(hashlib.sha256(fh.read()).digest())
    return digest.hexdigest()


def _vcsperf_check(env, *args):
    return subprocess.run([tools.executable("vcsperf"), "check",
                           *map(str, args)], env=env, capture_output=True,
                          text=True)


def _by_name(report):
    return {feature["name"]: feature for feature in report["features"]}


def _ratio(feature, what, core_label=None):
    for c in feature["comparisons"]:
        if c["what"] == what and core_label in (None, c["core_label"]):
            return c["ratio"]
    raise AssertionError("no %r in %r" % (what, feature["comparisons"]))


@pytest.mark.slow
# two runs, the first killed early: allow for a busy machine
@pytest.mark.timeout(1200)
def test_quick_check_on_real_history(env, real_hg_repo, real_git_repo,
                                     tmp_path):
    """A quick run on a slice of the history, as on a long one; killed
    (SIGKILL) once its first feature is done, and resumed."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    resume = scratch / "run"
    report_path = tmp_path / "report.json"
    # Without its caches, which a reader of the original may write (hg
    # 6.9 and 7.2 write the tags cache resolving ``tip`` in a revset).
    shutil.rmtree(real_hg_repo / ".hg" / "cache")
    before = _digest_tree(real_hg_repo / ".hg")
    times = _directory_times(real_hg_repo / ".hg")
    args = ["check", "--repo", real_hg_repo, "--git", real_git_repo,
            "--quick", "--slice", 20, "--resume", resume, "--json",
            report_path]
    killed = subprocess.Popen([tools.executable("vcsperf"), *map(str, args)],
                              env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              start_new_session=True)
    state = resume / RUN_DIR / STATE_FILE
    try:
        deadline = time.monotonic() + 300
        while not (state.exists() and json.loads(state.read_text())[
                "state"]["features"]):
            assert killed.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    done = [f["name"] for f in json.loads(state.read_text())["state"][
        "features"]]
    # the first two run side by side
    assert done[0] in ("dictionaries", "commit IDs")
    assert not report_path.exists()
    proc = _vcsperf_check(env, *args[1:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming the run in %s: %d of 7 features done" % (
        resume, len(done)) in proc.stdout
    report = json.loads(report_path.read_text())
    features = _by_name(report)
    assert list(features) == FEATURES + ["git checkouts"]
    assert all(f["status"] == "passed" for f in features.values()), features
    assert report["passed"] and report["original_unchanged"]
    # Each step once: none of the killed run's unfinished feature.
    steps = [(s["feature"], s["step"]) for s in report["steps"]]
    assert len(steps) == len(set(steps))
    assert [name for name, _ in steps if name != "copy"] == sorted(
        (name for name, _ in steps if name != "copy"),
        key=(FEATURES + ["git checkouts"]).index)
    assert report["sample"]["slice_changesets"] == 20
    assert report["sample"]["tip"] == report["tip"]
    assert report["estimate"]["seconds"] > 0
    assert set(report["estimate"]["actual_seconds_by_part"]) == {
        "copy", *features}
    busy = report["estimate"]["busy"]
    assert 0.05 <= busy["share"] <= 1 and busy["factor"] == pytest.approx(
        1 / busy["share"], abs=0.01)
    assert _digest_tree(real_hg_repo / ".hg") == before
    # no lock taken on it either (one leaves no file, only a time)
    assert _directory_times(real_hg_repo / ".hg") == times
    assert os.listdir(scratch) == []
    # The figures are real measurements beside core's.
    dicts = features["dictionaries"]
    assert _ratio(dicts, "store bytes, changelog") < 0.8
    assert dicts["facts"]["revisions compared"] >= 57
    assert _ratio(features["bundles"], "bundle bytes, zstd-max",
                  "core gzip-v2") < 0.6
    assert features["bundles"]["facts"]["clones verified"] == 3
    assert _ratio(features["wire"], "pull of last 100, bytes received") < 1
    assert _ratio(features["checkouts"], "each later checkout, seconds") < 1
    assert _ratio(features["commit IDs"], "changesets mapped") == 1.0
    assert features["commit IDs"]["facts"]["folded"] >= 3
    assert features["importer"]["facts"]["python files"] > 100
    assert _ratio(features["git checkouts"], "disk for 2 checkouts") < 1
    # Every step is timed; memory and disk are measured.
    steps = {(s["feature"], s["step"]) for s in report["steps"]}
    assert ("dictionaries", "train dictionaries") in steps
    assert all(s["seconds"] >= 0 for s in report["steps"])
    assert report["peak_memory"]["largest_process_bytes"] > 10 * 2**20
    scratch = report["scratch"]
    # The scratch directory's own disk, which other processes do not
    # change: within 1.25 times the estimate either way, without the
    # margin, each feature's (with the one beside it) too.
    assert 0 < scratch["peak_used_bytes"] <= 1.25 * scratch[
        "estimated_bytes"] < scratch["needed_bytes"]
    assert set(scratch["peak_used_bytes_by_feature"]) == set(
        scratch["estimated_bytes_by_feature"]) == {"copy", *features}
    for name, peak in scratch["peak_used_bytes_by_feature"].items():
        assert peak <= 1.25 * scratch["estimated_bytes_by_feature"][name], \
            name
    # The human report says the same.
    assert "original repository unchanged: yes" in proc.stdout
    assert "PASSED" in proc.stdout.splitlines()[-1]
    for name in FEATURES:
        assert any(line.startswith(name) and "passed" in line
                   for line in proc.stdout.splitlines()), name


@pytest.mark.slow
def test_damage_in_the_copy_fails_the_feature(env, real_hg_repo, tmp_path,
                                              monkeypatch):
    """A revlog of the converted copy corrupted on disk: the feature
    fails, the next goes on (the importer; the others, which the quick
    run's test runs, are skipped here to save their minutes), the original
    is untouched."""
    _replace_features(monkeypatch, dict.fromkeys(
        ("wire", "bundles", "checkouts", "commit IDs"),
        lambda check, work: "skipped"))
    run_hg = runner.Check.hg
    damaged = []

    def hg_then_damage(self, args, env, cwd=None, **options):
        out = run_hg(self, args, env, cwd=cwd, **options)
        if "debugupgraderepo" in args:
            data = os.path.join(cwd, ".hg", "store", "data")
            victim = max((os.path.join(top, name) for top, _, names
                          in os.walk(data) for name in names),
                         key=os.path.getsize)
            with open(victim, "r+b") as fh:
                fh.seek(os.path.getsize(victim) // 2)
                fh.write(b"\xde\xad\xbe\xef" * 16)
            damaged.append(victim)
        return out

    monkeypatch.setattr(runner.Check, "hg", hg_then_damage)
    before = _digest_tree(real_hg_repo / ".hg")
    scratch = tmp_path / "scratch"
    report = runner.Check(str(real_hg_repo), quick=True,
                         scratch=str(scratch)).run()
    features = _by_name(report)
    assert damaged
    assert features["dictionaries"]["status"] == "failed"
    assert "differently" in features["dictionaries"]["error"] or \
        "verify" in features["dictionaries"]["error"]
    assert features["importer"]["status"] == "passed", features
    assert not report["passed"] and report["original_unchanged"]
    assert _digest_tree(real_hg_repo / ".hg") == before
    assert os.listdir(scratch) == []


@pytest.mark.slow
def test_damaged_original_is_reported_not_touched(env, real_hg_repo,
                                                  tmp_path):
    data = real_hg_repo / ".hg" / "store" / "data"
    # The data file of the largest revlog: its revisions' chunks, not the
    # index, so that hg still opens the repository.
    victim = max((os.path.join(top, name) for top, _, names in os.walk(data)
                  for name in names if name.endswith(".d")),
                 key=os.path.getsize)
    # A clone hardlinks: give the victim its own inode before damaging it.
    content = bytearray(open(victim, "rb").read())
    content[len(content) // 2:len(content) // 2 + 64] = b"\xff" * 64
    os.unlink(victim)
    with open(victim, "wb") as fh:
        fh.write(content)
    before = _digest_tree(real_hg_repo / ".hg")
    scratch = tmp_path / "scratch"
    report_path = tmp_path / "report.json"
    proc = _vcsperf_check(env, "--repo", real_hg_repo, "--quick",
                          "--scratch", scratch, "--json", report_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(report_path.read_text())
    features = _by_name(report)
    assert list(features) == FEATURES
    assert features["dictionaries"]["status"] == "failed"
    assert "FAILED" in proc.stdout.splitlines()[-1]
    assert report["original_unchanged"]
    assert _digest_tree(real_hg_repo / ".hg") == before
    assert os.listdir(scratch) == []


def _replace_features(monkeypatch, functions):
    """The features named in ``functions`` ({name: function(check,
    work)}) run those functions instead."""
    monkeypatch.setattr(check_features, "FEATURES", tuple(
        dataclasses.replace(f, function=functions.get(f.name, f.function))
        for f in check_features.FEATURES))


def _only_the_copy(monkeypatch, feature=None):
    """Every feature skipped (or running ``feature``): the run makes the
    copy, fingerprints the original and reports, in seconds."""
    _replace_features(monkeypatch, dict.fromkeys(FEATURES, feature or (
        lambda check, work: "not in this test")))


def _directory_times(root):
    return {top: os.stat(top).st_mtime_ns for top, _, _ in os.walk(root)}


def test_copy_leaves_the_original_untouched(hg, real_hg_repo, tmp_path,
                                            monkeypatch):
    """issue 18: the copy was an ``hg clone``, which takes the original's
    store lock: .hg/store changed (a lock created and removed).  The copy
    takes no lock, and is a whole repository."""
    _only_the_copy(monkeypatch)
    times = _directory_times(real_hg_repo / ".hg")
    before = _digest_tree(real_hg_repo / ".hg")
    scratch = tmp_path / "scratch"
    report = runner.Check(str(real_hg_repo), quick=True, scratch=str(scratch),
                         keep=True).run()
    assert _directory_times(real_hg_repo / ".hg") == times
    assert _digest_tree(real_hg_repo / ".hg") == before
    assert report["original_unchanged"], report["original_changed_files"]
    copy = os.path.join(report["scratch"]["path"], "copy")
    hg("verify", "-q", cwd=copy)
    assert hg("log", "-T", "{node}\n", cwd=copy) == hg(
        "log", "-T", "{node}\n", cwd=real_hg_repo)
    # the copy's files are the original's (hardlinks), not copies of them
    index = os.path.join(".hg", "store", "00changelog.i")
    assert os.stat(os.path.join(copy, index)).st_ino == os.stat(
        real_hg_repo / index).st_ino


@pytest.mark.parametrize("write", [False, True])
def test_only_writes_to_the_original_count(real_hg_repo, tmp_path,
                                           monkeypatch, write):
    """Another hg cloning the original takes its store lock and releases
    it, which leaves no file; another reading it rewrites its caches: the
    original is unchanged (the caches named apart).  A file of its history
    written (even to the same bytes, by write-then-rename) is a change."""
    dot_hg = real_hg_repo / ".hg"
    touched = []

    def rewrite(path, data):
        # by rename, as hg writes: the clone's files are hardlinks to the
        # fixture's cache, which an in-place write would change
        path.parent.mkdir(exist_ok=True)
        (path.parent / "tmp").write_bytes(data)
        os.replace(path.parent / "tmp", path)

    def touch_the_original(check, work):
        if touched:
            return
        touched.append(work)
        os.symlink("elsewhere:1", dot_hg / "store" / "lock")
        os.unlink(dot_hg / "store" / "lock")
        rewrite(dot_hg / "cache" / "branch2-served", b"rewritten\n")
        if write:
            changelog = dot_hg / "store" / "00changelog.i"
            rewrite(changelog, changelog.read_bytes())

    _only_the_copy(monkeypatch, touch_the_original)
    report = runner.Check(str(real_hg_repo), quick=True,
                         scratch=str(tmp_path / "scratch")).run()
    assert report["original_caches_rewritten"] == [
        os.path.join("cache", "branch2-served")]
    assert report["original_unchanged"] is not write
    assert report["passed"] is not write
    assert report["original_changed_files"] == (
        [os.path.join("store", "00changelog.i")] if write else [])


def test_copy_refuses_a_store_being_written(hg, hgrepo, tmp_path):
    """A journal in the store: a transaction is under way, so the copy is
    refused (the run then clones by pull); a lock alone (another hg
    cloning it holds one for minutes at scale) is no write, and the copy
    is made; a share is copied from the store it shares."""
    (hgrepo / "a").write_text("a\n")
    hg("commit", "-q", "-A", "-m", "a", cwd=hgrepo)
    hg("--config", "extensions.share=", "share", "-q", "-U", hgrepo,
       tmp_path / "share")
    store = hgrepo / ".hg" / "store"
    os.symlink("elsewhere:1", store / "journal")
    assert not copying.copy_repository(str(tmp_path / "share"),
                                      str(tmp_path / "copy"))
    assert not (tmp_path / "copy").exists()
    os.unlink(store / "journal")
    os.symlink("elsewhere:1", store / "lock")
    assert copying.copy_repository(str(tmp_path / "share"),
                                  str(tmp_path / "copy"))
    assert not (tmp_path / "copy" / ".hg" / "store" / "lock").exists()
    os.unlink(store / "lock")
    hg("verify", "-q", cwd=tmp_path / "copy")
    shutil.rmtree(tmp_path / "copy")
    assert copying.copy_repository(str(tmp_path / "share"),
                                  str(tmp_path / "copy"))
    hg("verify", "-q", cwd=tmp_path / "copy")
    assert "shared" not in (tmp_path / "copy/.hg/requires").read_text()


def test_a_pull_of_an_original_being_written_writes_nothing_there(
        hg, hgrepo, tmp_path, monkeypatch):
    """The copy refused (a transaction under way), the run clones the
    original by pull, which could write there: the caches hg may write
    in a local repository it pulls from (hg 6.9), and what the
    original's hgrc enables (an outgoing hook, here).  It pulls through a
    view now: the original's .hg is as it was, without its caches to
    start with; the copy is its history, with no hgrc, and the view is
    gone."""
    _only_the_copy(monkeypatch)
    monkeypatch.setattr(copying, "COPY_ATTEMPTS", 1)
    # history with a named branch and a tag, for the caches of both
    for number, branch in enumerate(["default", "default", "stable"]):
        (hgrepo / "f").write_text("%d\n" % number)
        hg("branch", "-q", "-f", branch, cwd=hgrepo)
        hg("commit", "-q", "-A", "-m", "c%d" % number, cwd=hgrepo)
    hg("tag", "-q", "-r", "1", "v1", cwd=hgrepo)
    dot_hg = hgrepo / ".hg"
    with open(dot_hg / "hgrc", "a") as fh:
        fh.write("[hooks]\npreoutgoing = touch %s\n" % (dot_hg / "pulled"))
    shutil.rmtree(dot_hg / "cache", ignore_errors=True)
    (dot_hg / "store" / "journal").write_bytes(b"")
    times = _directory_times(dot_hg)
    before = _digest_tree(dot_hg)
    report = runner.Check(str(hgrepo), quick=True,
                          scratch=str(tmp_path / "scratch"), keep=True).run()
    assert _digest_tree(dot_hg) == before
    assert _directory_times(dot_hg) == times
    assert report["original_unchanged"], report["original_changed_files"]
    assert report["original_caches_rewritten"] == []
    scratch = report["scratch"]["path"]
    assert not os.path.lexists(os.path.join(scratch, "original-view"))
    copy = os.path.join(scratch, "copy")
    assert not os.path.exists(os.path.join(copy, ".hg", "hgrc"))
    os.unlink(dot_hg / "store" / "journal")
    hg("verify", "-q", cwd=copy)
    assert hg("log", "-T", "{node}\n", cwd=copy) == hg(
        "log", "-T", "{node}\n", cwd=hgrepo)


def _hg_serve_processes(path):
    """Pids of processes whose command line mentions ``path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                if os.fsencode(str(path)) in fh.read():
                    found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_nothing_behind(env, real_hg_repo, tmp_path,
                                         signum):
    """Ctrl-C (SIGINT to the terminal's process group) or SIGTERM to the
    runner, while hg serve serves the copy: the scratch directory and
    every server go away."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    before = _digest_tree(real_hg_repo / ".hg")
    proc = subprocess.Popen(
        [tools.executable("vcsperf"), "check", "--repo", str(real_hg_repo),
         "--quick", "--scratch", str(scratch)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        # A job started in the background by a shell ignores SIGINT, and
        # so would the runner: a terminal's foreground job does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        # hg serve has started serving the copy, for a clone from a
        # bundle.
        while not any(os.path.exists(os.path.join(scratch, run,
                                                  "copy.access.log"))
                      for run in os.listdir(scratch)):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err
    assert "interrupted" in err and "removed" in err
    assert "Traceback" not in err
    assert os.listdir(scratch) == []
    for _ in range(50):
        if not _hg_serve_processes(scratch):
            break
        time.sleep(0.1)
    assert _hg_serve_processes(scratch) == []
    assert _digest_tree(real_hg_repo / ".hg") == before


def test_short_disk_aborts_before_anything(env, real_hg_repo, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = _vcsperf_check(env, "--repo", real_hg_repo, "--scratch", scratch,
                          "--reserve", "1000000T")
    assert proc.returncode == 255
    first, hint = proc.stderr.splitlines()
    assert first.startswith("abort: vcsperf check needs about ")
    assert "kept in reserve" in first and "--scratch" in hint
    assert os.listdir(scratch) == []


def test_not_a_repository(env, hg, tmp_path):
    proc = _vcsperf_check(env, "--repo", tmp_path)
    assert proc.returncode == 255
    assert proc.stderr.startswith("abort: %s is not a Mercurial repository"
                                  % tmp_path)
    empty = tmp_path / "empty"
    hg("init", empty)
    proc = _vcsperf_check(env, "--repo", empty, "--scratch", tmp_path)
    assert (proc.returncode, proc.stderr) == (
        255, "abort: %s has no changesets\n" % empty)


def test_resume_skips_completed_features(real_hg_repo, tmp_path,
                                         monkeypatch):
    """A run interrupted in its third feature (the first two ran side by
    side) keeps DIR; the same command with ``--resume DIR`` runs only what
    was not completed, and reports every feature once, in order; other
    options are refused."""
    calls = []
    resume = tmp_path / "run"

    def feature(check, work):
        calls.append(os.path.basename(work))
        if calls.count("wire") == 1 and calls[-1] == "wire":
            # one run at a time in DIR
            with pytest.raises(runner.Abort, match="another vcsperf check"):
                runner.Check(str(real_hg_repo), resume=str(resume)).run()
            raise KeyboardInterrupt()
        check.fact("ran in", os.path.basename(work))

    _only_the_copy(monkeypatch, feature)
    with pytest.raises(KeyboardInterrupt):
        runner.Check(str(real_hg_repo), resume=str(resume)).run()
    state = json.loads((resume / RUN_DIR / STATE_FILE
                        ).read_text())["state"]
    assert sorted(calls[:2]) == ["commit-IDs", "dictionaries"]
    assert [f["name"] for f in state["features"]] == ["dictionaries",
                                                      "commit IDs"]
    assert (resume / RUN_DIR / "copy" / ".hg" / "store").is_dir()
    with pytest.raises(runner.Abort, match="other options"):
        runner.Check(str(real_hg_repo), quick=True, resume=str(resume)).run()
    report = runner.Check(str(real_hg_repo), resume=str(resume)).run()
    assert calls[2:] == ["wire", "wire", "bundles", "checkouts", "importer"]
    assert [f["name"] for f in report["features"]] == FEATURES
    assert report["passed"] and not resume.exists()
    assert report["estimate"]["seconds"] > 0
    assert report["estimate"]["actual_vs_estimate"] > 0
    # issue 30: the survey and the fingerprints are steps of the copy,
    # the survey's once though the run was resumed
    copy_steps = [s["step"] for s in report["steps"]
                  if s["feature"] == "copy"]
    assert copy_steps.count(runner.SURVEY_STEP) == 1
    assert copy_steps[-1] == runner.FINGERPRINT_STEP
    assert report["minutes_per_100k_files"] > 0


def test_a_timed_step_has_the_machine_alone():
    """Untimed work of two features shares the machine; a timed step
    starts only when the other's untimed work has ended, and the other's
    next untimed work waits for the timed step's end."""
    machine = resources.Machine()
    events = []
    sharing, release = threading.Event(), threading.Event()

    def untimed():
        with machine.shared():
            sharing.set()
            release.wait(60)
            events.append("untimed ends")
        with machine.shared():
            events.append("untimed again")

    other = threading.Thread(target=untimed)
    other.start()
    assert sharing.wait(60)
    with machine.shared():
        # both share it now
        timed = threading.Thread(target=lambda: _timed(machine, events))
        timed.start()
    timed.join(0.5)
    assert events == []
    release.set()
    timed.join(60)
    other.join(60)
    assert events == ["untimed ends", "timed", "untimed again"]


def test_a_feature_without_rates_fails_at_import(tmp_path, monkeypatch):
    """A row of the features table is checked when it is made, so a
    module that makes a bad one fails when it is imported, not when a run
    reaches the feature: no rates, a rate per a unit the estimates do not
    measure, a negative one, a name twice, a feature beside none."""
    row = check_features.FEATURES[0]
    for change in ({"seconds_per": {}}, {"disk_per": {}},
                   {"seconds_per": {"MB per hour": 1}},
                   {"disk_per": {"work": -1}}, {"function": None},
                   {"name": ""}):
        with pytest.raises(ValueError):
            dataclasses.replace(row, **change)
    with pytest.raises(ValueError, match="two features"):
        check_features.table(row, row)
    with pytest.raises(ValueError, match="beside"):
        check_features.table(dataclasses.replace(row, beside="nothing"))
    (tmp_path / "morefeatures.py").write_text(
        "from vcsperf.check.features import Feature, table\n"
        "FEATURES = table(Feature('new', print, seconds_per={},\n"
        "                         disk_per={'tree': 1}))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="'new' has no seconds_per"):
        __import__("morefeatures")
    # The table's own rows are whole: every one has both kinds of rates.
    assert all(f.seconds_per and f.disk_per
               for f in check_features.FEATURES)


def _timed(machine, events):
    with machine.shared(), machine.alone():
        events.append("timed")


def test_interrupt_stops_the_feature_beside(real_hg_repo, tmp_path,
                                            monkeypatch):
    """Ctrl-C in the dictionaries while commit IDs runs beside them:
    commit IDs stops before its next command, and only then is the
    scratch directory removed."""
    started = threading.Event()
    commands = []

    def feature(check, work):
        if os.path.basename(work) == "commit-IDs":
            started.set()
            while True:  # until the interrupt stops it
                check.hg(["version", "-q"], check.hg_env())
                commands.append(os.path.isdir(work))
        if os.path.basename(work) == "dictionaries":
            assert started.wait(120)
            raise KeyboardInterrupt()

    _only_the_copy(monkeypatch, feature)
    scratch = tmp_path / "scratch"
    with pytest.raises(KeyboardInterrupt):
        runner.Check(str(real_hg_repo), scratch=str(scratch)).run()
    # every command of commit IDs ran with its directory still there
    assert all(commands)
    assert os.listdir(scratch) == []


# issue 27: what the check removes, and the repositories it must work on --

def _small_repo(hg, path, commits=6, config=()):
    """A repository of ``commits`` linear changesets, each changing a
    Python file and a text file."""
    hg("init", path)
    for i in range(commits):
        (path / ("a%d.py" % i)).write_text("x = %d\n" % i)
        with open(path / "b.txt", "a") as fh:
            fh.write("%d\n" % i)
        hg(*config, "commit", "-q", "-A", "-m", "change %d" % i, cwd=path)
    return path


def _run_only(monkeypatch, features, repo, **options):
    """Run the check with only ``features`` (FEATURES names), the others
    skipped; the report."""
    _replace_features(monkeypatch, dict.fromkeys(
        [name for name in FEATURES if name not in features],
        lambda check, work: "not in this test"))
    return runner.Check(str(repo), **options).run()


def _statuses(report):
    return {f["name"]: (f["status"], f["error"]) for f in report["features"]
            if f["error"] != "not in this test"}


def test_resume_dot_keeps_the_files_there(hg, tmp_path, monkeypatch):
    """issue 27: ``--resume .`` removed the whole current directory at
    the end.  The run removes only the directory it made in it."""
    repo = _small_repo(hg, tmp_path / "repo", 2)
    here = tmp_path / "work"
    (here / "notes").mkdir(parents=True)
    (here / "notes" / "todo.txt").write_text("mine\n")
    (here / "report.txt").write_text("mine too\n")
    monkeypatch.chdir(here)
    report = _run_only(monkeypatch, [], repo, resume=".")
    assert report["passed"]
    assert sorted(os.listdir(here)) == ["notes", "report.txt"]
    assert (here / "notes" / "todo.txt").read_text() == "mine\n"
    assert (here / "report.txt").read_text() == "mine too\n"


@pytest.mark.parametrize("where", ["repository", "parent", "inside .hg"])
def test_resume_holding_the_repository_is_refused(hg, tmp_path,
                                                  monkeypatch, where):
    """issue 27: ``--resume DIR`` with the repository in DIR removed the
    repository at the end; DIR is refused before anything is written."""
    repo = _small_repo(hg, tmp_path / "repo", 2)
    resume = {"repository": repo, "parent": tmp_path,
              "inside .hg": repo / ".hg" / "run"}[where]
    before = _digest_tree(tmp_path)
    with pytest.raises(runner.Abort, match="holds the repository|inside"):
        _run_only(monkeypatch, [], repo, resume=str(resume))
    assert _digest_tree(tmp_path) == before
    hg("verify", "-q", cwd=repo)


def test_resume_keeps_what_it_did_not_make(hg, tmp_path, monkeypatch):
    """A directory named as the run's but without its marker is not
    taken (nor removed); files put in DIR during the run stay; DIR made
    by the run goes at the end when it is empty, not otherwise."""
    repo = _small_repo(hg, tmp_path / "repo", 2)
    foreign = tmp_path / "foreign"
    (foreign / RUN_DIR).mkdir(parents=True)
    (foreign / RUN_DIR / "data").write_text("not the check's\n")
    with pytest.raises(runner.Abort, match="not made by vcsperf check"):
        _run_only(monkeypatch, [], repo, resume=str(foreign))
    assert (foreign / RUN_DIR / "data").read_text() == \
        "not the check's\n"
    made = tmp_path / "made"

    def drop_a_file(check, work):
        (made / "added-meanwhile").write_text("user\n")

    _run_only(monkeypatch, [], repo, resume=str(made))
    assert not made.exists()
    _replace_features(monkeypatch, {"importer": drop_a_file})
    assert runner.Check(str(repo), resume=str(made)).run()["passed"]
    assert os.listdir(made) == ["added-meanwhile"]


def test_json_path_checked_before_the_run(env, hg, tmp_path):
    """issue 27: ``--json /nonexistent/x.json`` ran the whole check, then
    ended in a traceback; it is refused first, in one line."""
    repo = _small_repo(hg, tmp_path / "repo", 2)
    for path in (tmp_path / "nonexistent" / "x.json", tmp_path):
        proc = subprocess.run(
            [tools.executable("vcsperf"), "check", "--repo", str(repo),
             "--json", str(path)], env=env, capture_output=True, text=True,
            timeout=30)
        assert proc.returncode == 255, proc.stderr
        assert proc.stderr.startswith("abort: cannot write the report to "
                                      "%s" % path)
        assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_json_written_by_rename(hg, tmp_path, monkeypatch):
    repo = _small_repo(hg, tmp_path / "repo", 2)
    out = tmp_path / "out"
    out.mkdir()
    _replace_features(monkeypatch, dict.fromkeys(
        FEATURES, lambda check, work: "skipped"))
    renames = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (
        renames.append((a, b)), replace(a, b)))
    check = runner.Check(str(repo), scratch=str(tmp_path))
    assert runner.report_run(check, str(out / "report.json")) == 0
    assert os.listdir(out) == ["report.json"]
    assert json.loads((out / "report.json").read_text())["passed"]
    assert [os.path.dirname(a) for a, b in renames
            if b == str(out / "report.json")] == [str(out)]


@pytest.mark.slow
def test_repository_that_has_commit_ids(hg, tmp_path, monkeypatch):
    """issue 27: every changeset had an ID already, ``commitid-add``
    exits 1 (nothing to add): the feature passes."""
    repo = _small_repo(hg, tmp_path / "repo", 6,
                       ["--config", "extensions.commitid="])
    assert "MozReview-Commit-ID:" in hg("log", "-r", "tip", "-T", "{desc}",
                                        cwd=repo)
    report = _run_only(monkeypatch, ["commit IDs"], repo,
                       scratch=str(tmp_path))
    assert _statuses(report) == {"commit IDs": ("passed", None)}


def _with_hidden_changeset(hg, path):
    """A repository whose revision 3 was amended: revision 3 is hidden,
    revisions 4 and 5 were rebased onto its successor."""
    repo = _small_repo(hg, path, 6)
    evolve = ["--config", "experimental.evolution=all"]
    hg("update", "-q", "-r", "3", cwd=repo)
    (repo / "a3.py").write_text("x = 33\n")
    hg(*evolve, "commit", "-q", "--amend", "-m", "change 3, amended",
       cwd=repo)
    hg(*evolve, "--config", "extensions.rebase=", "rebase", "-q", "-r",
       "4::5", "-d", ".", cwd=repo)
    hidden = hg(*evolve, "log", "--hidden", "-r", "hidden()", "-T", "{rev}\n",
                cwd=repo).split()
    assert hidden == ["3", "4", "5"]
    return repo


@pytest.mark.slow
@pytest.mark.parametrize("feature", ["dictionaries", "checkouts",
                                     "commit IDs", "wire"])
def test_repository_with_obsolescence_markers(hg, tmp_path, monkeypatch,
                                              feature):
    """issue 27: with hidden changesets the dictionaries compared a clone
    (without them) with the copy (with them), the wire expected them in
    the pull, and checkouts and commit IDs picked them or their revision
    numbers.  (The bundles feature needs bundlegen to carry the markers,
    another part of issue 27.)"""
    repo = _with_hidden_changeset(hg, tmp_path / "repo")
    report = _run_only(monkeypatch, [feature], repo, scratch=str(tmp_path))
    statuses = _statuses(report)
    assert [status for status, _ in statuses.values()] == ["passed"], \
        statuses
    assert report["changesets"] == 6


@pytest.mark.slow
def test_repository_with_subrepos(hg, tmp_path, monkeypatch):
    """issue 27: the commit IDs feature rebased changesets whose tree held
    a subrepository, which hg looked for beside the copy; it now takes a
    run of history without one.  Checkouts skip them as before."""
    repo = _small_repo(hg, tmp_path / "repo", 6)
    _small_repo(hg, repo / "sub", 1)
    (repo / ".hgsub").write_text("sub = sub\n")
    hg("add", "-q", ".hgsub", cwd=repo)
    hg("commit", "-q", "-m", "a subrepository", cwd=repo)
    for i in range(3):
        (repo / "b.txt").write_text("%d\n" % i)
        hg("commit", "-q", "-m", "after %d" % i, cwd=repo)
    report = _run_only(monkeypatch, ["commit IDs", "checkouts"], repo,
                       scratch=str(tmp_path), quick=True)
    assert _statuses(report) == {"checkouts": ("passed", None),
                                 "commit IDs": ("passed", None)}


def _commit_file(hg, repo, name, content=b"x = 1\n"):
    path = os.path.join(os.fsencode(str(repo)), name)
    with open(path, "wb") as fh:
        fh.write(content)
    hg("add", "-q", os.fsdecode(path), cwd=repo)
    hg("commit", "-q", "-m", "add a file", cwd=repo)


@pytest.mark.parametrize("name", [b"form\x0cfeed.py", b"caf\xe9.py",
                                  b"test[1].py", b"star*.py"])
def test_file_names_the_importer_takes(hg, tmp_path, monkeypatch, name):
    """issue 27: a form feed in a name cut the file list (``splitlines``),
    a byte that is not UTF-8 stopped it (strict decoding): the check could
    not start; ``test[1].py`` was a glob of ``listfile:``, so the
    importer's archive left it out."""
    repo = _small_repo(hg, tmp_path / "repo", 2)
    _commit_file(hg, repo, name)
    report = _run_only(monkeypatch, ["importer"], repo,
                       scratch=str(tmp_path))
    assert _statuses(report) == {"importer": ("passed", None)}
    facts = report["features"][-1]["facts"]
    assert facts["python files"] == facts["compile after the rewrite"] == 3
    assert report["files_at_tip"] == 4


#: A run of the importer alone (the other features stubbed), printing the
#: report's features as JSON; test_campaign_check runs it too.
IMPORTER_ONLY = """
import dataclasses, json, sys
from vcsperf.check import features, runner
features.FEATURES = tuple(
    f if f.name == "importer" else dataclasses.replace(
        f, function=lambda check, work: "not in this test")
    for f in features.FEATURES)
report = runner.Check(sys.argv[1], scratch=sys.argv[2]).run()
print(json.dumps(report["features"]))
"""


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_symlink_to_a_special_file(env, hg, tmp_path, target):
    """issue 27: a tracked ``x.py -> /dev/zero`` made the importer read
    until memory ran out, one to a FIFO made it wait forever: symlinks are
    not compiled, and only regular files are read."""
    repo = _small_repo(hg, tmp_path / "repo", 2)
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    os.symlink(target, repo / "x.py")
    hg("commit", "-q", "-A", "-m", "a symlink", cwd=repo)
    proc = campaign.run_bounded(
        [sys.executable, "-c", IMPORTER_ONLY, str(repo), str(tmp_path)],
        env=env, address_space=1 << 30, timeout=60)
    assert proc.returncode == 0, proc.stderr
    importer = json.loads(proc.stdout.splitlines()[-1])[-1]
    assert importer["status"] == "passed", importer
    assert importer["facts"]["symlinks left out"] == 1
    assert importer["facts"]["python files compiled"] == 2


def test_demo_workdir_keeps_the_files_there(tmp_path, monkeypatch):
    """``vcsperf demo --workdir DIR`` removed DIR at the end, whatever it
    held: it builds in a directory of its own in DIR, and removes only
    that."""
    from vcsperf.check import demo
    from vcsperf.harness import history
    sources = history.installed_sources
    monkeypatch.setattr(history, "installed_sources", lambda: list(
        sources(distributions=("pycparser",)))[:3])
    _replace_features(monkeypatch, dict.fromkeys(
        FEATURES + ["git checkouts"], lambda check, work: "skipped"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    # the page goes to the suite's cache directory
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert demo.run_demo(str(mine)) == 0
    assert os.listdir(mine) == ["notes.txt"]
    assert "<svg" in (tmp_path / "cache" / "vcsperf" / "demo.html"
                      ).read_text()
    assert demo.run_demo(str(mine), json_path=str(
        tmp_path / "nowhere" / "x.json")) == 255
    assert os.listdir(mine) == ["notes.txt"]


# issue 30: the quick run's slice, narrowed on a large tree ---------------

def test_narrow_files_is_bounded_and_replayable():
    """The slice's files: every file while the tree is small; above the
    bound, the touched files (spread when too many) and a sample of the
    rest with its Python files, never more than the bounds, the same on
    every call, bytes or str."""
    from vcsperf.check import checkcmds
    tip = ["d%03d/f%04d.%s" % (i % 40, i, "py" if i % 7 == 0 else "js")
           for i in range(3000)]
    assert checkcmds.narrow_files(tip[:10], tip) is None
    touched = tip[:50] + ["gone/removed.txt"]
    bounds = dict(above=100, touched_files=20, rest_files=30,
                  python_files=5)
    kept = checkcmds.narrow_files(touched, tip, **bounds)
    assert kept == checkcmds.narrow_files(list(reversed(touched)),
                                          list(reversed(tip)), **bounds)
    assert kept == sorted(set(kept)) and len(kept) <= 20 + 30 + 5
    assert len(set(kept) & set(touched)) == 20
    rest = set(kept) - set(touched)
    assert 30 <= len(rest) <= 35 and sum(
        name.endswith(".py") for name in rest) >= 5
    assert [os.fsencode(name) for name in kept] == \
        checkcmds.narrow_files([os.fsencode(t) for t in touched],
                               [os.fsencode(t) for t in tip], **bounds)


def test_narrowed_slice_from_a_partial_copy(hg, tmp_path):
    """``hg check-narrow`` on a copy with no filelog yet names the slice's
    filelogs; the copy links only those; ``hg check-slice --files`` then
    writes each changeset's tree narrowed to the list, removals, copies,
    flags and a merge included, and the slice passes ``hg verify``."""
    from vcsperf.check import checkcmds
    repo = tmp_path / "repo"
    hg("init", repo)
    for i in range(12):
        (repo / ("f%02d.%s" % (i, "py" if i % 3 == 0 else "txt"))
         ).write_text("%d\n" % i)
    hg("commit", "-q", "-A", "-m", "all", cwd=repo)
    (repo / "f01.txt").write_text("changed\n")
    hg("remove", "-q", "f02.txt", cwd=repo)
    hg("commit", "-q", "-m", "change one, remove one", cwd=repo)
    hg("copy", "-q", "f01.txt", "copied.txt", cwd=repo)
    hg("commit", "-q", "-m", "copy", cwd=repo)
    os.chmod(repo / "f04.txt", 0o755)
    hg("commit", "-q", "-m", "executable", cwd=repo)
    hg("update", "-q", "-r", "1", cwd=repo)
    (repo / "f05.txt").write_text("branch\n")
    hg("commit", "-q", "-m", "branch", cwd=repo)
    hg("merge", "-q", "-r", "3", cwd=repo)
    hg("commit", "-q", "-m", "merge", cwd=repo)
    bounds = ["--config", "extensions.checkcmds=%s" % checkcmds.__file__,
              "--config", "checkcmds.above=4", "--config",
              "checkcmds.touched-files=3", "--config",
              "checkcmds.rest-files=2", "--config",
              "checkcmds.python-files=1"]
    revs = "last(::tip, 5)"
    slice_args = ["tip", "5"]
    listed = tmp_path / "files"
    copy = tmp_path / "copy"

    def filelogs(dest):
        out = hg(*bounds, "-R", dest, "check-narrow", *slice_args, listed)
        return [os.fsdecode(bytes.fromhex(line)) for line in out.split()]
    assert copying.copy_repository(str(repo), str(copy), filelogs)
    keep = set(listed.read_bytes().split(b"\0"))
    assert 3 <= len(keep) <= 6
    linked = {os.path.relpath(os.path.join(top, name), copy / ".hg" /
                              "store" / "data")
              for top, _, names in os.walk(copy / ".hg" / "store" / "data")
              for name in names}
    assert linked == {name.decode() + ".i" for name in keep}
    dest = tmp_path / "slice"
    assert hg(*bounds, "-R", copy, "check-slice", "--files", listed,
              *slice_args, dest).strip() == "5"
    hg("verify", "-q", "-R", dest)
    originals = hg("log", "-R", repo, "-r", revs, "-T", "{node}\n").split()

    def tree(repository, rev, names=None):
        """{path: (flags, hex of the content)} of ``rev``."""
        flags = dict(line.split(" ", 1)[::-1] for line in hg(
            "files", "-R", repository, "-r", rev, "-T", "{flags} {path}\n",
            check=False).splitlines())
        names = [name for name in flags if names is None or name in names]
        data = dict(line.split(" ") for line in hg(
            "cat", "-r", rev, "-T", "{path} {data|hex}\n",
            *["path:" + name for name in names],
            cwd=repository).splitlines()) if names else {}
        return {name: (flags[name], data[name]) for name in names}
    for index, node in enumerate(originals):
        got = tree(dest, str(index))
        assert got == tree(repo, node, {name.decode() for name in keep}), \
            index
    assert hg("log", "-R", dest, "-r", "merge()", "-T", "{rev}") == "4"
    # The survey reads the original for the same choice, writing nothing
    # there: not even a cache, when it has none.
    shutil.rmtree(repo / ".hg" / "cache", ignore_errors=True)
    before = _digest_tree(repo / ".hg")
    first, *lines = hg(*bounds, "-R", repo, "check-survey", "--slice", 5
                       ).splitlines()
    survey = json.loads(first)
    assert survey["node"] == originals[-1] and survey["files"] == 12
    assert survey["slice"] == {"changesets": 5, "files_touched": 5,
                               "narrowed": True}
    sizes = dict(line.split(" ")[::-1] for line in hg(
        "files", "-R", repo, "-r", "tip", "-T", "{size} {path|hex}\n"
    ).splitlines())
    assert dict(line.split(" ")[::-1] for line in lines) == {
        name.hex(): sizes[name.hex()] for name in keep
        if name.hex() in sizes}
    assert _digest_tree(repo / ".hg") == before


def test_the_survey_runs_nothing_the_repository_enables(hg, tmp_path):
    """The survey reads the original without its own hgrc: blackbox, or a
    hook on the survey command, enabled there wrote into it.  A slice
    that is no count is one abort line, and the slice says how many
    changesets it walked, not how many were asked for."""
    from vcsperf.check import checkcmds, estimates
    repo = tmp_path / "repo"
    hg("init", repo)
    (repo / "a").write_text("a\n")
    hg("commit", "-q", "-A", "-m", "a", cwd=repo)
    (repo / ".hg" / "hgrc").write_text(
        "[extensions]\nblackbox =\n[hooks]\n"
        "pre-check-survey = touch %s\n" % (repo / ".hg" / "hooked"))
    shutil.rmtree(repo / ".hg" / "cache", ignore_errors=True)
    before = _digest_tree(repo / ".hg")
    found, files = estimates._survey_command(
        str(repo), tools.isolated_env(str(tmp_path)), "--slice", "5")
    assert found["slice"]["changesets"] == 1 and len(files) == 1
    assert estimates.survey(str(repo), None, True)["files_at_tip"] == 1
    assert estimates.tip_node(str(repo)) == hg(
        "log", "-R", repo, "-r", "0", "-T", "{node}", "--config",
        "extensions.blackbox=!", "--config", "hooks.pre-log=")
    assert _digest_tree(repo / ".hg") == before
    proc = hg.proc("--config", "extensions.checkcmds=%s" % checkcmds.__file__,
                   "--config", "extensions.blackbox=!", "-R", repo,
                   "check-survey", "--slice", "-1")
    assert campaign.is_clean_abort(proc), proc.stderr
    proc = subprocess.run([tools.executable("vcsperf"), "check", "--quick",
                           "--slice", "0", "--repo", str(repo)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--slice takes a number" in proc.stderr


def test_the_time_estimate_scales_with_the_load_per_core():
    """The rates are an idle machine's: a run on a machine loaded beyond
    its cores is estimated that many times longer, part by part."""
    info = {"changesets": 4001, "files_at_tip": 408285,
            "store_disk_bytes": 3 * 10**9, "store_files": 440940,
            "checkout_disk_bytes": 5 * 10**9, "python_files_at_tip": 10052,
            "slice": {"files": 1505, "checkout_disk_bytes": 31387648,
                      "python_files": 223}}
    from vcsperf.check import estimates
    idle = estimates.seconds(check_features.FEATURES, info, True, None)
    busy = estimates.seconds(check_features.FEATURES, info, True, None, 3.0)
    assert set(idle) == set(busy) == {"copy", *FEATURES, "git checkouts"}
    for part, seconds in idle.items():
        assert seconds > 0 and abs(busy[part] - 3 * seconds) <= 0.15


def test_the_estimate_sees_the_share_of_a_core_others_leave_it():
    """Two busy loops per core (real processes, as other jobs' would be)
    lower the share of a core the run is given, and the estimate grows by
    one over it; beside the same loops a run under ``nice`` is left much
    less, which a count of the busy cores could not tell."""
    from vcsperf.check import estimates
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(2 * os.cpu_count())]
    try:
        time.sleep(0.5)
        factor, share = estimates.busy_factor()
        niced = subprocess.run(
            ["nice", "-n", "10", sys.executable, "-c",
             "from vcsperf.check import estimates\n"
             "print(estimates.busy_factor()[1])"],
            capture_output=True, text=True, check=True)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert share <= 0.6 and factor == pytest.approx(1 / share)
    assert estimates.SHARE_FLOOR <= float(niced.stdout) < share / 2
