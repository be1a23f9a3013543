"""An hg extension that ``vcsperf check`` loads into the copies it works
on (never into the user's repository):

``hg check-fulltexts``
  reads the full text of every revision of every revlog in the store,
  with its hash checked, and prints one JSON line per revlog: a digest of its nodes and
  texts, the bytes and seconds spent reading, and the revisions that could
  not be read.  Two stores hold the same history exactly when every line
  but the timings matches.  The first line gives the number of revlogs,
  so the runner can draw a progress bar as the lines come.

``hg check-slice REVS DEST``
  writes changesets REVS of this repository into a new repository DEST,
  in one transaction: each with its author, date, message, extra, phase,
  files and copies, and the same tree; parents outside REVS are left out,
  so a changeset without a parent in REVS holds its whole tree.  DEST
  compresses its revlogs as this repository does.  Prints the number of
  changesets written.

``hg check-newbase REV``
  commits, without a working directory, a child of REV that only adds the
  file ``.vcsperf-check``, and prints its node: a base that any linear
  slice above REV rebases onto without conflicts.
"""

import hashlib
import json
import time

from mercurial import context, error, hg, registrar, scmutil

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


@command(b'check-slice', [], b'hg check-slice REVS DEST')
def check_slice(ui, repo, revs, dest):
    revs = scmutil.revrange(repo, [revs])
    revs.sort()
    # The slice compresses as the repository does, whatever hg's default.
    ui.setconfig(b'format', b'revlog-compression',
                 b'zstd' if b'revlog-compression-zstd' in repo.requirements
                 else b'zlib', b'check-slice')
    out = hg.repository(ui, dest, create=True)
    written = {}  # rev here -> node in ``out``
    progress = ui.makeprogress(b'writing the slice', unit=b'changesets',
                               total=len(revs))
    with out.wlock(), out.lock(), out.transaction(b'check-slice'):
        for rev in revs:
            progress.increment()
            ctx = repo[rev]
            kept = [p for p in ctx.parents() if p.rev() in written]
            tree = ctx.manifest()
            # What differs from the new first parent's tree, and what the
            # changeset itself names.
            files = set(ctx.files())
            if kept:
                files.update(kept[0].manifest().diff(tree))
            else:
                files.update(tree)

            def filectx(out, memctx, path, ctx=ctx, tree=tree, kept=kept):
                if path not in tree:
                    return None
                fctx = ctx[path]
                flags = tree.flags(path)
                source = fctx.copysource()
                # A copy keeps its source only if a kept parent has it.
                if source is not None and not any(
                        source in parent.manifest() for parent in kept):
                    source = None
                return context.memfilectx(
                    out, memctx, path, fctx.data(), islink=b'l' in flags,
                    isexec=b'x' in flags, copysource=source)

            parents = [written[p.rev()] for p in kept] + [None, None]
            ui.setconfig(b'phases', b'new-commit', ctx.phasestr(),
                         b'check-slice')
            written[rev] = context.memctx(
                out, parents[:2], ctx.description(), sorted(files), filectx,
                user=ctx.user(), date=ctx.date(),
                extra=ctx.extra()).commit()
    progress.complete()
    ui.write(b'%d\n' % len(written))
