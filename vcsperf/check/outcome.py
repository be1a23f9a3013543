"""How a feature of ``vcsperf check`` ends when it does not pass."""

import os


class Failed(Exception):
    """Something a feature promises did not hold: the feature failed."""


def command_failure(err):
    """What a failed command said, in one line."""
    lines = [line for line in (err.stderr or "").splitlines()
             if line.strip()]
    command = os.path.basename(str(err.cmd[0])) + " " + " ".join(
        str(a) for a in err.cmd[1:3])
    last = next((line for line in reversed(lines)
                 if line.startswith("abort:")), lines[-1] if lines else
                "exit %d" % err.returncode)
    return "%s ...: %s" % (command, last.strip())
