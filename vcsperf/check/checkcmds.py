"""An hg extension that ``vcsperf check`` loads into the copies it works
on, and into the user's repository only to read it (``check-survey``):

``hg check-survey [--slice N]``
  what the check learns of a repository before it starts, read from its
  changelog, manifest and filelogs alone, so that nothing is written into
  it: not a cache (resolving the name ``tip`` in a revset makes hg 6.9
  write the tags cache; at 1,000,000 changesets ``hg log -r tip`` fills
  the tags and branch caches of a copy for 40 seconds), not a lock.
  Prints a JSON line: the tip's revision and node, the number of visible
  changesets, the tip's number of files and of Python files; then, one
  a line, ``SIZE HEXNAME`` of the tip's files.  With ``--slice N``, the
  slice of the newest N ancestors of the tip too (``"slice"``: the files
  its changesets touch, and whether ``narrow_files`` narrows it), and
  only the slice's files are listed.  With ``--names-only``, no file is
  listed (no filelog is read).

``hg check-fulltexts``
  reads the full text of every revision of every revlog in the store,
  with its hash checked, and prints one JSON line per revlog: a digest of its nodes and
  texts, the bytes and seconds spent reading, and the revisions that could
  not be read.  Two stores hold the same history exactly when every line
  but the timings matches.  The first line gives the number of revlogs,
  so the runner can draw a progress bar as the lines come.

``hg check-narrow TIP N LIST``
  the files the slice of the newest N ancestors of TIP holds (``narrow_files``): writes
  them to the file LIST, NUL-separated, and prints, one a line in hex,
  the names in the store of their filelogs (as ``data/NAME.i`` is
  encoded there); prints nothing and writes no LIST when the slice holds
  every file.  It reads only the changelog and the manifests: a copy of
  the store that has no filelog yet answers it.  Its bounds are the
  config items ``checkcmds.above``, ``touched-files``, ``rest-files``
  and ``python-files`` (``narrow_files``; the check never sets them),
  which ``check-survey`` reads too.

``hg check-slice [--files LIST] TIP N DEST``
  writes the newest N ancestors of TIP into a new repository DEST,
  in one transaction: each with its author, date, message, extra, phase,
  files and copies, and the same tree; parents outside the slice are
  left out, so a changeset without a parent in it holds its whole tree.  With
  ``--files``, only the files LIST names (``check-narrow``'s) are kept,
  in every changeset, and only the filelogs of those are read.  DEST
  compresses its revlogs as this repository does.  Prints the number of
  changesets written.

``hg check-newbase REV``
  commits, without a working directory, a child of REV that only adds the
  file ``.vcsperf-check``, and prints its node: a base that any linear
  slice above REV rebases onto without conflicts.
"""

import hashlib
import itertools
import json
import os
import time

from mercurial import context, error, hg, registrar, scmutil

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

#: A slice keeps the whole tree while it has at most this many files (the
#: tip's and the ones its changesets touch) ...
NARROW_ABOVE = 10000
#: ... and above that, of the files its changesets touch, at most this
#: many ...
TOUCHED_FILES = 8000
#: ... with, of the tip's files they do not touch, this many ...
REST_FILES = 1000
#: ... and this many Python files (what the importer compiles).
REST_PYTHON_FILES = 200


#: ``narrow_files``'s bounds as ``check-narrow`` reads them: the config
#: items ``checkcmds.NAME`` (a test's smaller tree crosses them too).
_BOUNDS = {"above": NARROW_ABOVE, "touched-files": TOUCHED_FILES,
           "rest-files": REST_FILES, "python-files": REST_PYTHON_FILES}
for _name, _default in _BOUNDS.items():
    configitem(b'checkcmds', _name.encode(), default=_default)


def _bounds(ui):
    """``narrow_files``'s keyword arguments, from the config."""
    return {name.replace('-', '_'): ui.configint(b'checkcmds', name.encode())
            for name in _BOUNDS}


def _spread(names, count):
    """``count`` of the sorted ``names``, evenly spaced (all of them if
    there are no more): the same ones on every run."""
    if len(names) <= count:
        return list(names)
    return [names[index * len(names) // count] for index in range(count)]


def narrow_files(touched, tip, above=NARROW_ABOVE, touched_files=TOUCHED_FILES,
                 rest_files=REST_FILES, python_files=REST_PYTHON_FILES):
    """The files a slice holds, sorted: None (all of them) when the files
    its changesets touch (``touched``) and the files of its newest one
    (``tip``) are at most ``NARROW_ABOVE``; else a bounded sample of
    them, at most ``TOUCHED_FILES + REST_FILES + REST_PYTHON_FILES``
    whatever the tree and the history: the touched files (every one up to
    ``TOUCHED_FILES``, else that many spread over their sorted names),
    and of the rest, ``REST_FILES`` spread over their sorted names and
    ``REST_PYTHON_FILES`` of the Python files among them.  Names are
    bytes or str (sorted as their bytes are)."""
    touched = set(touched)
    if len(touched.union(tip)) <= above:
        return None

    def key(name):
        return name if isinstance(name, bytes) else os.fsencode(name)
    rest = sorted(set(tip) - touched, key=key)
    python = [name for name in rest if key(name).endswith(b'.py')]
    return sorted(set(itertools.chain(
        _spread(sorted(touched, key=key), touched_files),
        _spread(rest, rest_files),
        _spread(python, python_files))), key=key)


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


@command(b'check-survey',
         [(b'', b'slice', 0, b'the slice of the newest N ancestors of the '
           b'tip', b'N'),
          (b'', b'names-only', False, b'list no file (read no filelog)')],
         b'hg check-survey [--slice N] [--names-only]')
def check_survey(ui, repo, slice=0, names_only=False):
    # The visible changesets (the copy's and the slice's), read through
    # the changelog, never a revset or a name: either may fill a cache.
    changelog = repo.changelog
    tip = changelog.tiprev()
    if tip < 0:
        raise error.Abort(b'no changesets')
    tree = repo[tip].manifest()
    names = list(tree)
    found = {"tip": tip, "node": changelog.node(tip).hex(),
             "visible": len(changelog) - len(changelog.filteredrevs),
             "files": len(names),
             "python_files": sum(name.endswith(b'.py') for name in names)}
    listed = names
    if slice:
        touched = set()
        walked = 0
        for rev in _newest(repo, tip, slice):
            touched.update(changelog.readfiles(rev))
            walked += 1
        narrow = narrow_files(touched, names, **_bounds(ui))
        found["slice"] = {"changesets": walked,
                          "files_touched": len(touched),
                          "narrowed": narrow is not None}
        if narrow is not None:
            listed = [name for name in narrow if name in tree]
    ui.write(b'%s\n' % json.dumps(found).encode())
    if names_only:
        return
    tipctx = repo[tip]
    for name in listed:
        ui.write(b'%d %s\n' % (tipctx.filectx(name, fileid=tree[name])
                                .size(), name.hex().encode()))


def _read_list(path):
    """The names in ``check-narrow``'s LIST file."""
    with open(path, 'rb') as fh:
        return {name for name in fh.read().split(b'\0') if name}


def _newest(repo, tip, count):
    """The revisions of the newest ``count`` ancestors of ``tip`` (a
    revision number, a node in hex, or ``tip``), in ascending order, read through the changelog:
    a revset naming a node makes hg fill the tags and branch caches first
    (a minute, and 8 MB, at 1,000,000 changesets)."""
    try:
        rev = repo[tip].rev()
    except error.RepoLookupError:
        raise error.Abort(b'unknown revision %s' % tip)
    count = count if isinstance(count, bytes) else b'%d' % count
    if not count.isdigit():
        raise error.Abort(b'not a number of changesets: %s' % count)
    return sorted(itertools.islice(
        repo.changelog.ancestors([rev], inclusive=True), int(count)))


@command(b'check-narrow', [], b'hg check-narrow TIP N LIST')
def check_narrow(ui, repo, tip, count, listfile):
    revs = _newest(repo, tip, count)
    if not revs:
        raise error.Abort(b'no changesets in the slice')
    touched = set()
    for rev in revs:
        touched.update(repo.changelog.readfiles(rev))
    files = narrow_files(touched, repo[revs[-1]].manifest(), **_bounds(ui))
    if files is None:
        return
    with open(listfile, 'wb') as fh:
        fh.write(b'\0'.join(files))
    store = repo.svfs.join(b'')
    for name in files:
        for suffix in (b'.i', b'.d'):
            # the filelog's name in the store, encoded as hg opens it
            path = repo.svfs.join(b'data/' + name + suffix)
            ui.write(b'%s\n' % os.path.relpath(path, store).hex().encode())


@command(b'check-slice',
         [(b'', b'files', b'', b'keep only the files this file names '
           b'(check-narrow\'s LIST)', b'LIST')],
         b'hg check-slice [--files LIST] TIP N DEST')
def check_slice(ui, repo, tip, count, dest, files=b''):
    keep = _read_list(files) if files else None
    revs = _newest(repo, tip, count)
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
            changed = set(ctx.files())
            if len(kept) == 1 and len(ctx.parents()) == 1:
                # A changeset names the files it changes: only those are
                # read, from the manifest's delta (at 400,000 files a
                # whole manifest takes a tenth of a second to read).
                tree = None
            else:
                # What differs from the new first parent's tree, and what
                # the changeset itself names.
                tree = ctx.manifest()
                if kept:
                    changed.update(kept[0].manifest().diff(tree))
                elif keep is None:
                    changed.update(tree)
                else:
                    changed.update(name for name in keep if name in tree)
            if keep is not None:
                changed &= keep
            # the trees of the new parents, in the slice
            before = [out[written[p.rev()]].manifest() for p in kept]

            def filectx(out, memctx, path, ctx=ctx, tree=tree,
                        before=before):
                if tree is None:
                    try:
                        ctx.filenode(path)
                    except error.ManifestLookupError:
                        return None  # removed
                    flags = ctx.flags(path)
                elif path in tree:
                    flags = tree.flags(path)
                else:
                    return None  # removed
                fctx = ctx[path]
                source = fctx.copysource()
                # A copy keeps its source only if a new parent has it.
                if source is not None and not any(
                        source in parent for parent in before):
                    source = None
                return context.memfilectx(
                    out, memctx, path, fctx.data(), islink=b'l' in flags,
                    isexec=b'x' in flags, copysource=source)

            parents = [written[p.rev()] for p in kept] + [None, None]
            ui.setconfig(b'phases', b'new-commit', ctx.phasestr(),
                         b'check-slice')
            written[rev] = context.memctx(
                out, parents[:2], ctx.description(), sorted(changed),
                filectx, user=ctx.user(), date=ctx.date(),
                extra=ctx.extra()).commit()
    progress.complete()
    ui.write(b'%d\n' % len(written))
