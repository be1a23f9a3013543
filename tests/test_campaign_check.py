"""The adversarial campaign for ``vcsperf check`` (issue 27).

The check is heavy, so each case runs the cheapest part that meets it:
the inspection, the copy and one or two features (the others skipped, as
in tests/test_check.py), on small repositories.

- Hostile file names (control bytes, bytes that are not UTF-8, glob and
  regex characters, pattern-kind prefixes, very long names and paths):
  the check starts, and the importer compiles every one of them.
- Tracked symlinks to special files (/dev/zero, /dev/urandom, a FIFO, a
  directory, a dangling target, a loop), under an address-space limit
  and a timeout: the run ends, the importer leaves them out, passing.
- The resume directory changed or deleted behind the run's back (its
  state damaged, its marker removed, the run's directory a symlink, the
  directory removed while a feature runs, files added to DIR): one
  ``Abort`` or a report, never another exception, and nothing the run
  did not make is ever removed.
- Read-only places (the resume directory, the run's directory left by a
  killed run, ``--scratch``, the ``--json`` directory): one ``Abort``.
"""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys

import pytest

import campaign
from test_check import IMPORTER_ONLY
from vcsperf.check import features as check_features, runner
from vcsperf.check.resume import LOCK_FILE, MARKER_FILE, RUN_DIR, STATE_FILE
from vcsperf.harness import tools

FEATURES = ["dictionaries", "bundles", "wire", "checkouts", "commit IDs",
            "importer"]


def _small_repo(hg, path, commits=2):
    hg("init", path)
    for i in range(commits):
        (path / ("a%d.py" % i)).write_text("x = %d\n" % i)
        hg("commit", "-q", "-A", "-m", "change %d" % i, cwd=path)
    return path


def _only(monkeypatch, features=(), replace=None):
    """Every feature skipped but ``features``; ``replace``: {name:
    function} run instead of a feature."""
    functions = dict.fromkeys(
        [name for name in FEATURES if name not in features],
        lambda check, work: "not in this test")
    functions.update(replace or {})
    monkeypatch.setattr(check_features, "FEATURES", tuple(
        dataclasses.replace(f, function=functions.get(f.name, f.function))
        for f in check_features.FEATURES))


def _tree(top):
    """{relative path: content or link target} of everything under
    ``top``, not following symlinks."""
    found = {}
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                found[os.path.relpath(path, top)] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    found[os.path.relpath(path, top)] = fh.read()
            else:
                found[os.path.relpath(path, top)] = "dir"
    return found


def _outcome(make_check):
    """``("report", report)``, ``("abort", message)`` or ``("crash",
    description)`` of one in-process run."""
    try:
        return "report", make_check().run()
    except runner.Abort as abort:
        return "abort", str(abort)
    except Exception as exc:  # what the campaign looks for
        return "crash", "%s: %s" % (type(exc).__name__, exc)


# Hostile file names ---------------------------------------------------------

_CONTROL = bytes(b for b in range(1, 32) if b not in (10, 13)) + b"\x7f"
_GLOB = b"[]*?{},!^$()|+.\\"


def _hostile_name(rng, index):
    """A file name (bytes) hg takes: never NUL, newline or carriage
    return, no component ``.hg``; ends in ``.py``."""
    kind = index % 6
    if kind == 0:
        stem = bytes(rng.choice(_CONTROL) for _ in range(rng.randint(1, 4)))
    elif kind == 1:
        stem = bytes(rng.randint(0x80, 0xff) for _ in range(rng.randint(1, 6)))
    elif kind == 2:
        stem = bytes(rng.choice(_GLOB) for _ in range(rng.randint(1, 6)))
    elif kind == 3:
        stem = rng.choice([b"glob:x", b"re:.*", b"path:", b"listfile:f",
                           b"set:all()", b"-r tip", b"--config=x"])
    elif kind == 4:
        # the longest a name may be: 255 bytes with "hNN-" and ".py"
        stem = b"n" * rng.randint(200, 247)
    else:
        depth = rng.randint(5, 12)
        stem = b"/".join([b"d" * rng.randint(100, 200)] * depth)
    return b"h%d-%s.py" % (index, stem)


def _commit_names(hg, repo, names):
    """Commit a Python file under each name hg takes; the names taken."""
    taken = []
    for name in names:
        path = os.path.join(os.fsencode(str(repo)), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"x = %r\n" % name)
        if hg.proc("add", "-q", os.fsdecode(path), cwd=repo).returncode:
            os.unlink(path)
            continue
        taken.append(name)
    hg("commit", "-q", "-m", "hostile names", cwd=repo)
    return taken


@pytest.mark.slow
@pytest.mark.campaign
def test_hostile_file_names(hg, tmp_path, monkeypatch, tally):
    batches = campaign.size(1, 4)
    names_per_batch = campaign.size(12, 24)
    # The full campaign converts and checks out the names too.
    features = ["importer"] + (["dictionaries", "checkouts"]
                               if campaign.FULL else [])
    _only(monkeypatch, features)
    for batch in range(batches):
        repo = _small_repo(hg, tmp_path / ("repo%d" % batch))
        names = [_hostile_name(tally.rng, i) for i in range(names_per_batch)]
        taken = _commit_names(hg, repo, names)
        kind, result = _outcome(lambda: runner.Check(
            str(repo), scratch=str(tmp_path)))
        for name in taken:
            if kind != "report":
                tally.case(False, "%r: %s %s" % (name, kind, result))
                continue
            statuses = {f["name"]: f["status"] for f in result["features"]
                        if f["error"] != "not in this test"}
            facts = next(f["facts"] for f in result["features"]
                         if f["name"] == "importer")
            tally.case(
                set(statuses.values()) == {"passed"}
                and facts.get("compile after the rewrite") == len(taken) + 2
                and result["files_at_tip"] == len(taken) + 2,
                "%r: %r %r" % (name, statuses, facts))
    tally.check()


# Special files --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.campaign
def test_symlinks_to_special_files(env, hg, tmp_path, tally):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    targets = ["/dev/zero", "/dev/urandom", "/dev/null", str(fifo), "/",
               str(tmp_path / "nowhere"), "loop.py", "/proc/self/fd/0"]
    rounds = campaign.size(1, 4)
    for round_ in range(rounds):
        repo = _small_repo(hg, tmp_path / ("repo%d" % round_))
        chosen = targets if round_ == 0 else tally.rng.sample(
            targets, tally.rng.randint(1, len(targets)))
        for index, target in enumerate(chosen):
            name = "loop.py" if target == "loop.py" else "s%d.py" % index
            os.symlink(target, repo / name)
        hg("commit", "-q", "-A", "-m", "symlinks", cwd=repo)
        try:
            proc = campaign.run_bounded(
                [sys.executable, "-c", IMPORTER_ONLY, str(repo),
                 str(tmp_path)], env=env, address_space=1 << 30,
                timeout=120)
            importer = [f for f in json.loads(proc.stdout.splitlines()[-1])
                        if f["name"] == "importer"][0] \
                if proc.returncode == 0 else {"error": proc.stderr[-300:]}
        except subprocess.TimeoutExpired:
            importer = {"error": "timed out"}
        for target in chosen:
            tally.case(importer.get("status") == "passed" and importer[
                "facts"].get("symlinks left out") == len(chosen),
                "symlink to %s: %s" % (target, importer.get("error")))
    tally.check()


# The resume directory behind the run's back ---------------------------------

def _damage_state(rng, path):
    """Damage the saved state at ``path`` one of several ways."""
    text = path.read_text()
    how = rng.choice(["truncate", "garbage", "flip", "other json", "empty",
                      "directory", "digest kept, state changed"])
    if how == "truncate":
        path.write_text(text[:rng.randrange(len(text))])
    elif how == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(64)))
    elif how == "flip":
        at = rng.randrange(len(text))
        path.write_text(text[:at] + chr((ord(text[at]) + 1) % 128)
                        + text[at + 1:])
    elif how == "other json":
        path.write_text(json.dumps(rng.choice([[], 5, {"state": 1},
                                               {"sha256": None}])))
    elif how == "empty":
        path.write_text("")
    elif how == "directory":
        path.unlink()
        path.mkdir()
    else:
        saved = json.loads(text)
        saved["state"]["info"] = 7
        path.write_text(json.dumps(saved))
    return how


_BEHIND = ["state damaged", "marker removed", "run directory a symlink",
           "run directory removed during a feature",
           "files added to DIR during a feature", "DIR removed between runs",
           "lock removed during a feature"]


@pytest.mark.slow
@pytest.mark.campaign
def test_resume_directory_behind_its_back(hg, tmp_path, monkeypatch,
                                          tally):
    repo = _small_repo(hg, tmp_path / "repo")
    cases = list(_BEHIND) * campaign.size(1, 3)
    tally.rng.shuffle(cases)
    for number, what in enumerate(cases):
        resume = tmp_path / ("dir%d" % number)
        resume.mkdir()
        (resume / "user.txt").write_text("the user's\n")
        elsewhere = tmp_path / ("elsewhere%d" % number)
        elsewhere.mkdir()
        (elsewhere / "keep.txt").write_text("keep\n")
        run_dir = resume / RUN_DIR
        details = ""

        def during(check, work, what=what):
            if what == "run directory removed during a feature":
                tools.run(["rm", "-rf", str(run_dir)], None)
            elif what == "files added to DIR during a feature":
                (resume / "added.txt").write_text("added\n")
            elif what == "lock removed during a feature":
                os.unlink(run_dir / LOCK_FILE)

        def interrupted(check, work):
            raise KeyboardInterrupt()

        # a first run stops after its first feature, leaving its state
        _only(monkeypatch, replace={"commit IDs": interrupted})
        with contextlib.suppress(KeyboardInterrupt):
            runner.Check(str(repo), resume=str(resume)).run()
        if what == "state damaged":
            details = _damage_state(tally.rng, run_dir / STATE_FILE)
        elif what == "marker removed":
            os.unlink(run_dir / MARKER_FILE)
        elif what == "run directory a symlink":
            tools.run(["rm", "-rf", str(run_dir)], None)
            os.symlink(elsewhere, run_dir)
        elif what == "DIR removed between runs":
            tools.run(["rm", "-rf", str(resume)], None)
        _only(monkeypatch, replace={"importer": during})
        user_before = _tree(resume) if resume.exists() else {}
        elsewhere_before = _tree(elsewhere)
        kind, result = _outcome(lambda: runner.Check(
            str(repo), resume=str(resume)))
        user_after = _tree(resume) if resume.exists() else {}
        kept = all(user_after.get(name) == content
                   for name, content in user_before.items()
                   if not name.startswith(RUN_DIR))
        tally.case(kind != "crash" and kept
                   and _tree(elsewhere) == elsewhere_before
                   and (what != "files added to DIR during a feature"
                        or user_after.get("added.txt") == b"added\n"),
                   "%s %s: %s %s" % (what, details, kind,
                                     result if kind != "report" else ""))
    tally.check()


# Read-only places -----------------------------------------------------------

@contextlib.contextmanager
def _read_only(path):
    """``path`` read-only, for root too (an immutable directory)."""
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield
        finally:
            os.chmod(path, 0o755)
        return
    if subprocess.run(["chattr", "+i", str(path)],
                      capture_output=True).returncode:
        pytest.skip("cannot make a directory read-only as root here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.slow
@pytest.mark.campaign
def test_read_only_places(env, hg, tmp_path, monkeypatch, tally):
    repo = _small_repo(hg, tmp_path / "repo")
    _only(monkeypatch)
    places = ["resume DIR", "run directory of a killed run", "scratch",
              "json directory"]
    for round_ in range(campaign.size(1, 3)):
        for place in places:
            top = tmp_path / ("%s-%d" % (place.replace(" ", "-"), round_))
            top.mkdir()
            (top / "user.txt").write_text("mine\n")
            target, options, json_path = top, {"resume": str(top)}, None
            if place == "run directory of a killed run":
                _only(monkeypatch, replace={
                    "importer": lambda check, work: (_ for _ in ()).throw(
                        KeyboardInterrupt())})
                with contextlib.suppress(KeyboardInterrupt):
                    runner.Check(str(repo), resume=str(top)).run()
                _only(monkeypatch)
                target = top / RUN_DIR
            elif place == "scratch":
                options = {"scratch": str(top)}
            elif place == "json directory":
                options = {"scratch": str(tmp_path)}
                json_path = str(top / "report.json")
            before = _tree(top)
            with _read_only(target):
                if json_path:
                    proc = subprocess.run(
                        [tools.executable("vcsperf"), "check", "--repo",
                         str(repo), "--json", json_path], env=env,
                        capture_output=True, text=True, timeout=120)
                    kind = "abort" if campaign.is_clean_abort(proc) else \
                        "crash"
                    result = proc.stderr[-300:]
                else:
                    kind, result = _outcome(lambda: runner.Check(
                        str(repo), **options))
            tally.case(kind == "abort" and _tree(top) == before,
                       "%s: %s %s" % (place, kind, result))
    tally.check()
