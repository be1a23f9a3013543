"""Deadlines for Mercurial's HTTP client, which runs in our process.

A blocked read on a socket that a server trickles into never times out,
so a deadline over a whole network exchange records every HTTP(S)
connection Mercurial opens in it and shuts their sockets down when the
deadline passes: the read then fails as a cut stream, through
Mercurial's own error handling.  SSH peers are processes and are not
reached.
"""

import contextlib
import threading

from mercurial import extensions, url as urlmod

from vcsperf.core import pooling


@contextlib.contextmanager
def recording_connections(record):
    """Hand ``record`` every HTTP(S) connection Mercurial makes in the
    block, as it starts to connect (so that an interrupt reaches a TLS
    handshake too)."""
    def connect(orig, connection):
        record(connection)
        return orig(connection)

    classes = [urlmod.httpconnection]
    if urlmod.has_https:
        classes.append(urlmod.httpsconnection)
    for cls in classes:
        extensions.wrapfunction(cls, 'connect', connect)
    try:
        yield
    finally:
        for cls in classes:
            extensions.unwrapfunction(cls, 'connect', connect)


class Connections:
    """The connections of a run, and the interrupt that cuts them."""

    def __init__(self):
        self._connections = []
        self._lock = threading.Lock()

    def record(self, connection):
        with self._lock:
            self._connections.append(connection)

    def cut(self):
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            sock = connection.sock
            if sock is not None:
                pooling.shut_down(sock)


@contextlib.contextmanager
def deadline(seconds):
    """Run the block with its HTTP(S) connections cut once it has run
    ``seconds``; yields the ``pooling.StepDeadline``, whose ``expired``
    says whether it passed."""
    connections = Connections()
    with recording_connections(connections.record), \
            pooling.StepDeadline(seconds) as step, \
            step.watching(connections.cut):
        yield step
