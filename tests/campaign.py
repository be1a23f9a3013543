"""The adversarial campaign's shared parts: how big a run is, its seed,
killing a command at a seeded moment, and running a crafted input under
an address-space limit and a timeout.

The fast campaign runs with the rest of the suite (and alone with
``pytest -m campaign``).  The full one is the same tests, larger::

    VCSPERF_CAMPAIGN=full VCSPERF_CAMPAIGN_REPORT=campaign.json \\
        .venv/bin/python -m pytest -m campaign

``VCSPERF_CAMPAIGN_SEED=N`` replays a run: every test prints the seed
and the number of cases it tried, and pytest shows that output beside a
failure.  Each test counts its cases in the ``tally`` fixture; the
counts are printed at the end of the run and written to
``$VCSPERF_CAMPAIGN_REPORT`` when it is set.
"""

import os
import random
import signal
import subprocess
import time

FULL = os.environ.get("VCSPERF_CAMPAIGN") == "full"

# A fast run is the same every time, so CI is reproducible; a full run
# draws a new seed unless one is given, so it keeps finding new cases.
_FIXED_SEED = 20261123


def size(fast, full):
    """How many cases a test tries: ``fast`` in CI, ``full`` on demand."""
    return full if FULL else fast


#: Characters a URL may not carry as they are: controls, spaces, delimiters
#: and non-ASCII.
URL_HOSTILE = " \t\x0b\x0c\x01\x7f%?#\"<>\\^`{|}\u00e9\u2028"


def hostile_url(rng, plain="aZ09/:.-"):
    """An http URL with up to 8 characters drawn from ``URL_HOSTILE`` and
    ``plain``, and one more of ``URL_HOSTILE`` (not ``%``) somewhere among
    them; it ends with a letter, because hg strips whitespace around a
    ``--config`` value."""
    chars = [rng.choice(URL_HOSTILE + plain)
             for _ in range(rng.randint(0, 8))]
    chars.insert(rng.randint(0, len(chars)),
                 rng.choice(URL_HOSTILE.replace("%", "")))
    return "http://cdn.example.com/" + "".join(chars) + "x"


def seed():
    given = os.environ.get("VCSPERF_CAMPAIGN_SEED")
    if given:
        return int(given)
    return random.SystemRandom().randrange(2 ** 32) if FULL else _FIXED_SEED


class Tally:
    """The cases one campaign test tried, and those that failed."""

    def __init__(self, name, seed):
        self.name = name
        self.seed = seed
        self.rng = random.Random(seed)
        self.tried = 0
        self.failures = []

    def case(self, ok, what):
        """Count one case; ``what`` names it in the report if it failed."""
        self.tried += 1
        if not ok:
            self.failures.append(what)

    def check(self):
        """Fail the test, naming every failed case, if there was one."""
        assert not self.failures, "%s (seed %d): %d of %d cases failed: %r" % (
            self.name, self.seed, len(self.failures), self.tried,
            self.failures)

    def as_dict(self):
        return {"test": self.name, "seed": self.seed, "tried": self.tried,
                "survived": self.tried - len(self.failures),
                "failures": self.failures}


def kill_after(argv, env, delay, cwd=None):
    """Run ``argv`` in its own process group and SIGKILL the whole group
    (children such as ``hg bundle`` too) after ``delay`` seconds.  True
    if the signal came before the command ended by itself."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + delay
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.wait() == -signal.SIGKILL


def run_bounded(argv, env=None, cwd=None, address_space=2 << 30, timeout=120,
                input=None):
    """Run ``argv`` with its address space limited to ``address_space``
    bytes; a run over ``timeout`` seconds raises ``TimeoutExpired``.
    Returns the CompletedProcess (text)."""
    # prlimit(1) sets the limit in the child it starts: a preexec_fn runs
    # Python between fork and exec, which is unsafe in this threaded
    # process (the servers of the fixtures run in threads).
    return subprocess.run(
        ["prlimit", "--as=%d" % address_space, "--"] + [str(a) for a in argv],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        input=input)


def is_clean_abort(proc):
    """True when a command failed the way users are promised: exit 255,
    no traceback, and its error is one ``abort:`` line (a hint in
    parentheses may follow)."""
    abort_lines = [line for line in proc.stderr.splitlines()
                   if line.startswith("abort: ")]
    return (proc.returncode == 255 and "Traceback" not in proc.stderr
            and len(abort_lines) == 1)
