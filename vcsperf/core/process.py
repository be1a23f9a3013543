"""Finding and running the real ``hg`` and ``git`` binaries: the one
subprocess runner of the adapters' command-line tools, the harness, the
benchmarks and the check, but for ``spawn.git_bytes`` (Git's quick
lookups, its ``commit-msg`` hook and git config reads, which cannot
afford this module's imports).  Git runs one way, ``git``."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from vcsperf.core.errors import Abort

if TYPE_CHECKING:  # annotations only: running a command needs no pool
    from vcsperf.core.pooling import StepDeadline

#: What a command's output is read as, line by line or piece by piece.
Listener = Optional[Callable[[str], None]]
#: The argument list of a command: program, then its arguments.
Args = Sequence[str]
#: A command's environment; None: this process's.
Env = Optional[Mapping[str, str]]


def executable(name: str) -> str:
    """Path of ``name``, preferring the one installed beside this Python
    (the virtualenv's ``hg``) over the one on PATH."""
    search = os.pathsep.join([os.path.dirname(sys.executable),
                              os.environ.get("PATH", "")])
    path = shutil.which(name, path=search)
    if path is None:
        raise RuntimeError("%s is not installed (looked beside %s and on "
                           "PATH)" % (name, sys.executable))
    return path


class CommandError(subprocess.CalledProcessError):
    """A failed command; its message ends with what it wrote to stderr."""

    def __str__(self) -> str:
        return "%s\n%s" % (super().__str__(), self.stderr)


def completed(args: Args, env: Env, cwd: str | None = None,
              input: str | None = None, on_line: Listener = None,
              on_progress: Listener = None,
              deadline: StepDeadline | None = None,
              ) -> subprocess.CompletedProcess[str]:
    """Run a command to its end, whatever its exit status: the
    ``CompletedProcess``, with stdout and stderr as text (UTF-8; bytes
    that are not, such as a server's ref name in Latin-1, are replaced,
    never a UnicodeDecodeError).

    ``input`` is text for its stdin.  ``on_line`` gets each line of
    stdout as it comes; ``on_progress`` each piece of stderr that ends in
    a carriage return (a progress bar redrawn in place), which is then left
    out of ``stderr``.  With either callback there is no ``input``.

    ``deadline``, a ``pooling.StepDeadline``, ends the command when it
    passes (see ``_completed_by``); it goes with neither callback."""
    if deadline is not None:
        if on_line is not None or on_progress is not None:
            raise TypeError("a deadline goes with neither on_line nor "
                            "on_progress")
        return _completed_by(args, env, cwd, input, deadline)
    if on_line is None and on_progress is None:
        return subprocess.run(args, env=env, cwd=cwd, input=input,
                              capture_output=True, encoding="utf-8",
                              errors="replace")
    if input is not None:
        raise TypeError("input goes with neither on_line nor on_progress")
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    messages: list[str] = []
    reader = threading.Thread(target=_read_stderr,
                              args=(proc.stderr, messages, on_progress),
                              daemon=True)
    reader.start()
    out: list[str] = []
    try:
        with io.TextIOWrapper(proc.stdout, encoding="utf-8",
                              errors="replace") as lines:
            for line in lines:
                out.append(line)
                if on_line:
                    on_line(line)
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        reader.join()
        proc.stderr.close()
    return subprocess.CompletedProcess(args, proc.returncode, "".join(out),
                                       "".join(messages))


def _completed_by(args: Args, env: Env, cwd: str | None,
                  input: str | None, deadline: StepDeadline,
                  ) -> subprocess.CompletedProcess[str]:
    """``completed`` for a command that must end by ``deadline``.  It runs
    in a process group of its own, so that its children (git's
    ``git-remote-https``, ``index-pack``), which hold its output pipes
    too, end with it: at the deadline the group gets SIGTERM (git then
    removes its lock files and temporary packs), at the deadline's later
    interrupts SIGKILL.  Leaving early (Ctrl-C) kills the group too."""
    proc = subprocess.Popen(args, env=env, cwd=cwd, encoding="utf-8",
                            errors="replace",
                            stdin=subprocess.DEVNULL if input is None
                            else subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    signals = [signal.SIGTERM]

    def interrupt() -> None:
        _signal_group(proc, signals.pop() if signals else signal.SIGKILL)

    try:
        with deadline.watching(interrupt):
            out, err = proc.communicate(input)
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _signal_group(proc: subprocess.Popen[str], signum: int) -> None:
    """Send ``signum`` to the process group ``proc`` leads, unless
    ``proc`` has been waited for (its group id may be reused then)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass


def _read_stderr(stream: io.BufferedReader, messages: list[str],
                 on_progress: Listener) -> None:
    """Lines end in "\\n"; what ends in "\\r" goes to ``on_progress``."""
    pending = b""
    for block in iter(lambda: stream.read1(4096), b""):
        pending += block
        while True:
            cut = min((i for i in (pending.find(b"\r"), pending.find(b"\n"))
                       if i >= 0), default=-1)
            if cut < 0:
                break
            text = pending[:cut].decode("utf-8", "replace")
            if pending[cut:cut + 1] == b"\n":
                messages.append(text + "\n")
            elif on_progress and text.strip():
                on_progress(text.strip())
            pending = pending[cut + 1:]
    if pending:
        messages.append(pending.decode("utf-8", "replace"))


def run(args: Args, env: Env, cwd: str | None = None, check: bool = True,
        input: str | None = None, on_line: Listener = None,
        on_progress: Listener = None,
        deadline: StepDeadline | None = None) -> str:
    """Run a command (see ``completed``), returning its stdout as text; on
    failure raise ``CommandError`` (unless ``check`` is false)."""
    proc = completed(args, env, cwd, input, on_line, on_progress, deadline)
    if check and proc.returncode != 0:
        raise CommandError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc.stdout


def git(*args: str, cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        deadline: StepDeadline | None = None,
        input: str | None = None) -> str:
    """Run ``git ARGS`` in ``env`` (default: this process's), never
    prompting for credentials, ended by ``deadline`` (see ``completed``),
    with ``input`` on its stdin:
    its stdout, or ``CommandError`` with its stderr (``git_abort`` makes
    that the user's error).  Always in the C locale: callers parse what
    git prints, its messages too (a transient network failure is known
    by its words), and a user's locale would translate them."""
    return run(["git", *args], dict(env or os.environ,
                                    GIT_TERMINAL_PROMPT="0", LC_ALL="C"),
               cwd=cwd, deadline=deadline, input=input)


def git_abort(failure: CommandError) -> Abort:
    """The user's error for a failed ``git``: the command, its exit
    status and the reason from what it wrote to stderr: its first
    ``fatal:`` or ``error:`` line, else its last line (lines before are
    progress and context; after a ``fatal:`` line git may add advice,
    whose last line, "and the repository exists.", says nothing)."""
    lines = failure.stderr.strip().splitlines() or [""]
    reason = next((line for line in lines
                   if line.startswith(("fatal: ", "error: "))), lines[-1])
    return Abort("git %s failed (%d): %s"
                 % (" ".join(failure.cmd[1:3]), failure.returncode, reason),
                 hint="git's reason is shown; run the command again with "
                 "GIT_TRACE=1 for the rest")


def hg_output(repo_path: str, *args: str, env: Env = None) -> str:
    """The output of ``hg -R REPO_PATH ARGS`` in ``env`` (default: this
    process's) with ``HGPLAIN``; ``Abort`` with what hg wrote to stderr
    when it fails."""
    env = dict(env or os.environ, HGPLAIN="1")
    try:
        return run([executable("hg"), "-R", repo_path, *args], env)
    except CommandError as err:
        raise Abort("hg failed: %s" % err.stderr.strip())
