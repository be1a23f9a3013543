"""What ``vcsperf check`` shows: its report lines on stdout, and on stderr
the progress of the steps running, with the time the run has left."""

import contextlib
import shutil
import sys
import threading
import time


def duration(seconds):
    """``seconds`` as people read them: 42s, 3m05s, 2h10m."""
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
            " ETA %s" % duration(elapsed * (total - done) / done)
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
                "%s  %s  %s" % (task.label, duration(now - task.start),
                                task.detail)
                for task in list(self._tasks.values()))
            if self.expected_end is not None:
                line += "  (run: about %s left)" % duration(
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
