"""An ``ssh`` stand-in for tests: it runs the remote command locally,
records what the server sends and can cut it short.  (The HTTP servers
and proxies of the tests are ``vcsperf.harness.servers`` and
``vcsperf.harness.proxies``.)
"""

import os
import sys

SSH_WRAPPER = r'''#!%(python)s
"""Stands in for ssh: runs the remote command (the last argument) here,
copies what the server sends into $VCSPERF_SSH_RECORD when set, and kills
the server after it has sent $VCSPERF_SSH_CUT bytes when set."""
import os, subprocess, sys
server = subprocess.Popen(sys.argv[-1], shell=True, stdout=subprocess.PIPE)
record = os.environ.get("VCSPERF_SSH_RECORD")
record = open(record, "wb") if record else None
left = int(os.environ.get("VCSPERF_SSH_CUT") or -1)
out = sys.stdout.buffer
while left:
    data = os.read(server.stdout.fileno(), 65536 if left < 0 else min(left, 65536))
    if not data:
        break
    left -= len(data) if left > 0 else 0
    out.write(data)
    out.flush()
    if record:
        record.write(data)
if not left:
    server.kill()
sys.exit(server.wait() if left else 255)
'''


def write_ssh_wrapper(path):
    """Write the ``ssh`` stand-in to ``path``; use it as ``ui.ssh``."""
    with open(path, "w") as fh:
        fh.write(SSH_WRAPPER % {"python": sys.executable})
    os.chmod(path, 0o755)
    return path
