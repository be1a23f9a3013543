"""vcsperf.core.pooling, the VCS-neutral half of pooled checkouts: the lock
that belongs to a live process, network attempts with backoff and jitter, disk
accounting."""

import multiprocessing
import os
import random
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from vcsperf.core import pooling


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _host():
    return pooling.owner_identity().rpartition(":")[0]


def test_lock_of_a_dead_process_is_taken_over(tmp_path):
    path = str(tmp_path / "store.lock")
    os.symlink("%s:%d" % (_host(), _dead_pid()), path)
    told = []
    with pooling.PidLock(path, pooling.LockPolicy(timeout=5),
                         lambda *args: told.append(args)):
        assert os.readlink(path) == pooling.owner_identity()
    assert not os.path.lexists(path)
    assert told == []  # nothing to wait for: the owner is gone


@pytest.mark.parametrize("owner", ["live", "other host"])
def test_lock_of_a_live_or_unknown_owner_is_waited_for(tmp_path, owner):
    path = str(tmp_path / "store.lock")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        host = _host() if owner == "live" else "elsewhere.example/1"
        os.symlink("%s:%d" % (host, sleeper.pid), path)
        told = []
        with pytest.raises(pooling.LockTimeout):
            pooling.PidLock(path, pooling.LockPolicy(timeout=0.5),
                            lambda *args: told.append(args)).acquire()
        assert [args[0] for args in told] == ["%s:%d" % (host, sleeper.pid)]
        assert told[0][2] is False  # the timeout ends the wait first
        assert os.readlink(path) == "%s:%d" % (host, sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("private, grace, age, waits", [
    (True, 600, 0, False),    # the cache is this machine's: at once
    (False, 600, 900, False),  # older than the grace period: at once
    (False, 1, 0, True),      # young: waited for until the grace ends
])
def test_lock_of_another_host_is_taken_over_by_policy(tmp_path, private,
                                                      grace, age, waits):
    """A killed CI task's lock names its old container's host: it is taken
    over at once when the cache is private, else once it is old."""
    path = str(tmp_path / "wlock")
    os.symlink("old-container.example/4026531836:1068", path)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp), follow_symlinks=False)
    told = []
    policy = pooling.LockPolicy(private=private, grace=grace, timeout=30)
    start = time.monotonic()
    with pooling.PidLock(path, policy, lambda *args: told.append(args)):
        assert os.readlink(path) == pooling.owner_identity()
    if waits:
        (owner, seconds, takeover), = told
        assert takeover and 0 < seconds <= grace
        assert time.monotonic() - start >= 0.5
    else:
        assert told == []


def _count_under_lock(lock_path, counter_path, rounds):
    for _ in range(rounds):
        with pooling.PidLock(lock_path, pooling.LockPolicy(), None):
            with open(counter_path) as fh:
                value = int(fh.read())
            with open(counter_path, "w") as fh:
                fh.write(str(value + 1))


def test_lock_excludes_concurrent_processes(tmp_path):
    lock_path, counter = str(tmp_path / "c.lock"), str(tmp_path / "count")
    with open(counter, "w") as fh:
        fh.write("0")
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_count_under_lock,
                               args=(lock_path, counter, 25))
               for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert open(counter).read() == "150"


def test_attempts_retry_transient_failures_then_give_up():
    slept, reports = [], []
    attempts = pooling.NetworkAttempts(3, sleep=slept.append,
                                       rng=random.Random(3))
    calls = iter([ConnectionResetError("reset"), TimeoutError("slow"), "ok"])

    def operation():
        result = next(calls)
        if isinstance(result, Exception):
            raise result
        return result

    assert attempts.call(operation, pooling.transient_socket_error,
                         lambda *args: reports.append(args)) == "ok"
    assert [report[1:3] for report in reports] == [(1, 3), (2, 3)]
    assert len(slept) == 2 and slept[1] > slept[0] - 4

    with pytest.raises(pooling.GaveUp) as gaveup:
        attempts.call(lambda: (_ for _ in ()).throw(ConnectionRefusedError()),
                      pooling.transient_socket_error, lambda *args: None)
    assert gaveup.value.attempts == 3
    with pytest.raises(ValueError):  # not transient: through at once
        pooling.NetworkAttempts(3).call(
            lambda: int("x"), pooling.transient_socket_error, None)


@settings(max_examples=60, deadline=None)
@given(failures=st.integers(1, 12), low=st.floats(0, 10),
       spread=st.floats(0, 10), backoff=st.floats(0, 5),
       seed=st.integers(0, 2 ** 32))
def test_delay_is_exponential_plus_bounded_jitter(failures, low, spread,
                                                  backoff, seed):
    attempts = pooling.NetworkAttempts(3, backoff=backoff,
                                       jitter=(low, low + spread),
                                       rng=random.Random(seed))
    base = (2 ** failures - 1) * backoff
    assert base + low <= attempts.delay(failures) <= base + low + spread + 1e-9


def test_disk_usage_counts_hardlinked_files_once(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "data").write_bytes(b"x" * 100000)
    (tmp_path / "checkout").mkdir()
    os.link(tmp_path / "store" / "data", tmp_path / "checkout" / "data")
    os.symlink("/nonexistent", tmp_path / "checkout" / "link")
    one = pooling.disk_usage(tmp_path / "store")
    both = pooling.disk_usage(tmp_path / "store", tmp_path / "checkout")
    assert one >= 100000
    assert both - one < 8192  # directory and symlink, not the data again


def test_discard_renames_before_deleting(tmp_path):
    entry = tmp_path / "entry"
    (entry / "sub").mkdir(parents=True)
    (entry / "sub" / "file").write_text("data")
    pooling.discard(entry)
    assert not entry.exists()
    assert os.listdir(tmp_path) == []
    pooling.discard(entry)  # already gone: nothing to do


# Damaged lock files (issue 18) ------------------------------------------------

def _write_lock(path, content, age):
    """A lock file holding ``content``: a symlink's target (str), a regular
    file's bytes, or a directory (None)."""
    if content is None:
        os.mkdir(path)
    elif isinstance(content, str):
        os.symlink(content, path)
    else:
        with open(path, "wb") as fh:
            fh.write(content)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp), follow_symlinks=False)


GARBAGE = {
    "binary file": b"\xff\xfe\x00garbage\x80",
    "empty file": b"",
    "text without pid": b"just some text\n",
    "pid that is not a number": "%s:twelve" % _host(),
    "pid zero": "%s:0" % _host(),
    "pid beyond any process": "%s:99999999999" % _host(),
    "directory": None,
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_old_garbage_lock_is_taken_over_at_once(tmp_path, kind):
    """issue 18: a lock whose content is not host:pid was waited for the
    whole lock-timeout (3600 s), or crashed reading bytes that are not
    UTF-8.  Nobody writes such a lock and keeps it: taken over."""
    path = str(tmp_path / "store.lock")
    _write_lock(path, GARBAGE[kind], age=60)
    told, taken = [], []
    start = time.monotonic()
    lock = pooling.PidLock(path, pooling.LockPolicy(timeout=3600),
                           lambda *args: told.append(args), taken.append)
    finished = _acquire_within(lock, 10)
    assert finished and time.monotonic() - start < 5
    assert os.readlink(path) == pooling.owner_identity()
    lock.release()
    assert told == [] and len(taken) == 1
    assert "not host:pid" in pooling.describe_owner(taken[0])


def test_young_garbage_lock_is_waited_for_briefly(tmp_path, monkeypatch):
    """A lock file just created by a writer without symlinks is empty for
    an instant: garbage is taken over only once it has been so for
    GARBAGE_SETTLE seconds."""
    monkeypatch.setattr(pooling, "GARBAGE_SETTLE", 1.0)
    path = str(tmp_path / "store.lock")
    _write_lock(path, b"", age=0)
    told = []
    start = time.monotonic()
    with pooling.PidLock(path, pooling.LockPolicy(timeout=3600),
                         lambda *args: told.append(args)):
        assert time.monotonic() - start >= 0.9
    (owner, seconds, takeover), = told
    assert owner == "" and takeover and 0 < seconds <= 1.0


@pytest.mark.parametrize("guard", ["another host's", "garbage"])
def test_stale_takeover_guard_does_not_block_forever(tmp_path, guard):
    """A taker killed between its guard and the takeover leaves
    ``path.takeover``: judged by the same policy as the lock, not only
    when its owner is a dead process of this host (before, another
    host's guard made every later taker loop forever)."""
    path = str(tmp_path / "store.lock")
    _write_lock(path, "%s:%d" % (_host(), _dead_pid()), age=0)
    content = ("old-container.example/1:1068" if guard == "another host's"
               else b"\x00")
    _write_lock(path + ".takeover", content, age=900)
    lock = pooling.PidLock(path, pooling.LockPolicy(timeout=30), None)
    assert _acquire_within(lock, 10)
    lock.release()
    assert not os.path.lexists(path + ".takeover")


def _acquire_within(lock, seconds):
    """Whether ``lock.acquire()`` returned within ``seconds`` (a thread,
    so that a lock waited for forever fails the test, not the run)."""
    thread = threading.Thread(target=lock.acquire, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()
