"""Whether published clone bundles are fresh: what ``hg bundlegen
--check-fresh`` and ``gitbridge bundlegen --check-fresh`` share.

Published bundles are stale when the repository has moved more than
``max_behind`` changesets or commits past their tip, when it has moved at
all and they are older than ``max_age`` seconds (a repository that has
not moved keeps its bundles however old), or when a URL clients are sent
to does not answer a HEAD with the object published (gone, another size,
an error, redirects without end).  Each request waits at most
``REQUEST_TIMEOUT`` seconds for each connect and read and follows at most
``MAX_REDIRECTS`` redirects; all of them together take at most
``TOTAL_TIMEOUT`` seconds (``--check-timeout``), however a server stalls or trickles (a
``bundlestore.Deadline``).  The verdict is one line.
"""

from __future__ import annotations

import http.client
import os
import stat
import time
import urllib.parse
from typing import Iterable, Optional, Tuple

from vcsperf.core import bundlestore
from vcsperf.core.errors import Abort

#: The thresholds' defaults: two days (bundles are built daily) and a
#: thousand changesets or commits.
DEFAULT_MAX_AGE = 2 * 86400
DEFAULT_MAX_BEHIND = 1000
REQUEST_TIMEOUT = 10
TOTAL_TIMEOUT = 60
MAX_REDIRECTS = 5
#: More URLs than this is no list a bundlegen wrote.
MAX_URLS = 1000
#: A URL and the size its object must have (None: not known).
Published = Tuple[str, Optional[int]]


def staleness(generated: float, behind: int, max_age: float,
              max_behind: int, now: float | None = None) -> str | None:
    """Why bundles generated at Unix time ``generated``, ``behind``
    changesets or commits behind the repository, are stale; None if not."""
    age = _age(generated, now)
    if behind > max_behind:
        return "%d behind the repository (--max-behind %d)" % (behind,
                                                                max_behind)
    if behind and age > max_age:
        return "%s old and the repository moved %d past them " \
            "(--max-age %d)" % (describe_age(age), behind, int(max_age))
    return None


def age(generated: float) -> float:
    """Seconds since the Unix time ``generated``."""
    return _age(generated, None)


def _age(generated: float, now: float | None) -> float:
    return (time.time() if now is None else now) - generated


def describe_age(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return "%.1f days" % (seconds / 86400)
    if seconds >= 2 * 3600:
        return "%.1f hours" % (seconds / 3600)
    return "%d seconds" % max(seconds, 0)


def missing(published: Iterable[Published],
            total: float = TOTAL_TIMEOUT) -> str | None:
    """One line naming the first URL that does not hold its object, or
    None when every one does; all within ``total`` seconds, each connect
    and read within ``REQUEST_TIMEOUT`` (or ``total`` if less)."""
    objects = list(published)
    if len(objects) > MAX_URLS:
        return "%d URLs are published, more than the %d checked" % (
            len(objects), MAX_URLS)
    try:
        with bundlestore.Deadline(total, "--check-timeout"):
            for url, size in objects:
                problem = check_url(url, size, min(REQUEST_TIMEOUT, total))
                if problem:
                    return problem
    except Abort:
        return "the URLs did not all answer within %g s (--check-timeout)" \
            % total
    return None


def check_url(url: str, size: int | None,
              timeout: float = REQUEST_TIMEOUT) -> str | None:
    """Why ``url`` does not hold an object of ``size`` bytes, or None."""
    seen = [url]
    current = url
    while True:
        parts = urllib.parse.urlsplit(current)
        scheme = parts.scheme.lower()
        if scheme == "file":
            return _check_file(url, urllib.parse.unquote(parts.path), size)
        if scheme not in ("http", "https") or not parts.hostname:
            return "%s cannot be checked: not an http, https or file URL" \
                % _shown(url)
        try:
            status, length, location = _head(parts, timeout)
        except (OSError, http.client.HTTPException, ValueError) as err:
            return "%s cannot be reached: %s" % (
                _shown(current), " ".join(str(err).split())
                or type(err).__name__)
        if status in (301, 302, 303, 307, 308) and location:
            current = urllib.parse.urljoin(current, location)
            if current in seen:
                return "%s redirects in a loop" % _shown(url)
            if len(seen) > MAX_REDIRECTS:
                return "%s redirects more than %d times" % (_shown(url),
                                                          MAX_REDIRECTS)
            seen.append(current)
            continue
        if status != 200:
            return "%s answers HTTP %d" % (_shown(current), status)
        if size is not None and length is not None and length != size:
            return "%s is %d bytes, the published bundle %d" % (
                _shown(current), length, size)
        return None


def _head(parts: urllib.parse.SplitResult, timeout: float,
          ) -> tuple[int, int | None, str | None]:
    """Status, Content-Length and Location of a HEAD of ``parts``."""
    kind = (http.client.HTTPSConnection if parts.scheme.lower() == "https"
            else http.client.HTTPConnection)
    connection = kind(parts.hostname or "", parts.port,
                      timeout=timeout)
    try:
        target = (parts.path or "/") + ("?" + parts.query
                                        if parts.query else "")
        connection.request("HEAD", target, headers={
            "User-Agent": "vcsperf-check-fresh"})
        answer = connection.getresponse()
        length = answer.getheader("Content-Length")
        number = (int(length) if length and length.strip().isdigit()
                  else None)
        return answer.status, number, answer.getheader("Location")
    finally:
        connection.close()


def _check_file(url: str, path: str, size: int | None) -> str | None:
    try:
        found = os.stat(path)
    except OSError as err:
        return "%s: %s" % (_shown(url), err.strerror)
    if not stat.S_ISREG(found.st_mode):
        return "%s is not a file" % _shown(url)
    if size is not None and found.st_size != size:
        return "%s is %d bytes, the published bundle %d" % (
            _shown(url), found.st_size, size)
    return None


def _shown(url: str) -> str:
    """``url`` for a message: no user or password, at most 200
    characters, nothing unprintable."""
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        url = urllib.parse.urlunsplit(parts._replace(
            netloc=parts.netloc.rsplit("@", 1)[1]))
    shown = ascii(url)[1:-1]
    return shown if len(shown) <= 200 else shown[:197] + "..."
