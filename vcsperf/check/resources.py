"""What a run of ``vcsperf check`` uses of the machine: the scratch disk
it takes (``DiskWatch``), the peak memory of its processes, and who may
run now when two features share the two cores (``Machine``)."""

import contextlib
import resource
import threading
import time

from vcsperf.core import pooling


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


def peak_child_rss():
    """Bytes of the largest resident memory of any process the run
    started, so far."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def peak_runner_rss():
    """Bytes of the runner's own largest resident memory, so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
