"""Metrics an alert can watch: one Prometheus text-format file per
subject (a repository whose bundles a command publishes, the URL a
checkout comes from), in the directory node_exporter's textfile collector
reads (``--collector.textfile.directory``), written by ``hg bundlegen``,
``gitbridge bundlegen``, ``hg robustcheckout`` and ``gitbridge checkout``.

The rules (Prometheus' naming conventions):

- every name starts with ``vcsperf_`` and the command
  (``vcsperf_bundlegen_``, ``vcsperf_checkout_``); times are in seconds
  (``_seconds``, ``_timestamp_seconds`` for Unix times), sizes in bytes
  (``_bytes``), counters end in ``_total``;
- labels take few values: ``vcs`` (``hg`` or ``git``), the subject
  (``repository``: a path, or a URL without its user, password and
  query: ``url_label``), and
  the names of formats, destinations, steps and outcomes, which the
  configuration and the code fix.  A revision is a label only of an
  ``_info`` gauge of value 1, one series per file;
- a file is replaced by rename, so the collector never reads half of one:
  it is written as a ``.tmp`` file beside it first (the collector reads
  only ``*.prom``);
- the file is UTF-8, and a line ends at a newline only: a byte of a path
  that is not UTF-8 (a surrogate of ``os.fsdecode``) is written as the
  text ``\\xNN`` (``printable``), and the previous file is read back split
  at newlines alone (U+2028 or a carriage return in a label is part of
  the line).

State that must outlive a run (the time of the last failure after a later
success, the run counters) is read back from the file the previous run
wrote, at most ``MAX_PREVIOUS_BYTES``: a file that is not ours, garbage,
too big, or not a regular file counts as no previous run.  Runs that end
together take turns through an flock on ``.<file>.lock`` beside the file
(``LOCK_WAIT`` seconds at most), so that each is counted.

A directory that cannot be written is refused before a command does any
work (``check_directory``: one abort).  Once the work is done, a file
that cannot be written (the disk full, the directory gone since) is a
warning: monitoring never fails the work it watches (``write_quietly``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import math
import os
import re
import stat
import tempfile
import time
from typing import Callable, Dict, Iterator, List, Mapping, Tuple

from vcsperf.core.errors import Abort

PREFIX = "vcsperf_"
#: How much of the previous file is read back; ours are a few kB.
MAX_PREVIOUS_BYTES = 1 << 20
#: How long a run waits for another's lock on the same file.
LOCK_WAIT = 10.0
#: Labels of one sample, and what ``read_previous`` keys a value by.
Labels = Dict[str, str]
SampleKey = Tuple[str, Tuple[Tuple[str, str], ...]]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"'
                         r"\s*(?:,|\Z)")


class Family:
    """One metric: its name, type (``gauge`` or ``counter``), help text,
    and samples (labels, value)."""

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        if not _NAME.match(name) or not name.startswith(PREFIX):
            raise ValueError("not a metric name of ours: %r" % name)
        if kind not in ("gauge", "counter"):
            raise ValueError("unknown metric type %r" % kind)
        if (kind == "counter") != name.endswith("_total"):
            raise ValueError("a counter, and only a counter, ends in _total")
        self.name = name
        self.kind = kind
        self.help = help_text
        self.samples: List[Tuple[Labels, float]] = []

    def add(self, value: float, labels: Mapping[str, str]) -> None:
        for label in labels:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError("not a label name: %r" % label)
        self.samples.append(({key: printable(text)
                              for key, text in labels.items()},
                             float(value)))

    def render(self) -> str:
        lines = ["# HELP %s %s" % (self.name, _escape(self.help, False)),
                 "# TYPE %s %s" % (self.name, self.kind)]
        for labels, value in self.samples:
            pairs = ",".join('%s="%s"' % (key, _escape(labels[key], True))
                             for key in sorted(labels))
            lines.append("%s%s %s" % (self.name,
                                      "{%s}" % pairs if pairs else "",
                                      _number(value)))
        return "\n".join(lines) + "\n"


def printable(text: str) -> str:
    """``text`` as valid UTF-8: a surrogate (an undecodable byte NN of
    ``os.fsdecode`` is U+DCNN) becomes the text ``\\xNN`` (``\\uNNNN`` for
    another surrogate), as ``backslashreplace`` writes it."""
    return _SURROGATE.sub(_escape_surrogate, text)


def _escape_surrogate(found: re.Match[str]) -> str:
    code = ord(found.group())
    if 0xDC80 <= code <= 0xDCFF:
        return "\\x%02x" % (code - 0xDC00)
    return "\\u%04x" % code


def url_label(url: str) -> str:
    """``url`` as a label and file name may hold it: without the user
    and password (up to the last ``@`` of the authority, where hg and git
    split them) and without a query (``?private_token=...``)."""
    if "://" not in url:
        return url  # a path: ``@`` and ``?`` are part of its names
    scheme, rest = url.split("://", 1)
    authority, slash, path = rest.partition("/")
    authority = authority.split("?", 1)[0].split("#", 1)[0]
    path, hash_, fragment = path.partition("#")
    return "%s://%s%s%s%s%s" % (scheme, authority.rpartition("@")[2], slash,
                                path.split("?", 1)[0], hash_, fragment)


def _escape(text: str, quote: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quote else text


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2 ** 53:
        return "%d" % value
    return repr(value)


def check_directory(path: str, setting: str) -> str:
    """The absolute path of the metrics directory ``path`` (named by
    ``setting`` in messages), once a file could be made in it; else one
    Abort.  A symlink to a directory is followed, as the collector
    follows it."""
    path = os.path.abspath(os.path.expanduser(path))
    hint = ("give a directory this user can write, such as the one "
            "node_exporter's --collector.textfile.directory names")
    if not os.path.isdir(path):
        reason = ("no such directory" if not os.path.lexists(path)
                  else "not a directory")
        raise Abort("cannot write metrics to %s (%s): %s"
                    % (path, setting, reason), hint=hint)
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".vcsperf-probe-",
                                     suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise Abort("cannot write metrics to %s (%s): %s"
                    % (path, setting, err.strerror or err), hint=hint)
    return path


def file_name(command: str, subject: str) -> str:
    """The file of ``command``'s metrics about ``subject``: readable, and
    unique per subject (two repositories of one name are two files)."""
    base = re.sub(r"\.git\Z", "", subject.rstrip("/").rsplit("/", 1)[-1])
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", base)[:40].strip("_") or "root"
    digest = hashlib.sha256(subject.encode("utf-8", "surrogateescape"))
    return "%s%s_%s_%s.prom" % (PREFIX, command, slug,
                                digest.hexdigest()[:12])


def read_previous(path: str) -> Dict[SampleKey, float]:
    """The samples of the file a previous run wrote at ``path``, by
    (name, sorted labels); empty when there is none we can use."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}  # none yet, a symlink, unreadable: a first run
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        data = os.read(fd, MAX_PREVIOUS_BYTES + 1)
    except OSError:
        return {}
    finally:
        os.close(fd)
    if len(data) > MAX_PREVIOUS_BYTES:
        return {}
    samples: Dict[SampleKey, float] = {}
    # "\n" alone ends a line of the format; splitlines() would also split
    # at U+2028, U+0085 or "\r" inside a label value.
    for line in data.decode("utf-8", "replace").split("\n"):
        found = _SAMPLE.match(line)
        if not found or not found.group(1).startswith(PREFIX):
            continue
        labels = _parse_labels(found.group(2) or "")
        try:
            value = float(found.group(3))
        except ValueError:
            continue
        if labels is not None and math.isfinite(value):
            samples[(found.group(1), tuple(sorted(labels.items())))] = value
    return samples


def _parse_labels(text: str) -> Labels | None:
    labels: Labels = {}
    position = 0
    while position < len(text):
        found = _LABEL_PAIR.match(text, position)
        if not found:
            return None
        labels[found.group(1)] = re.sub(
            r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1),
            found.group(2))
        position = found.end()
    return labels


def write(path: str, families: List[Family]) -> None:
    """Replace the file ``path`` by one holding ``families``: written
    beside it, then renamed over it (a symlink there is replaced, not
    followed)."""
    text = "".join(family.render() for family in families)
    folder, name = os.path.split(path)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".%s." % name,
                                suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            os.fchmod(fh.fileno(), 0o644)  # the collector runs as another user
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


class Report:
    """The metrics of one run of ``command`` about ``subject``, written to
    ``directory``: the families the command adds, then, from ``finish``,
    those every command has (when it last succeeded and failed, how long
    the run took, the runs counted by outcome), the older ones read back
    from the previous file.  ``labels`` (``vcs`` and the subject's label)
    go on every sample."""

    def __init__(self, directory: str, command: str, subject: str,
                 labels: Mapping[str, str]) -> None:
        self.path = os.path.join(directory, file_name(command, subject))
        self.prefix = "%s%s_" % (PREFIX, command)
        self.labels = {key: printable(text) for key, text in labels.items()}
        self.families: Dict[str, Family] = {}
        self.started = time.monotonic()

    def set(self, name: str, value: float, help_text: str,
            kind: str = "gauge", **labels: str) -> None:
        """Add a sample of the family ``<prefix><name>``."""
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = Family(self.prefix + name, kind,
                                                  help_text)
        family.add(value, dict(self.labels, **labels))

    def finish(self, outcome: str, now: float | None = None) -> None:
        """Write the file of a run that ended with ``outcome``
        (``success`` or ``failure``), holding the file's lock (see
        ``_locked``) from reading the previous file to the rename."""
        with _locked(self.path):
            self._finish(outcome, time.time() if now is None else now)

    def _finish(self, outcome: str, now: float) -> None:
        previous = read_previous(self.path)

        def before(name: str, **labels: str) -> float | None:
            key = tuple(sorted(dict(self.labels, **labels).items()))
            return previous.get((self.prefix + name, key))

        for what in ("success", "failure"):
            name = "last_%s_timestamp_seconds" % what
            value = now if what == outcome else before(name)
            if value is not None:
                self.set(name, value, "Unix time at which the last run "
                         "that ended in %s ended" % what)
        self.set("last_run_success", 1 if outcome == "success" else 0,
                 "1 if the last run succeeded, else 0")
        if "last_run_duration_seconds" not in self.families:
            self.set("last_run_duration_seconds",
                     time.monotonic() - self.started,
                     "Seconds the last run took")
        for what in ("success", "failure"):
            count = before("runs_total", outcome=what) or 0
            self.set("runs_total", count + (what == outcome), "Runs "
                     "recorded in this file, by outcome", kind="counter",
                     outcome=what)
        write(self.path, [self.families[name]
                          for name in sorted(self.families)])


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside ``path`` (an flock, gone with the
    process), so that runs ending together (checkouts of one URL in
    parallel CI tasks) count each other's runs.  Waits at most
    ``LOCK_WAIT`` seconds, then writes without it: a count may then miss
    a run, but monitoring never holds up the work.  A lock file that is
    not a regular file (a symlink planted there) is not used."""
    folder, name = os.path.split(path)
    try:
        fd = os.open(os.path.join(folder, ".%s.lock" % name),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                     0o644)
    except OSError:
        yield
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            deadline = time.monotonic() + LOCK_WAIT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
        yield
    finally:
        os.close(fd)


class BundlegenReport(Report):
    """The metrics file of a run of ``hg bundlegen`` or ``gitbridge
    bundlegen`` about the repository at ``path`` (``vcs``: ``hg`` or
    ``git``): one set of names for both."""

    def __init__(self, directory: str, vcs: str, path: str) -> None:
        super().__init__(directory, "bundlegen", path,
                         {"vcs": vcs, "repository": path})

    def published(self, tip: str, generated: float,
                  behind: int | None) -> None:
        """The published generation: its tip, when it was made, and the
        revisions the repository has that it lacks (None: unknown)."""
        self.set("published_info", 1, "The tip of the published bundles "
                 "(value 1)", tip=tip)
        self.set("published_timestamp_seconds", generated, "Unix time at "
                 "which the published bundles were made")
        if behind is not None:
            self.set("published_behind_revisions", behind, "Changesets "
                     "(hg) or commits (git) of the repository that the "
                     "published bundles lack")

    def bundle(self, kind: str, size: int, seconds: float) -> None:
        """The published bundle of the format ``kind``."""
        self.set("bundle_size_bytes", size, "Size of the published bundle "
                 "of each format", format=kind)
        self.set("bundle_build_duration_seconds", seconds, "Seconds the "
                 "published bundle of each format took to build",
                 format=kind)

    def uploads(self, uploads: Mapping[str, Tuple[int, float]]) -> None:
        """What the run uploaded: destination -> (bytes, seconds)."""
        for name, (size, seconds) in sorted(uploads.items()):
            self.set("upload_bytes", size, "Bytes the last run uploaded to "
                     "each destination", destination=name)
            self.set("upload_duration_seconds", seconds, "Seconds the last "
                     "run took to upload to each destination",
                     destination=name)


def write_quietly(report: Report, outcome: str,
                  warn: Callable[[str], None]) -> bool:
    """``report.finish(outcome)``; a failure is ``warn``-ed in one line
    (the work it describes is done and stays done).  True if written."""
    try:
        report.finish(outcome)
        return True
    except OSError as err:
        reason = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
    except ValueError as err:  # UnicodeError: text the format cannot hold
        reason = str(err)
    warn("warning: metrics not written to %s: %s"
         % (printable(report.path), printable(reason)))
    return False
