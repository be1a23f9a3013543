# commitid.py - commit IDs that survive history rewriting
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""give every changeset a commit ID that survives history rewriting

Code review needs to know that a changeset which was amended, rebased,
reordered or folded is still the same change.  This extension ends each new
changeset's message with a line::

  MozReview-Commit-ID: 4Aq2kO7Vx9d

(the format of Mozilla's MozReview: 32 random bits above 32 bits of
seconds since 2000, in base62), and every rewrite keeps it.  Enable it::

  [extensions]
  commitid =

The line is added where every changeset is created, so ``commit``,
``commit --amend``, ``rebase`` (also in memory), ``graft``, ``histedit``,
``absorb``, ``split``, ``uncommit``, ``shelve``/``unshelve`` and ``import``
all produce exactly one ID:

- a message that has an ID keeps it;
- a rewrite whose new message lacks the ID (``commit --amend -m``,
  ``histedit`` mess with the line deleted) gets the ID of the changeset it
  rewrites back;
- a fold keeps the first changeset's ID and drops the others, as
  ``histedit roll`` keeps the first message;
- ``split`` gives the ID to the first part and new IDs to the others;
- the line joins a last paragraph of ``Key: value`` lines, or else starts
  a paragraph of its own.

Merges, empty messages and ``fixup!``/``squash!``/``amend!`` messages get
no ID, nor do changesets that ``hg convert`` and ``hg import --exact``
write, as those reproduce changesets as they were.  To give a changeset a different ID, write another
``MozReview-Commit-ID:`` line yourself.

``hg commitid-add`` gives every draft changeset that has no ID one, in one
rewrite (with obsolescence markers when evolution is enabled, else with a
backup bundle).  ``{commitid}`` shows a changeset's ID in templates and
``commitid(ID)`` finds changesets by ID in revsets::

  $ hg log -r "commitid(4Aq2kO7Vx9d)" -T "{node|short} {commitid}\\n"

Lookups by key read an index in ``.hg/cache/commitindex*`` (kept up to
date after every transaction, strip and rollback; ``hg
debugupdatecaches`` builds it in a repository that has none), so they
take milliseconds at any size.  Besides commit IDs it knows reviews (the
``D123`` of a ``Differential Revision:`` line, a Gerrit ``Change-Id:``)
and bugs (``Bug 123`` in the summary line)::

  $ hg log -r "review(D123) or bug(1234567)"
  $ hg commitid-lookup D123 "bug 1234567" 4Aq2kO7Vx9d -T json
  $ hg commitid-lookup --remote https://hg.example/repo D123

Where the index cannot answer (none yet, or built by other rules), the
revsets read the descriptions instead and say so with ``--debug``.

A Mercurial without the extension may strip changesets and add others
(or the same in another order, the tip unchanged) under the index.  So
the index records, besides the node of every changeset it indexed, the
revision of each head of what it indexed; a lookup checks those heads'
nodes.  A node names its changeset and all its ancestors, so unchanged
heads prove the indexed changesets are all still there, at a cost of one
node per head rather than a read of 700,000.  If a head changed,
lookups read the descriptions instead, and the next transaction
rebuilds the index.  Each changeset it answers with is then checked by
node, and found under its new number where only the order changed;
``hg debugupdatecaches`` compares every node and rebuilds an index
whose numbers are stale.

A bug number is ``Bug``, a space and at most 18 digits (0-9 only); a
longer run of digits is no bug.  ``hg serve`` answers the same lookups
over the wire protocol and at ``/json-commitid?key=D123&key=...``, each
key once, and refuses a lookup of more than 1,000 distinct keys, one in
which a key matches more than 1,000 changesets, or whose answer would
exceed 4 MB, with a message saying which; ``--remote`` reads no more
than 4 MB of an answer, and gives up on an HTTP server that has not
answered within ``commitid.remote-deadline`` seconds (default 600),
however it trickles.  More trailers that hold commit IDs, and how to
stop keeping the index (lookups then read the descriptions of the
changesets it does not cover)::

  [commitid]
  index-trailers = X-Commit-ID
  index = no

For reproducible tests, ``commitid.deterministic`` derives IDs from the
changeset's parents, author, date, files and message instead of drawing
them at random; never use it for real work::

  [commitid]
  deterministic = yes
"""

import contextlib
import json
import time

from mercurial import (
    cmdutil,
    context,
    error,
    extensions,
    hg,
    localrepo,
    node as nodemod,
    registrar,
    revsetlang,
    rewriteutil,
    scmutil,
    smartset,
    wireprototypes,
    wireprotov1server,
)
from mercurial.hgweb import webcommands
from mercurial.i18n import _
from mercurial.interfaces import repository
from mercurial.utils import stringutil, urlutil

from hgext3rd import _hgcompat, _hgnet
from hgext3rd.commitid import commitindex
from vcsperf.core import commitid, commitkeys

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)
revsetpredicate = registrar.revsetpredicate()
templatekeyword = registrar.templatekeyword()

configitem(b'commitid', b'deterministic', default=False)
configitem(b'commitid', b'index-trailers', default=list)
configitem(b'commitid', b'index', default=True)
configitem(b'commitid', b'remote-deadline', default=600.0)

#: The wire-protocol command, also the capability that announces it.
WIRE_COMMAND = b'commitidlookup'
#: What one lookup that ``hg serve`` answers (wire and web) may ask and
#: get: distinct keys, changesets a key matches, bytes of the answer.
#: Over them the request is refused with a message saying which; a client
#: reads no more of an answer than ``MAX_ANSWER`` either.
MAX_KEYS = 1000
MAX_MATCHES = 1000
MAX_ANSWER = 4 << 20

#: Extras in which rewrites name the changesets they replace or copy.
SOURCE_EXTRAS = (b'amend_source', b'rebase_source', b'histedit_source',
                 b'absorb_source', b'unamend_source', b'fix_source',
                 b'intermediate-source', b'source')

def _text(data):
    return data.decode('utf-8', 'surrogateescape')


def _bytes(text):
    return text.encode('utf-8', 'surrogateescape')


def commit_id(description):
    """The commit ID (bytes) in a description, or None."""
    found = commitid.find_id(_text(description))
    return found.encode('ascii') if found else None


def reposetup(ui, repo):
    if not repo.local():
        return

    class commitidrepo(repo.__class__):
        @localrepo.unfilteredmethod
        def commitctx(self, ctx, *args, **kwargs):
            if not getattr(self, '_commitid_suspended', False):
                _give_id(self, ctx)
            return super().commitctx(ctx, *args, **kwargs)

        def updatecaches(self, tr=None, full=False, caches=None, *args,
                         **kwargs):
            super().updatecaches(tr, full, caches, *args, **kwargs)
            # Core skips strip's transaction too: ``destroyed`` calls
            # this again once the stripped changesets are gone.
            if tr is not None and tr.hookargs.get(b'source') == b'strip':
                return
            if self.currentlock() is None or \
                    not self.ui.configbool(b'commitid', b'index'):
                return
            check = bool(full) or caches == repository.CACHES_ALL
            try:
                commitindex.update(self, check=check)
            except OSError as err:
                # A cache: failing to write one must not fail the command
                # (lookups read the descriptions instead), but the
                # command that was to repair it says so.
                (self.ui.warn if check else self.ui.debug)(
                    b'commitid: cannot write the index: %s\n'
                    % stringutil.forcebytestr(err))

    repo.__class__ = commitidrepo


def extsetup(ui):
    _hgcompat.report_our_crashes()
    extensions.wrapfunction(cmdutil, 'tryimportone', _tryimportone)
    extensions.wrapfunction(cmdutil, 'amend', _amend)
    extensions.afterloaded(b'split', _wrapsplit)
    extensions.afterloaded(b'convert', _wrapconvert)
    extensions.wrapfunction(wireprotov1server, '_capabilities',
                            _capabilities)
    if 'commitid' not in webcommands.__all__:
        webcommands.commitid = web_commitid
        webcommands.__all__.append('commitid')


def _give_id(repo, ctx):
    """Rewrite the message of ``ctx``, about to be committed, so it has
    exactly one ID (unless a skip rule says it gets none)."""
    text = _text(ctx.description())
    new = commitid.ensure_id(text, lambda: _make_id(repo, ctx),
                              parents=_parent_count(ctx))
    split_ids = getattr(repo, '_commitid_split', None)
    if split_ids is not None:
        found = commitid.find_id(new)
        if found in split_ids:
            new = commitid.replace_id(new, _make_id(repo, ctx, inherit=False))
        split_ids.add(commitid.find_id(new))
    if new != text:
        ctx._text = _bytes(new)


def _parent_count(ctx):
    # Some contexts list a null second parent, some leave it out.
    return len([p for p in ctx.parents() if p.rev() != nodemod.nullrev])


def _make_id(repo, ctx, inherit=True):
    if inherit:
        inherited = _inherited_id(repo, ctx.extra())
        if inherited:
            return inherited
    if repo.ui.configbool(b'commitid', b'deterministic'):
        seed = b'\0'.join(
            [p.node() for p in ctx.parents()]
            + [ctx.user(), b'%d %d' % ctx.date(), ctx.description()]
            + sorted(ctx.files()))
        return commitid.derived_id(seed)
    return commitid.new_id()


def _inherited_id(repo, extra):
    """The ID of the changeset this one rewrites, as its extras name it."""
    unfiltered = repo.unfiltered()
    for key in SOURCE_EXTRAS:
        for source in extra.get(key, b'').split(b','):
            try:
                node = nodemod.bin(source)
            except ValueError:
                continue
            if node and unfiltered.changelog.hasnode(node):
                found = commitid.find_id(_text(unfiltered[node].description()))
                if found:
                    return found
    return None


@contextlib.contextmanager
def _repo_state(repo, name, value):
    """Set ``name`` on the unfiltered repository (where ``commitctx`` runs)
    for the duration of an operation."""
    unfiltered = repo.unfiltered()
    setattr(unfiltered, name, value)
    try:
        yield
    finally:
        delattr(unfiltered, name)


def _tryimportone(orig, ui, repo, patchdata, parents, opts, *args, **kwargs):
    # --exact promises the patch's own node, which an added line would change.
    if not opts.get(b'exact'):
        return orig(ui, repo, patchdata, parents, opts, *args, **kwargs)
    with _repo_state(repo, '_commitid_suspended', True):
        return orig(ui, repo, patchdata, parents, opts, *args, **kwargs)


def _amend(orig, ui, repo, old, extra, pats, opts, *args, **kwargs):
    # Core compares the new message with the old one to tell "nothing
    # changed"; a message given with -m or -l lacks the ID the amended
    # changeset will get back, so give it back before that comparison.
    bytes_opts, key = _hgcompat.bytes_opts(opts)
    old_id = commit_id(old.description())
    message = cmdutil.logmessage(ui, bytes_opts)
    if old_id and message:
        with_id = commitid.ensure_id(_text(message), lambda: _text(old_id),
                                      parents=_parent_count(old))
        opts = dict(opts)
        opts[key(b'message')], opts[key(b'logfile')] = _bytes(with_id), None
    return orig(ui, repo, old, extra, pats, opts, *args, **kwargs)


def _wrapconvert(loaded):
    if loaded:
        from hgext.convert import hg as convert_hg
        extensions.wrapfunction(convert_hg.mercurial_sink, 'putcommit',
                                _putcommit)


def _putcommit(orig, sink, *args, **kwargs):
    # A conversion reproduces each changeset's message as it was.
    with _repo_state(sink.repo, '_commitid_suspended', True):
        return orig(sink, *args, **kwargs)


def _wrapsplit(loaded):
    if loaded:
        split = extensions.find(b'split')
        extensions.wrapfunction(split, 'dosplit', _dosplit)


def _dosplit(orig, ui, repo, *args, **kwargs):
    # Every part starts from the split changeset's message; only the first
    # part to be committed keeps its ID.
    with _repo_state(repo, '_commitid_split', set()):
        return orig(ui, repo, *args, **kwargs)


@command(
    b'commitid-add',
    [(b'r', b'rev', [], _(b'changesets to give IDs to (default: drafts)'),
      _(b'REV'))],
    _(b'[-r REV]...'),
    helpcategory=command.CATEGORY_CHANGE_MANAGEMENT,
)
def commitid_add(ui, repo, **opts):
    """give every draft changeset without a commit ID one

    All non-public, non-obsolete changesets that lack an ID get one
    (merges, empty and ``fixup!`` messages excepted), in one transaction.
    Their descendants are rewritten too, as they must move onto the new
    parents.  Nothing but the messages changes: files and manifests stay.

    With evolution enabled the old changesets become obsolete; without it
    they are stripped and saved in a backup bundle first.

    Returns 0 on success, 1 if no changeset needed an ID.
    """
    with repo.wlock(), repo.lock():
        cmdutil.checkunfinished(repo)
        revs = scmutil.revrange(
            repo, opts.get('rev') or [b'not public() and not obsolete()'])
        needing = [rev for rev in revs if _lacks_id(repo[rev])]
        if not needing:
            ui.status(_(b'no changeset needs a commit ID\n'))
            return 1
        rewrite = sorted(repo.revs(b'(%ld):: and not obsolete()', needing))
        rewriteutil.precheck(repo, rewrite, b'commitid-add')
        with repo.transaction(b'commitid-add'):
            replacements = _rewrite(ui, repo, rewrite)
            wdir_parent = repo.dirstate.p1()
            if wdir_parent in replacements:
                with repo.dirstate.changing_parents(repo):
                    repo.setparents(replacements[wdir_parent])
            _hgcompat.cleanup_nodes(repo, {old: [new] for old, new in
                                  replacements.items()},
                           b'commitid-add', fixphase=True)
    ui.status(_(b'added commit IDs to %d changesets (%d rewritten)\n')
              % (len(needing), len(rewrite)))
    return 0


def _lacks_id(ctx):
    text = _text(ctx.description())
    return commitid.ensure_id(text, commitid.new_id,
                               parents=_parent_count(ctx)) != text


def _rewrite(ui, repo, revs):
    """Commit each of ``revs`` (ascending, so parents come first) again
    with the same content on its rewritten parents; ``commitctx`` adds the
    IDs.  Returns {old node: new node}."""
    replacements = {}
    progress = ui.makeprogress(_(b'rewriting'), unit=_(b'changesets'),
                               total=len(revs))
    for rev in revs:
        ctx = repo[rev]
        parents = [replacements.get(p.node(), p.node())
                   for p in (ctx.p1(), ctx.p2())]
        new = context.memctx(
            repo, parents, ctx.description(), ctx.files(),
            _same_files(ctx), user=ctx.user(), date=ctx.date(),
            extra=ctx.extra(), branch=ctx.branch())
        replacements[ctx.node()] = new.commit()
        progress.increment()
    progress.complete()
    return replacements


def _same_files(ctx):
    """A memctx file function giving the files as ``ctx`` has them (None
    for a file it removed)."""
    def filectxfn(repo, memctx, path):
        if path not in ctx:
            return None
        fctx = ctx[path]
        return context.memfilectx(
            repo, memctx, path, fctx.data(), islink=fctx.islink(),
            isexec=fctx.isexec(), copysource=fctx.copysource())
    return filectxfn


def _key_argument(x, name):
    args = revsetlang.getargs(x, 1, 1, _(b'%s takes one argument') % name)
    return revsetlang.getstring(args[0], _(b'%s requires a string') % name)


def _indexed(repo, subset, kind, key):
    with commitindex.Finder(repo) as find:
        return subset & smartset.baseset(find(kind, key))


@revsetpredicate(b'commitid(id)', safe=True)
def commitid_revset(repo, subset, x):
    """Changesets whose commit ID is ``id``.  ``re:`` matches the ID with a
    regular expression: ``commitid('re:.')`` is every changeset with one.
    """
    pattern = _key_argument(x, b'commitid')
    kind, pattern, matcher = stringutil.stringmatcher(pattern)
    if kind == b'literal':
        return _indexed(repo, subset, commitkeys.ID, _text(pattern))
    changelog = repo.changelog

    def matches(rev):
        found = commit_id(changelog.changelogrevision(rev).description)
        return found is not None and matcher(found)

    return subset.filter(matches, condrepr=(b'<commitid %r>', pattern))


@revsetpredicate(b'review(revision)', safe=True)
def review_revset(repo, subset, x):
    """Changesets of a code review: ``D123`` (or ``123``), the revision
    that a ``Differential Revision:`` line names, or a Gerrit
    ``Change-Id``."""
    revision = _text(_key_argument(x, b'review'))
    if revision.isascii() and revision.isdigit():
        revision = 'D' + revision
    return _indexed(repo, subset, *_parse_key(b'review:' + _bytes(revision)))


@revsetpredicate(b'bug(number)', safe=True)
def bug_revset(repo, subset, x):
    """Changesets whose summary line names bug ``number`` (``Bug 123`` or
    ``bug 123``)."""
    number = _key_argument(x, b'bug')
    if not (number.isdigit() and len(number) <= commitkeys.BUG_DIGITS):
        raise error.InputError(
            _(b'bug requires a number of at most %d digits')
            % commitkeys.BUG_DIGITS)
    return _indexed(repo, subset, *_parse_key(b'bug:' + number))


def _parse_key(key):
    """``(kind, key)`` for a key as typed (bytes)."""
    try:
        return commitkeys.parse_key(_text(key))
    except ValueError as err:
        raise error.InputError(stringutil.forcebytestr(err),
                               hint=_(b'see hg help commitid-lookup'))


def _parse_keys(keys):
    """``[(kind, key)]`` for keys as typed (bytes)."""
    return [_parse_key(key) for key in keys]


def _lookup(repo, keys, bounded=False):
    """``[(key as typed, hex node)]`` for ``keys`` in ``repo``, in
    order.  ``bounded`` (a server's answer): each key at most
    ``MAX_MATCHES`` changesets, the answer at most ``MAX_ANSWER`` bytes,
    else ``InputError``."""
    parsed = _parse_keys(keys)
    began = time.process_time()
    found, size = [], 0
    node = repo.changelog.node
    with commitindex.Finder(repo) as find:
        for typed, (kind, key) in zip(keys, parsed):
            revs = find(kind, key)
            if bounded:
                if len(revs) > MAX_MATCHES:
                    raise error.InputError(
                        _(b'%s matches %d changesets, more than a lookup '
                          b'answers (%d)') % (typed, len(revs), MAX_MATCHES),
                        hint=_(b"clone, then hg log -r 'bug(N)'"))
                # A line of the wire's answer: key, space, node, newline.
                size += len(revs) * (len(typed) + 42)
                if size > MAX_ANSWER:
                    raise error.InputError(
                        _(b'the answer would exceed %d bytes')
                        % MAX_ANSWER, hint=_(b'ask for fewer keys'))
            found.extend((typed, nodemod.hex(node(rev))) for rev in revs)
    repo.ui.debug(b'commitid: %d keys looked up in %.1f ms of CPU\n'
                  % (len(keys), (time.process_time() - began) * 1000))
    return found


def _served_lookup(repo, keys):
    """``_lookup`` for a server: each distinct key once, at most
    ``MAX_KEYS`` of them, the answer bounded."""
    keys = list(dict.fromkeys(keys))
    if len(keys) > MAX_KEYS:
        raise error.InputError(
            _(b'%d keys in one lookup, more than %d') % (len(keys), MAX_KEYS),
            hint=_(b'ask in several lookups'))
    return _lookup(repo, keys, bounded=True)


@command(
    b'commitid-lookup',
    [(b'', b'remote', b'',
      _(b'ask this server (URL or path) instead of the local repository'),
      _(b'SOURCE'))] + cmdutil.formatteropts,
    _(b'[--remote SOURCE] KEY...'),
    helpcategory=command.CATEGORY_CHANGE_NAVIGATION,
    optionalrepo=True,
)
def commitid_lookup(ui, repo, *keys, **opts):
    """print the changesets that carry commit IDs, reviews or bugs

    A KEY is a commit ID, ``D123`` or a ``Change-Id`` (a review), or
    ``bug 123``; ``id:``, ``review:`` or ``bug:`` before it says which.
    Each match prints as ``KEY NODE``, oldest first; hidden changesets
    count only with ``--hidden``.

    With ``--remote`` the server looks the keys up, all in one request,
    with nothing cloned; it needs the commitid extension too, and
    answers at most 1,000 distinct keys, 1,000 changesets a key and 4 MB
    (``hg help -e commitid``).  ``[http] timeout`` bounds a wait on a
    server that stalls.

    Returns 0 when every key matched a changeset, 1 otherwise.
    """
    if not keys:
        raise error.InputError(_(b'give at least one key'))
    remote = opts.get('remote')
    if remote:
        found = _remote_lookup(ui, repo, remote, keys)
    elif repo is None:
        raise error.RepoError(_(b'there is no Mercurial repository here '
                                b'(.hg not found)'),
                              hint=_(b'or ask a server with --remote'))
    else:
        found = _lookup(repo, keys)
    with ui.formatter(b'commitid-lookup', _hgcompat.bytes_opts(opts)[0]) \
            as fm:
        for typed, node in found:
            fm.startitem()
            fm.write(b'key node', b'%s %s\n', typed, node)
    return 0 if set(keys) <= {typed for typed, node in found} else 1


def _remote_lookup(ui, repo, source, keys):
    typed_of = {}
    for typed, (kind, key) in zip(keys, _parse_keys(keys)):
        typed_of.setdefault(b'%s:%s' % (_bytes(kind), _bytes(key)),
                            []).append(typed)
    if len(typed_of) > MAX_KEYS:
        raise error.InputError(
            _(b'%d keys in one lookup, more than a server answers (%d)')
            % (len(typed_of), MAX_KEYS), hint=_(b'ask in several lookups'))
    path = urlutil.get_unique_pull_path_obj(b'commitid-lookup', ui, source)
    seconds = ui.configwith(float, b'commitid', b'remote-deadline')
    if not seconds > 0:
        raise error.Abort(_(b'commitid.remote-deadline must be a positive '
                            b'number of seconds'),
                          hint=_(b'it is %g') % seconds)
    with _hgnet.deadline(seconds) as step:
        try:
            peer = hg.peer(repo or ui, {}, path)
            try:
                local = peer.local()
                if local is not None:
                    # A path: no server, the repository as a server would
                    # show it.
                    return _lookup(local.filtered(b'served'), keys)
                if not peer.capable(WIRE_COMMAND):
                    raise error.Abort(_(b'%s cannot look up commit IDs')
                                      % peer.url(),
                                      hint=_(b'the server needs the commitid '
                                             b'extension'))
                reply = _bounded_call(peer, b'\n'.join(typed_of))
                url = peer.url()
            finally:
                peer.close()
        except Exception:
            if step.expired:
                raise _past_deadline(path, seconds)
            raise
    if step.expired:
        # A cut stream can also end as a short answer.
        raise _past_deadline(path, seconds)
    found = []
    for line in reply.splitlines():
        key, _space, node = line.rpartition(b' ')
        if key not in typed_of or len(node) != 40 or \
                node.strip(b'0123456789abcdef'):
            raise error.Abort(
                _(b'%s answered the lookup with a line that is no '
                  b'match: %s') % (url, stringutil.ellipsis(
                      stringutil.escapestr(line), 60)),
                hint=_(b'is it a Mercurial server with the commitid '
                       b'extension?'))
        found.extend((typed, node) for typed in typed_of[key])
    return found


def _past_deadline(path, seconds):
    return error.Abort(_(b'%s did not answer the lookup within %g seconds')
                       % (urlutil.hidepassword(path.loc), seconds),
                       hint=_(b'commitid.remote-deadline bounds the wait'))


def _bounded_call(peer, keys):
    """The server's answer to ``commitidlookup`` of ``keys``, reading no
    more than ``MAX_ANSWER`` bytes of it (a server may send without
    end)."""
    try:
        if hasattr(peer, '_sendrequest'):
            # SSH: the answer's frame, whatever length it claims, read
            # only as far as the bound.
            answer = peer._sendrequest(WIRE_COMMAND, {b'keys': keys},
                                       framed=True)
        else:
            answer = peer._callstream(WIRE_COMMAND, keys=keys)
        try:
            reply = answer.read(MAX_ANSWER + 1)
        finally:
            if not hasattr(peer, '_sendrequest'):
                answer.close()
    except OSError as err:
        # A stall past ``http.timeout``, a connection cut mid-answer.
        raise error.Abort(_(b'%s did not finish its answer to the '
                            b'lookup: %s')
                          % (peer.url(), stringutil.forcebytestr(err)),
                          hint=_(b'[http] timeout bounds a wait'))
    if len(reply) > MAX_ANSWER:
        raise error.Abort(_(b'%s answered a lookup with more than %d bytes')
                          % (peer.url(), MAX_ANSWER))
    return reply


def _capabilities(orig, repo, proto, *args, **kwargs):
    return orig(repo, proto, *args, **kwargs) + [WIRE_COMMAND]


@wireprotov1server.wireprotocommand(WIRE_COMMAND, b'keys',
                                    permission=b'pull')
def wire_commitidlookup(repo, proto, keys):
    """``kind:key node`` lines for the keys (``kind:key``, one a line);
    a request that is refused gets the reason as an error."""
    try:
        found = _served_lookup(repo, keys.split(b'\n'))
    except error.InputError as err:
        return wireprototypes.ooberror(_refusal(err) + b'\n')
    return wireprototypes.bytesresponse(b''.join(
        b'%s %s\n' % (key, node) for key, node in found))


def _refusal(err):
    """What a server says when it refuses a lookup: the message and
    the hint."""
    if err.hint:
        return b'%s (%s)' % (err.message, err.hint)
    return err.message


def web_commitid(web):
    """/json-commitid?key=KEY[&key=KEY...]: the changesets that carry
    each key, as JSON: ``{"KEY": ["node", ...], ...}``."""
    keys = web.req.qsparams.getall(b'key')
    answer = {_text(key): [] for key in keys}
    try:
        found = _served_lookup(web.repo, keys)
    except error.InputError as err:
        web.res.status = b'400 Bad Request'
        answer = {'error': _text(_refusal(err))}
        found = []
    for typed, node in found:
        answer[_text(typed)].append(_text(node))
    web.res.headers[b'Content-Type'] = b'application/json'
    web.res.setbodybytes(json.dumps(answer, indent=1).encode() + b'\n')
    return web.res.sendresponse()


@templatekeyword(b'commitid', requires={b'ctx'})
def commitid_keyword(context, mapping):
    """String. The changeset's commit ID (MozReview-Commit-ID), or empty."""
    return commit_id(context.resource(mapping, b'ctx').description()) or b''
