"""Finding and running the real ``hg`` and ``git`` binaries: the one
subprocess runner of the adapters' command-line tools, the harness, the
benchmarks and the check, but for ``spawn.git_bytes`` (Git's quick
lookups, which cannot afford this module's imports)."""

import io
import os
import shutil
import signal
import subprocess
import sys
import threading

from vcsperf.core.errors import Abort


def executable(name):
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

    def __str__(self):
        return "%s\n%s" % (super().__str__(), self.stderr)


def completed(args, env, cwd=None, input=None, on_line=None,
              on_progress=None, deadline=None):
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
    messages = []
    reader = threading.Thread(target=_read_stderr,
                              args=(proc.stderr, messages, on_progress),
                              daemon=True)
    reader.start()
    out = []
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


def _completed_by(args, env, cwd, input, deadline):
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

    def interrupt():
        _signal_group(proc, signals.pop() if signals else signal.SIGKILL)

    try:
        with deadline.watching(interrupt):
            out, err = proc.communicate(input)
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _signal_group(proc, signum):
    """Send ``signum`` to the process group ``proc`` leads, unless
    ``proc`` has been waited for (its group id may be reused then)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass


def _read_stderr(stream, messages, on_progress):
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


def run(args, env, cwd=None, check=True, input=None, on_line=None,
        on_progress=None, deadline=None):
    """Run a command (see ``completed``), returning its stdout as text; on
    failure raise ``CommandError`` (unless ``check`` is false)."""
    proc = completed(args, env, cwd, input, on_line, on_progress, deadline)
    if check and proc.returncode != 0:
        raise CommandError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc.stdout


def git(*args, cwd=None, env=None, deadline=None):
    """Run ``git ARGS`` in ``env`` (default: this process's), never
    prompting for credentials and speaking English (callers read its
    messages), ended by ``deadline`` (see ``completed``): its stdout, or
    ``CommandError`` with its stderr."""
    return run(["git", *args], dict(env or os.environ,
                                    GIT_TERMINAL_PROMPT="0", LC_ALL="C"),
               cwd=cwd, deadline=deadline)


def git_output(repo_path, *args):
    """The output of ``git ARGS`` run in ``repo_path``; ``Abort`` with
    what git wrote to stderr when it fails."""
    try:
        return run(["git", *args], None, cwd=repo_path)
    except CommandError as err:
        raise Abort("git %s failed: %s" % (args[0], err.stderr.strip()))


def hg_output(repo_path, *args, env=None):
    """The output of ``hg -R REPO_PATH ARGS`` in ``env`` (default: this
    process's) with ``HGPLAIN``; ``Abort`` with what hg wrote to stderr
    when it fails."""
    env = dict(env or os.environ, HGPLAIN="1")
    try:
        return run([executable("hg"), "-R", repo_path, *args], env)
    except CommandError as err:
        raise Abort("hg failed: %s" % err.stderr.strip())
