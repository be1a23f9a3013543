"""The adversarial campaign for ``gitbridge pack-cache``, run as git runs
the hook (``HOOK git pack-objects ARGS`` in the repository, the rev list
on stdin) and behind the real ``git http-backend``:

- entries truncated, corrupted or swapped behind its back: found by their
  digest before any byte is sent, removed, the pack made again; a fetch
  through the server still gets a pack ``git fsck`` accepts;
- the cache directory deleted, or a file in its place: the pack is made
  as without the hook;
- a pack larger than ``--max-size``: sent whole, never stored;
- a client that goes away mid-pack: the entry is still finished whole;
- a writer that stalls: a request waits ``--wait`` seconds, then makes
  its own pack; a writer killed mid-pack stores nothing and holds no key;
- ``git repack -a -d`` (a stock git rewriting the repository's packs)
  between requests: the stored pack still serves;
- hostile command lines: anything but ``git pack-objects`` refused with
  one ``abort:`` line and nothing run; options upload-pack never sends,
  a ``--shallow-file`` that is a directory or missing: run as they are,
  nothing stored; bad option values: one ``abort:`` line.
"""

import glob
import os
import shutil
import signal
import subprocess
import time

import pytest

from test_gitbridge_packcache import Served, fetch_all
from vcsperf.core import responsecache
from vcsperf.harness import tools
from vcsperf.harness.servers import GitServer

pytestmark = pytest.mark.campaign

PACK = ["git", "pack-objects", "--revs", "--thin", "--stdout",
        "--delta-base-offset"]


@pytest.fixture
def served(git, real_git_repo, real_git_before_push, tmp_path):
    served = Served(git, real_git_repo, real_git_before_push, tmp_path)
    served.early = served.client("early")
    served.push_new()
    served.stdin = ("%s\n--not\n%s\n\n" % (served.head, served.base)
                    ).encode()
    return served


def hook(served, env, command=PACK, options=(), stdin=None, **kwargs):
    return subprocess.run(
        [tools.executable("gitbridge"), "pack-cache", "--dir",
         str(served.cache), *options, *command],
        input=served.stdin if stdin is None else stdin,
        capture_output=True, cwd=served.srv, env=env, **kwargs)


def plain(served, env, command=PACK):
    return subprocess.run(command, input=served.stdin, capture_output=True,
                          cwd=served.srv, env=env)


def entries(served):
    return glob.glob(str(served.cache / "entries" / "*" / "*"))


def test_entries_changed_behind_its_back_are_never_sent(served, env, git,
                                                        gitbridge, tally):
    first = hook(served, env)
    assert first.returncode == 0 and first.stdout[:4] == b"PACK"
    [entry] = entries(served)
    size = os.path.getsize(entry)
    damages = {
        "truncated": lambda fh: fh.truncate(size // 2),
        "a byte flipped": lambda fh: (fh.seek(size // 3),
                                      fh.write(b"\xff\x00")),
        "the trailer's digest": lambda fh: (
            fh.seek(size - responsecache.TRAILER_SIZE + 16),
            fh.write(b"\0" * 8)),
        "emptied": lambda fh: fh.truncate(0),
    }
    for what, damage in damages.items():
        with open(entry, "r+b") as fh:
            damage(fh)
        again = hook(served, env)
        # made again, and stored again whole
        tally.case(again.returncode == 0 and again.stdout == first.stdout
                   and os.path.getsize(entry) == size, what)
    # swapped for a link to a file outside: never followed
    outside = served.tmp / "outside"
    outside.write_bytes(b"not a pack")
    os.unlink(entry)
    os.symlink(outside, entry)
    again = hook(served, env)
    tally.case(again.stdout == first.stdout
               and outside.read_bytes() == b"not a pack", "a symlink")
    tally.check()

    # through the server: a corrupt entry, then a fetch that fsck accepts
    with open(entry, "r+b") as fh:
        fh.seek(100)
        fh.write(b"corrupt")
    with GitServer(served.root) as server:
        fetch_all(env, [served.early], server.url + "srv.git")
    git("-C", served.early, "fsck", "--no-progress")
    assert git("-C", served.early, "rev-parse", "main").strip() \
        == served.head


def clear(path):
    if path.is_dir():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def test_an_unusable_cache_steps_aside(served, env, tally):
    expected = plain(served, env)
    assert expected.returncode == 0
    cases = {
        "deleted": lambda: shutil.rmtree(served.cache, ignore_errors=True),
        "a file": lambda: served.cache.write_bytes(b"in the way"),
        "entries a file": lambda: (served.cache.mkdir(),
                                   (served.cache / "entries").write_text(
                                       "x"),
                                   (served.cache / "tmp").write_text("x")),
    }
    for what, make in cases.items():
        clear(served.cache)
        make()
        got = hook(served, env)
        # a pack of the same objects, whatever the compression
        tally.case(got.returncode == 0 and got.stdout[:4] == b"PACK"
                   and got.stdout[8:12] == expected.stdout[8:12], what)
    tally.check()
    # deleted behind its back after it was filled: made again
    clear(served.cache)
    assert hook(served, env).returncode == 0 and len(entries(served)) == 1
    shutil.rmtree(served.cache)
    assert hook(served, env).returncode == 0 and len(entries(served)) == 1


def test_oversized_packs_go_through_unstored(served, env, git, gitbridge):
    whole = ("%s\n--not\n\n" % served.head).encode()
    for _ in range(2):
        got = hook(served, env, options=["--max-size", "1m"], stdin=whole)
        assert got.returncode == 0 and len(got.stdout) > (1 << 20)
        assert [e for e in entries(served) if not e.endswith(".large")] \
            == []
    client = served.tmp / "fromscratch"
    git("init", "-q", "--bare", client)
    subprocess.run(["git", "-C", str(client), "index-pack", "--stdin"],
                   input=got.stdout, env=env, check=True,
                   capture_output=True)
    stats = served.stats(gitbridge)
    assert (stats["hits"], stats["misses"], stats["uncached"]) == (0, 0, 2)


def test_a_client_that_goes_away_leaves_a_whole_entry(served, env, git):
    # the hook's stdout closed after a few bytes, as when upload-pack's
    # client hangs up
    reader = subprocess.Popen(["head", "-c", "100"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL)
    cut = subprocess.run(
        [tools.executable("gitbridge"), "pack-cache", "--dir",
         str(served.cache), *PACK], input=served.stdin, cwd=served.srv,
        env=env, stdout=reader.stdin, stderr=subprocess.PIPE, timeout=120)
    reader.stdin.close()
    reader.wait()
    assert cut.returncode != 0 and b"Traceback" not in cut.stderr
    again = hook(served, env)
    assert again.returncode == 0
    [entry] = entries(served)
    with open(entry, "rb") as fh:
        stored = fh.read()
    assert stored[len(responsecache.HEAD_MAGIC):][:len(again.stdout)] \
        == again.stdout
    # a stock git rewriting the repository's packs: the stored pack
    # still serves
    git("-C", served.srv, "repack", "-a", "-d", "-q")
    assert hook(served, env).stdout == again.stdout


def test_hostile_command_lines(served, env, tmp_path, tally):
    victim = tmp_path / "victim"
    victim.mkdir()
    refused = [["rm", "-rf", str(victim)], ["sh", "-c", "touch x"],
               ["git", "config", "--list"], ["git"], ["/usr/bin/git",
                                                      "pack-objects"],
               ["git", "--shallow-file"], ["git", "-C", str(victim),
                                           "init"]]
    for command in refused:
        got = hook(served, env, command=command)
        lines = got.stderr.decode().splitlines()
        tally.case(got.returncode == 255 and lines[0].startswith("abort: ")
                   and got.stdout == b"" and victim.is_dir()
                   and not os.listdir(victim), "refused %r" % command)
    # run as they are, stored never
    as_they_are = [
        PACK + ["--window=1"],
        ["git", "-c", "pack.window=1", *PACK[1:]],
        ["git", "-c", "pack-objects", *PACK[1:]],
        ["git", "pack-objects", "--revs", "--stdout", "--all"],
        ["git", "--shallow-file", str(tmp_path), *PACK[1:]],
        PACK + ["--no-such-option"],
    ]
    for command in as_they_are:
        got = hook(served, env, command=command)
        want = plain(served, env, command=command)
        stored = [e for e in entries(served)
                  if not e.endswith(responsecache.MARKER_SUFFIXES)]
        # the same answer as git's own (a pack: same objects count)
        tally.case(got.returncode == want.returncode
                   and got.stdout[:12] == want.stdout[:12]
                   and not stored,
                   "as it is: %r" % command)
    bad = [["--max-size", "5x"], ["--max-size", "1k"], ["--min-size", "-1"],
           ["--wait", "-1"], ["--compression", "12"], ["--wait", "x"]]
    for options in bad:
        got = hook(served, env, options=options)
        lines = got.stderr.decode().splitlines()
        tally.case(got.returncode in (2, 255) and got.stdout == b""
                   and len([l for l in lines if l.startswith(("abort:",
                                                              "gitbridge"))])
                   >= 1 and b"Traceback" not in got.stderr,
                   "bad options %r" % options)
    got = hook(served, env, command=[])
    tally.case(got.returncode == 255 and got.stderr.startswith(b"abort: "),
               "no command")
    tally.check()


def test_a_stalled_or_killed_writer_holds_no_one_up(served, env, tmp_path):
    # git on the hook's PATH whose pack-objects stalls for a while first
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "git").write_text(
        '#!/bin/sh\ncase " $* " in *" pack-objects "*) sleep 60;; esac\n'
        'exec %s "$@"\n' % tools.executable("git"))
    (shim / "git").chmod(0o755)
    stalled_env = dict(env, PATH="%s:%s" % (shim, env["PATH"]))
    command = [tools.executable("gitbridge"), "pack-cache", "--dir",
               str(served.cache), "--wait", "1", *PACK]

    def start():
        return subprocess.Popen(command, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=served.srv,
                                env=stalled_env, start_new_session=True)
    writer = start()
    writer.stdin.write(served.stdin)
    writer.stdin.close()
    # the writer holds the key once its entry is begun
    deadline = time.monotonic() + 60
    while not glob.glob(str(served.cache / "tmp" / "*")):
        assert time.monotonic() < deadline and writer.poll() is None
        time.sleep(0.05)
    # another request gives up waiting after --wait and makes its own
    waiting = hook(served, env, options=["--wait", "1"])
    assert waiting.returncode == 0 and waiting.stdout[:4] == b"PACK"
    assert writer.poll() is None
    # the writer killed mid-pack: its lock goes with it, nothing is stored
    os.killpg(writer.pid, signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    writer.stderr.close()
    assert [e for e in entries(served)
            if not e.endswith(responsecache.MARKER_SUFFIXES)] == []
    after = hook(served, env, options=["--wait", "1"])
    assert after.returncode == 0 and len(entries(served)) == 1
    assert after.stdout[:12] == waiting.stdout[:12]


def test_stats_into_a_pipe_its_reader_closed_end_quietly(env, tmp_path):
    """``--stats | head -1``: a reader that has gone ends the command as
    SIGPIPE ends git's (141), without a traceback; stdout that cannot be
    written for another reason still fails loudly."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [tools.executable("gitbridge"), "pack-cache", "--dir",
             str(tmp_path / "cache"), "--stats"], env=env, stdout=write_end,
            stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, b"")
    with open("/dev/full", "wb") as device_full:
        full = subprocess.run(
            [tools.executable("gitbridge"), "pack-cache", "--dir",
             str(tmp_path / "cache"), "--stats"], env=env,
            stdout=device_full, stderr=subprocess.PIPE)
    assert full.returncode != 0 and b"No space left" in full.stderr
