"""A quiet disk between timed commands: a big tree deleted fast, then
the disk let settle, so a command is not timed waiting behind another's
deletions (the benchmarks that write whole checkouts share these)."""

import concurrent.futures
import os
import shutil
import time

#: How many files ``remove_tree`` unlinks at once; after how many
#: deleted files ``settle`` waits for the disk to go quiet, and at most
#: how long.
REMOVERS = 8
BIG_DELETE = 20000
QUIET_DEADLINE = 60.0


def remove_tree(top):
    """Delete the directory tree ``top`` (untimed, between paths), its
    files ``REMOVERS`` at a time: on a disk mounted with ``discard`` each
    unlink waits for the device, and a Firefox-scale checkout (408,285
    files) took 15 minutes to delete one file after another, 1.7 minutes
    eight at a time.  Returns how many files it deleted."""
    deleted = _each_file(top, _unlink_quietly)
    shutil.rmtree(top, ignore_errors=True)
    return deleted


def _each_file(top, action):
    """``action(path)`` (1 or 0) for every file under ``top``,
    ``REMOVERS`` at a time; the sum."""
    batch, done = [], 0
    with concurrent.futures.ThreadPoolExecutor(REMOVERS) as pool:
        for parent, _dirs, names in os.walk(top):
            batch.extend(os.path.join(parent, name) for name in names)
            if len(batch) >= 4096:
                done += sum(pool.map(action, batch))
                batch = []
        done += sum(pool.map(action, batch))
    return done


def _unlink_quietly(path):
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0  # rmtree, after, reports nothing either


def settle(work=None):
    """Untimed, before a timed path: what earlier paths wrote or deleted
    reaches the disk now (``sync``), and, given ``work`` (after a big
    delete), the disk holding it has no request in flight and has
    finished discarding (its ``/sys/dev/block`` counters stop moving),
    at most ``QUIET_DEADLINE`` seconds; so the path's own writes do not
    wait behind gigabytes of someone else's.  Measured at Firefox scale:
    the same checkout took 47 to 77 s of wall time in quiet minutes, 158
    and 219 s (2.5 to 4 times the system time) just after a checkout's
    408,285 files were deleted.  Returns the seconds waited."""
    start = time.monotonic()
    os.sync()
    if work is None:
        return time.monotonic() - start
    device = os.stat(work).st_dev
    stat = "/sys/dev/block/%d:%d/stat" % (os.major(device),
                                          os.minor(device))
    last = None
    while time.monotonic() - start < QUIET_DEADLINE:
        try:
            with open(stat) as fh:
                fields = fh.read().split()
        except OSError:
            break  # no block device (tmpfs, overlay): sync is all
        # in flight, and discards done (absent before Linux 4.18)
        now = (fields[8], fields[11:12])
        if now == last and fields[8] == "0":
            break
        last = now
        time.sleep(1.0)
    return time.monotonic() - start


#: Where Linux lets root drop its clean caches.
DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_caches(rewarm=()):
    """Untimed, after a big delete and ``settle``: drop the kernel's clean
    caches (root only), then read every file under each of ``rewarm``
    back into memory (a served repository the next command reads, so it
    is not timed reading from disk).  Returns whether they were dropped.

    Why: on ext4 without a journal (this machine's), creating a file
    skips every free inode deleted in the last minute, six while its
    inode block is dirty, as long as that block is cached; after a
    checkout's deletion each new file scans past hundreds of thousands
    of them.  Measured with a stream clone of the Firefox-scale store
    (440,953 files) from the same ``hg serve``: 57.2 s (31.0 s of system
    time) on a fresh disk, 113 to 180 s (91 to 217 s of system time,
    most of it in ``recently_deleted`` and ``find_inode_bit``) after
    earlier clones' deletions, whether waiting 40 s first or not; with
    the caches dropped, 27.9 s of system time again.  Whichever side of
    a comparison ran second paid it: 1.8 times the wall time."""
    try:
        with open(DROP_CACHES, "w") as fh:
            fh.write("3\n")
    except OSError:
        return False
    for top in rewarm:
        _each_file(top, _read_quietly)
    return True


def _read_quietly(path):
    try:
        with open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
        return 1
    except OSError:
        return 0  # gone or unreadable: nothing to warm
