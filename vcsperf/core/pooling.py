"""Pooled checkouts without a version control system: network retries with
backoff and jitter, a lock that belongs to a live process, per-step timings
and disk accounting.  Shared by the Mercurial extension ``sharepool`` and
``gitbridge checkout``; imports neither Mercurial nor dulwich.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import socket
import stat
import threading
import time
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")
#: ``waiting(owner, seconds, takeover)``: see ``await_lock``.
Waiting = Callable[[str, float, bool], None]

#: robustcheckout's figures: the n-th retry waits (2^n - 1) * 1.5 s plus a
#: random 1 to 5 s, so a fleet that failed together does not retry together.
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF = 1.5
DEFAULT_JITTER = (1.0, 5.0)
#: How long a checkout waits for a lock that a live process on this host
#: holds, in seconds (``sharepool.lock-timeout``): a clone by another
#: checkout may take that long.
DEFAULT_LOCK_TIMEOUT = 3600
#: How long a transfer may stall (Mercurial's ``http.timeout``, git's
#: ``http.lowSpeedTime`` as ``sharepool.http-timeout``) before it fails
#: instead of hanging the job; also how old a lock of another host's
#: must be before it is taken over (``sharepool.foreign-lock-grace``).
DEFAULT_HTTP_TIMEOUT = 600
#: How long one network step (a lookup, a clone, a pull or a fetch) may
#: take in all.  A server that trickles a byte every few seconds never
#: trips a timeout per read; this deadline ends such a step as a network
#: failure.  An hour, as the lock timeout: a clone that takes longer
#: already makes every checkout waiting for its store give up.
DEFAULT_NETWORK_DEADLINE = float(DEFAULT_LOCK_TIMEOUT)
#: The longest network deadline, a year: a timer's wait past a time_t's
#: range raises in the watchdog thread, which would leave the step
#: without a deadline.
MAX_NETWORK_DEADLINE = 365 * 86400.0
#: Once a step is past its deadline, it is interrupted again this often
#: (seconds) until it ends: a connection or process the step opens after
#: the first interrupt (a client resending its request) is cut too.
INTERRUPT_REPEAT = 1.0


class GaveUp(Exception):
    """The last allowed network attempt failed; ``reason`` says how."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__("%s (after %d attempts)" % (reason, attempts))
        self.reason = reason
        self.attempts = attempts


class NetworkAttempts:
    """The network attempts one checkout may make, shared by all its network
    operations (as robustcheckout counts them).

    ``call(operation, transient, report)`` runs ``operation()``.  When it
    raises, ``transient(exc)`` returns a one-line reason if the failure is
    worth retrying (a cut stream, a 5xx, a reset or timed-out socket), or
    None to let the exception through.  A retry first calls
    ``report(reason, failed, limit, delay)`` and sleeps ``delay`` seconds;
    the attempt that reaches ``limit`` failures raises ``GaveUp``.
    """

    def __init__(self, limit: int = DEFAULT_ATTEMPTS,
                 backoff: float = DEFAULT_BACKOFF,
                 jitter: tuple[float, float] = DEFAULT_JITTER,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        if limit < 1:
            raise ValueError("at least one network attempt is needed")
        self.limit = limit
        self.backoff = backoff
        self.jitter = jitter
        self.failures = 0
        self._sleep = sleep
        self._rng = rng or random.Random()

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure."""
        low, high = self.jitter
        return (2 ** failures - 1) * self.backoff + self._rng.uniform(low, high)

    def failed(self, reason: str) -> float:
        """Count a failure: the seconds to wait before the next attempt, or
        ``GaveUp`` when that was the last one."""
        self.failures += 1
        if self.failures >= self.limit:
            raise GaveUp(reason, self.failures)
        return self.delay(self.failures)

    def call(self, operation: Callable[[], T],
             transient: Callable[[Exception], str | None],
             report: Callable[[str, int, int, float], None]) -> T:
        while True:
            try:
                return operation()
            except Exception as exc:
                reason = transient(exc)
                if reason is None:
                    raise
                wait = self.failed(reason)
                report(reason, self.failures, self.limit, wait)
                self._sleep(wait)


def transient_socket_error(exc: BaseException) -> str | None:
    """A reason when ``exc`` is a network failure of the socket layer that a
    retry may cure (timeouts, resets, refused connections), else None."""
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out: %s" % exc
    if isinstance(exc, ConnectionError):
        return "connection error: %s" % exc
    if isinstance(exc, OSError) and exc.errno in (
            errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED,
            errno.ETIMEDOUT, errno.EPIPE, errno.EHOSTUNREACH,
            errno.ENETUNREACH):
        return "socket error: %s" % exc
    return None


class StepDeadline:
    """The deadline of one network step, as a context::

        with StepDeadline(600) as deadline, deadline.watching(cut):
            step()

    Once the step has run ``seconds``, a watchdog thread sets ``expired``
    and calls every interrupt registered with ``watching`` -- each must
    make the step's blocked I/O fail (shut its sockets down, kill its
    processes) and may be called again, every ``INTERRUPT_REPEAT``
    seconds, until the block ends.  The step then fails where it does
    network I/O, through its own error handling (a transaction rolls
    back); the caller reads ``expired`` to say why."""

    def __init__(self, seconds: float,
                 repeat: float = INTERRUPT_REPEAT) -> None:
        if not valid_deadline(seconds):
            raise ValueError("a step deadline must be a positive number "
                             "of seconds")
        self.seconds = seconds
        self.repeat = repeat
        self.expired = False
        self._interrupts: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                          name="step deadline")

    def __enter__(self) -> StepDeadline:
        self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ended.set()
        self._watchdog.join()

    def watching(self, interrupt: Callable[[], None]) -> _Watching:
        """A context during which ``interrupt()`` is called at the
        deadline (at once on entry when it has passed)."""
        return _Watching(self, interrupt)

    def _watch(self) -> None:
        if self._ended.wait(self.seconds):
            return
        with self._lock:
            self.expired = True
        while True:
            self._interrupt()
            if self._ended.wait(self.repeat):
                return

    def _interrupt(self) -> None:
        with self._lock:
            interrupts = list(self._interrupts)
        for interrupt in interrupts:
            interrupt()


class _Watching:
    def __init__(self, deadline: StepDeadline,
                 interrupt: Callable[[], None]) -> None:
        self.deadline = deadline
        self.interrupt = interrupt

    def __enter__(self) -> _Watching:
        deadline = self.deadline
        with deadline._lock:
            deadline._interrupts.append(self.interrupt)
            expired = deadline.expired
        if expired:
            self.interrupt()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.deadline._lock:
            self.deadline._interrupts.remove(self.interrupt)


def valid_deadline(seconds: float) -> bool:
    """Whether ``seconds`` can be a network deadline (NaN cannot)."""
    return 0 < seconds <= MAX_NETWORK_DEADLINE


def is_inside(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or under it, symbolic links
    resolved; neither need exist."""
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


def _local_source(url: str | bytes) -> str | None:
    """The real path of ``url`` when it names a directory here."""
    text = os.fsdecode(url)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        return None
    text = os.path.expanduser(text)
    return os.path.realpath(text) if os.path.isdir(text) else None


def dest_overlap(dest: str | bytes, sharebase: str | bytes,
                 sources: Iterable[str | bytes | None]) -> str | None:
    """What removing DEST would destroy that no checkout made: "the share
    base" when DEST is, holds or lies in it (a pooled store, or the pool a
    purge would delete), "the source" when DEST is, holds or lies in a
    local source repository; else None.  A checkout removes a DEST that is
    no share of the pool, so these are refused before anything is
    touched."""
    path = os.path.realpath(os.fsdecode(dest))
    base = os.path.realpath(os.fsdecode(sharebase))
    if is_inside(path, base) or is_inside(base, path):
        return "the share base"
    for url in sources:
        source = _local_source(url) if url else None
        if source and (is_inside(path, source) or is_inside(source, path)):
            return "the source"
    return None


def shut_down(sock: socket.socket) -> None:
    """Shut down the connection of ``sock`` for both directions, from any
    thread: a read blocked on it returns at once, as at the end of the
    stream.  The socket stays open for its owner to close.  The shutdown
    goes through a duplicate of its descriptor, so that an SSL socket's
    state, which its owner's thread is using, is left alone."""
    try:
        duplicate = socket.socket(fileno=os.dup(sock.fileno()))
    except (OSError, ValueError):  # closed already
        return
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected any more
        pass
    finally:
        duplicate.close()


# Locks -------------------------------------------------------------------

def owner_identity() -> str:
    """``host:pid`` as Mercurial's lock writes it: the host part carries the
    Linux pid namespace, so a process in another container on the same host
    is never mistaken for a dead one."""
    host = socket.gethostname()
    try:
        host += "/%x" % os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pass
    return "%s:%d" % (host, os.getpid())


#: A lock's content: ``host:pid``, as Mercurial writes it.
_OWNER = re.compile(r"([^\s:]+):([0-9]{1,10})")
#: Mercurial and vcsperf write a lock in one step, as a symlink's target,
#: so a lock whose content is not ``host:pid`` belongs to no running owner
#: -- unless a writer on a filesystem without symlinks has created the file
#: and not yet written it.  Such garbage is taken over once it has been
#: garbage for this many seconds, by its age or by our watch.
GARBAGE_SETTLE = 5.0


def read_lock(path: str) -> str | None:
    """The content of the lock ``path`` as text (a symlink's target, or a
    regular file's first bytes), or None when there is no lock.  Damaged
    content comes back as it is, undecodable bytes escaped; a lock that
    cannot be read at all (a directory, say) as a description of why."""
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None
    except OSError:  # not a symlink: an old or foreign format, or damage
        pass
    try:
        with open(path, "rb") as fh:
            raw = fh.read(256)
    except FileNotFoundError:
        return None
    except OSError as err:
        return "<%s>" % (err.strerror or err)
    return raw.decode("utf-8", "backslashreplace").strip()


def parse_owner(content: str) -> tuple[str, int] | None:
    """``(host, pid)`` from a lock's content, or None when it is garbage."""
    match = _OWNER.fullmatch(content)
    if match is None or not content.isprintable():
        return None
    pid = int(match.group(2))
    if not 0 < pid < 2 ** 31:  # kill(0) would ask our own process group
        return None
    return match.group(1), pid


def describe_owner(content: str) -> str:
    """Who holds a lock, for a message."""
    owner = parse_owner(content)
    if owner is None:
        return "no valid owner (the lock holds %r, not host:pid)" % (
            content[:60],)
    return "process %d on host %s" % (owner[1], owner[0])


def owner_is_gone(identity: str) -> bool:
    """True when the lock owner ``identity`` (``host:pid``) is known to be
    dead: it ran on this host (and pid namespace) and its pid is free."""
    owner = parse_owner(identity)
    if owner is None or owner[0] != owner_identity().rpartition(":")[0]:
        return False
    return not _pid_lives(owner[1])


def owner_is_foreign(identity: str) -> bool:
    """True when the lock owner ``identity`` ran on another host (or in
    another pid namespace), where this host cannot tell whether it lives."""
    owner = parse_owner(identity)
    return (owner is not None
            and owner[0] != owner_identity().rpartition(":")[0])


class LockPolicy:
    """When a lock that another process holds may be taken over.

    - An owner on this host whose pid is free is dead: at once.
    - An owner on another host cannot be asked.  With ``private`` (the
      cache belongs to this machine alone, as in CI, where such a lock was
      left by an earlier container of the same task), at once; otherwise
      once the lock is ``grace`` seconds old.
    - Content that names no owner (garbage): once it has been garbage for
      ``GARBAGE_SETTLE`` seconds.
    - A live owner on this host is waited for, up to ``timeout`` seconds.

    ``verdict(owner, age, waited)`` is ``None`` to take over now, else the
    seconds left to wait, and whether the wait ends in a takeover (True)
    or in giving up (False).
    """

    def __init__(self, private: bool = False,
                 grace: float = DEFAULT_HTTP_TIMEOUT,
                 timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.private = private
        self.grace = grace
        self.timeout = timeout

    def verdict(self, owner: str, age: float,
                waited: float) -> tuple[float, bool] | None:
        if parse_owner(owner) is None:
            settle = GARBAGE_SETTLE - max(age, waited)
            return None if settle <= 0 else (settle, True)
        if owner_is_gone(owner):
            return None
        left = self.timeout - waited
        if owner_is_foreign(owner):
            if self.private or age >= self.grace:
                return None
            if self.grace - age < left:
                return self.grace - age, True
        return left, False


def lock_age(path: str) -> float:
    """Seconds since the lock ``path`` was taken (0 when it is gone)."""
    try:
        return max(0.0, time.time() - os.lstat(path).st_mtime)
    except FileNotFoundError:
        return 0.0


def await_lock(path: str, policy: LockPolicy, waiting: Waiting,
               poll: float = 0.2) -> str | None:
    """Wait while a live owner holds the lock ``path``.

    Returns None once the lock is free, or the owner's identity when the
    lock may be taken over (see ``LockPolicy``); the caller removes it.
    ``waiting(owner, seconds, takeover)`` is called once, before the first
    wait.  Raises ``LockTimeout`` when a live owner outlasts the policy's
    timeout.
    """
    start = time.monotonic()
    told = False
    while True:
        owner = read_lock(path)
        if owner is None:
            return None
        waited = time.monotonic() - start
        verdict = policy.verdict(owner, lock_age(path), waited)
        if verdict is None:
            return owner
        seconds, takeover = verdict
        if seconds <= 0 and not takeover:
            raise LockTimeout(path, owner, waited)
        if not told:
            waiting(owner, seconds, takeover)
            told = True
        time.sleep(poll)


def remove_lock(path: str) -> None:
    """Remove the lock ``path``, even one damaged into a directory."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)


class LockTimeout(Exception):
    def __init__(self, path: str, owner: str, waited: float) -> None:
        super().__init__("timed out after %d s waiting for lock %s held by %s"
                         % (waited, path, owner))
        self.path = path
        self.owner = owner


class PidLock:
    """An exclusive lock on ``path`` held by a live process.

    The lock is a symlink whose target is the owner's ``host:pid``, as
    Mercurial's locks are, so creating it is atomic and reading it needs no
    open file.  A lock that ``policy`` (a ``LockPolicy``) lets us take over
    is taken over; taking over goes through a second lock,
    ``path.takeover``, so two waiters never both remove the stale lock and
    both think they own it.

    ``waiting(owner, seconds, takeover)`` is called once when the lock is
    busy, so the caller can say what it waits for and for how long;
    ``taken_over(owner)``, if given, after a stale lock was removed.
    """

    def __init__(self, path: str, policy: LockPolicy,
                 waiting: Waiting | None,
                 taken_over: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.policy = policy
        self.waiting = waiting
        self.taken_over = taken_over
        self.held = False

    def acquire(self) -> PidLock:
        while not self._try():
            stale = await_lock(self.path, self.policy, self._tell_once)
            if stale is None:
                continue
            if self._take_over(stale):
                if self.taken_over:
                    self.taken_over(stale)
            else:
                time.sleep(0.05)  # another waiter is taking it over
        return self

    def _tell_once(self, owner: str, seconds: float,
                   takeover: bool) -> None:
        if self.waiting:
            self.waiting(owner, seconds, takeover)
            self.waiting = None

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> PidLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _try(self) -> bool:
        try:
            os.symlink(owner_identity(), self.path)
        except FileExistsError:
            return False
        self.held = True
        return True

    def _take_over(self, stale: str) -> bool:
        """Remove the stale lock; False when another waiter is at it."""
        guard = PidLock(self.path + ".takeover", self.policy, None)
        if not guard._try():
            owner = read_lock(guard.path)
            if owner is not None and self.policy.verdict(
                    owner, lock_age(guard.path), 0) is None:
                # The previous taker died mid-takeover, or its guard is
                # garbage: the guard is stale too.
                remove_lock(guard.path)
            return False
        try:
            if read_lock(self.path) == stale:
                remove_lock(self.path)
                return True
            return False
        finally:
            guard.release()


# Timings -----------------------------------------------------------------

class StepTimer:
    """Wall time of each named step of one run, for the JSON timings line.

    ``with timer.step("pull"):`` adds the step's seconds (a step that runs
    twice, after a restart, adds up); ``facts`` holds anything else worth
    reporting (what was cloned, the node, the outcome).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self.steps: dict[str, float] = {}
        self.facts: dict[str, Any] = {}

    def step(self, name: str) -> _Step:
        return _Step(self, name)

    def record(self, name: str, seconds: float) -> None:
        self.steps[name] = self.steps.get(name, 0.0) + seconds

    def as_dict(self) -> dict[str, Any]:
        return dict(self.facts,
                    steps={name: round(secs, 3)
                           for name, secs in self.steps.items()},
                    total=round(self._clock() - self._start, 3))

    def json_line(self, command: str) -> str:
        return json.dumps({command: self.as_dict()}, sort_keys=True)


class _Step:
    def __init__(self, timer: StepTimer, name: str) -> None:
        self.timer = timer
        self.name = name
        self.start = 0.0

    def __enter__(self) -> _Step:
        self.start = self.timer._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.record(self.name, self.timer._clock() - self.start)


# Disk --------------------------------------------------------------------

def disk_usage(*roots: str | bytes,
               counted: Iterable[tuple[int, int]] = ()) -> int:
    """Bytes allocated on disk under ``roots``, each inode counted once, so
    files hardlinked between a pool and its checkouts count once, and
    symlinks are not followed.  Inodes in ``counted``, ``(st_dev, st_ino)``
    pairs of files paid for elsewhere, count nothing."""
    seen = set(counted)
    total = 0
    stack = [os.fsdecode(root) for root in roots if os.path.lexists(root)]
    while stack:
        path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except NotADirectoryError:
            entries = []
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        except FileNotFoundError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def free_space(path: str | bytes) -> int:
    """Bytes free to an unprivileged user on the filesystem of ``path``."""
    st = os.statvfs(os.fsdecode(path))
    return st.f_bavail * st.f_frsize


def format_bytes(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            break
        count /= 1024.0
    return "%d bytes" % count if unit == "bytes" else "%.1f %s" % (count,
                                                                   unit)


# Removal -----------------------------------------------------------------

def discard(path: str | bytes) -> None:
    """Remove the tree ``path`` so that no reader ever sees half of it: it
    is first renamed to a hidden sibling (one atomic step), then deleted.
    Files that another process still has open stay readable to it."""
    path = os.fsdecode(path)
    parent, name = os.path.split(os.path.abspath(path))
    trash = os.path.join(parent, ".%s.discarded-%d-%d"
                         % (name, os.getpid(), time.monotonic_ns()))
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def discarded_leftovers(parent: str | bytes,
                        name: str | bytes) -> list[str]:
    """Hidden trees that ``discard`` or a killed clone left in ``parent``
    for the entry ``name``."""
    parent, name = os.fsdecode(parent), os.fsdecode(name)
    prefix = ".%s." % name
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return []
    return [os.path.join(parent, entry) for entry in names
            if entry.startswith(prefix)]


def abandoned_clones(parent: str | bytes, name: str | bytes) -> list[str]:
    """The partial clones ``.<name>.cloning-<pid>`` in ``parent`` (real
    directories, never symlinks) whose process is gone from this host (and
    pid namespace): a checkout killed while cloning leaves one, and the
    next holder of the lock that guards ``name`` removes it.  A partial
    whose pid lives (another cloner's, or a reused pid) stays."""
    parent, name = os.fsdecode(parent), os.fsdecode(name)
    pattern = re.compile(r"\.%s\.cloning-([0-9]{1,10})" % re.escape(name))
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return []
    gone = []
    for entry in names:
        match = pattern.fullmatch(entry)
        if match is None:
            continue
        pid = int(match.group(1))
        path = os.path.join(parent, entry)
        try:
            is_directory = stat.S_ISDIR(os.lstat(path).st_mode)
        except FileNotFoundError:
            continue
        if is_directory and 0 < pid < 2 ** 31 and pid != os.getpid() \
                and not _pid_lives(pid):
            gone.append(path)
    return gone


def _pid_lives(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
