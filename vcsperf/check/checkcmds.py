"""An hg extension that ``vcsperf check`` loads into the copies it works
on (never into the user's repository):

``hg check-fulltexts``
  reads the full text of every revision of every revlog in the store,
  with its hash checked, and prints one JSON line per revlog: a digest of its nodes and
  texts, the bytes and seconds spent reading, and the revisions that could
  not be read.  Two stores hold the same history exactly when every line
  but the timings matches.  The first line gives the number of revlogs,
  so the runner can draw a progress bar as the lines come.

``hg check-newbase REV``
  commits, without a working directory, a child of REV that only adds the
  file ``.vcsperf-check``, and prints its node: a base that any linear
  slice above REV rebases onto without conflicts.
"""

import hashlib
import json
import time

from mercurial import context, error, registrar, scmutil

cmdtable = {}
command = registrar.command(cmdtable)


def _name(entry):
    if entry.is_changelog:
        return "00changelog"
    if entry.is_manifestlog:
        return "00manifest" + (
            "" if not entry.target_id else ":" + entry.target_id.decode(
                "utf-8", "surrogateescape"))
    return "data/" + entry.target_id.decode("utf-8", "surrogateescape")


@command(b'check-fulltexts', [], b'hg check-fulltexts')
def check_fulltexts(ui, repo):
    repo = repo.unfiltered()
    entries = [e for e in repo.store.walk() if e.is_revlog]
    ui.write(b'%s\n' % json.dumps({"revlogs": len(entries)}).encode())
    for entry in entries:
        storage = entry.get_revlog_instance(repo)
        rl = getattr(storage, "_revlog", storage)
        digest = hashlib.sha256()
        size = 0
        seconds = 0.0
        unreadable = []
        revs = range(len(rl))
        for rev in revs:
            start = time.perf_counter()
            try:
                text = rl.rawdata(rev)
            except (error.RevlogError, error.StorageError, ValueError,
                    LookupError) as exc:
                unreadable.append([rev, str(exc)[:200]])
                continue
            finally:
                seconds += time.perf_counter() - start
            size += len(text)
            digest.update(rl.node(rev))
            digest.update(hashlib.sha1(text).digest())
        ui.write(b'%s\n' % json.dumps({
            "name": _name(entry),
            "class": ("changelog" if entry.is_changelog else "manifest"
                      if entry.is_manifestlog else "filelog"),
            "revisions": len(revs), "digest": digest.hexdigest(),
            "bytes": size, "seconds": seconds,
            "unreadable": unreadable}).encode())
        ui.flush()


@command(b'check-newbase', [], b'hg check-newbase REV')
def check_newbase(ui, repo, rev):
    parent = scmutil.revsingle(repo, rev)

    def filectx(repo, memctx, path):
        return context.memfilectx(repo, memctx, path,
                                  b'a base for vcsperf check\n')

    with repo.wlock(), repo.lock(), repo.transaction(b'check-newbase'):
        ctx = context.memctx(repo, (parent.node(), repo.nullid),
                             b'vcsperf check: a base to rebase onto',
                             [b'.vcsperf-check'], filectx,
                             user=b'vcsperf check <check@vcsperf.invalid>')
        node = ctx.commit()
    ui.write(b'%s\n' % repo[node].hex())
