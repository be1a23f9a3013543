"""The directory and state of a run under ``vcsperf check --resume DIR``:
``DIR/vcsperf-check``, which the run makes, marks as its own with a file
in it, holds locked while it runs, and keeps its state in, written after
each completed feature; and ``write_replacing``, by which the state and
the JSON report are written."""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile

from vcsperf.core.errors import Abort

#: The directory a run under ``--resume DIR`` makes in DIR and works in,
#: the only one of DIR it ever removes; the file it writes there first,
#: by which a later run knows the directory as one it made; and the run's
#: state and the file a running one holds locked, both in that directory.
RUN_DIR = "vcsperf-check"
MARKER_FILE = "made-by-vcsperf-check"
STATE_FILE = "state.json"
LOCK_FILE = "lock"


def made_by_check(run_dir):
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


def write_replacing(path, text):
    """Write ``text`` to ``path`` by write-then-rename: a reader sees the
    old file or the new one, whole, with the mode ``open`` would give it
    (``mkstemp``'s 0600 would keep the report page and JSON from the web
    server or colleague they are written for)."""
    fd, temporary = tempfile.mkstemp(prefix=".%s-" % os.path.basename(path),
                                     dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class RunDirectory:
    """``DIR/vcsperf-check`` for ``--resume DIR``: nothing else of DIR is
    ever written or removed."""

    def __init__(self, resume):
        self.resume = resume
        self.path = os.path.join(resume, RUN_DIR)
        self.state_path = os.path.join(self.path, STATE_FILE)
        #: The lock file, open while this run holds it.
        self.lock = None

    def open(self):
        """Make the directory with its marker, or take the one an earlier
        run made (known by the marker), and lock it for this run (the
        lock goes with the process, killed or not)."""
        if os.path.lexists(self.resume) and not os.path.isdir(self.resume):
            raise Abort("--resume %s is not a directory" % self.resume)
        made_parent = not os.path.lexists(self.resume)
        try:
            os.makedirs(self.resume, exist_ok=True)
            os.mkdir(self.path)
        except FileExistsError:
            if made_by_check(self.path) is None:
                raise Abort("%s was not made by vcsperf check" % self.path,
                            hint="give --resume another directory, or move "
                            "%s away" % self.path)
        except OSError as err:
            raise Abort("cannot make %s: %s" % (self.path, err.strerror),
                        hint="give --resume a directory you can write to")
        else:
            self._mark(made_parent)
        self._lock()

    def _mark(self, made_parent):
        try:
            with open(os.path.join(self.path, MARKER_FILE), "w") as fh:
                json.dump({"made_by": "vcsperf check",
                           "made_parent": made_parent}, fh)
        except OSError as err:
            # just made, and not yet known as the run's by another
            shutil.rmtree(self.path, ignore_errors=True)
            raise Abort("cannot write in %s: %s" % (self.path,
                                                    err.strerror),
                        hint="give --resume a directory you can write to")

    def _lock(self):
        path = os.path.join(self.path, LOCK_FILE)
        try:
            lock = open(path, "a")
        except OSError as err:
            raise Abort("cannot lock %s: %s" % (self.path, err.strerror),
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
        self.lock = lock

    def close(self):
        """Let the lock go."""
        self.lock.close()
        self.lock = None

    def remove(self):
        """Remove the directory if it still carries the marker, and DIR if
        the run made it and it is empty."""
        marker = made_by_check(self.path)
        if marker is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        if marker.get("made_parent"):
            with contextlib.suppress(OSError):
                os.rmdir(self.resume)

    def load(self, options):
        """The state an earlier run left, or None; a run with other
        ``options`` is refused."""
        try:
            with open(self.state_path) as fh:
                saved = json.load(fh)
            state = saved["state"]
            if saved["sha256"] != _state_digest(state):
                raise ValueError("not the state as it was written")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise Abort("%s is damaged (%s)" % (self.state_path, err),
                        hint="remove %s to start again" % self.path)
        if state.get("options") != options:
            raise Abort("%s holds a run with other options: %s"
                        % (self.resume, ", ".join(
                            "%s %s" % (k, v) for k, v in
                            state.get("options", {}).items())),
                        hint="give the same options, or remove %s to start "
                        "again" % self.path)
        return state

    def save(self, state):
        try:
            write_replacing(self.state_path, json.dumps(
                {"sha256": _state_digest(state), "state": state}, indent=1))
        except OSError as err:
            raise Abort("cannot save the run's state in %s: %s"
                        % (self.path, err.strerror or err),
                        hint="the run cannot be resumed; start it again")
