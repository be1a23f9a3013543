# _hgcompat.py - what vcsperf's extensions need from older Mercurial
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
#
# Not an extension: a module the extensions import.  Its name starts with
# an underscore, it has no docstring (so no help text), no registrar table
# and no setup function, and Mercurial lists disabled extensions only from
# its own hgext directory, never from hgext3rd.
#
# Every probe of an older Mercurial release lives here, marked with the
# release it tracks; when the oldest supported release (constraints.txt)
# passes that mark, the probe and its fallback go.

import inspect
import sys
import traceback

from mercurial import cmdutil, dispatch, extensions, pycompat, revlog, scmutil
from mercurial.revlogutils import deltas

from vcsperf.core import __version__

# The releases every extension is tested with, and the oldest it loads on.
TESTEDWITH = b'6.9 7.0 7.2'
MINIMUM_HG = b'6.9'

# What every extension declares of itself: the suite's release (``hg
# version -v`` shows it beside the extension's name) and where its crashes
# are reported.  The project publishes no address of its own yet, so the
# link names the tracker of the repository the user installed from (the
# README's "Install" says to send ``hg version -v`` with the report).
VERSION = __version__.encode('ascii')
BUGLINK = b'the issue tracker of the vcsperf repository you installed from'

# Mercurial < 7.2: hg holds repository(), peer(), clone() and share();
# 7.2 moved them to mercurial.repo.factory and mercurial.cmd_impls.clone
# and deprecates the names in hg.
try:
    from mercurial.cmd_impls import clone as cloneimpl
    from mercurial.repo import factory as repofactory
except ImportError:
    from mercurial import hg as repofactory
    cloneimpl = repofactory

# Mercurial < 7.1: scmutil.cleanupnodes, since moved to cmdutil.cleanup_nodes.
cleanup_nodes = getattr(cmdutil, 'cleanup_nodes', None) or \
    scmutil.cleanupnodes

# Mercurial < 7.2 (6.9 has it not, 7.2 has it): no revlog.raw_comp_chunk.
HAS_RAW_COMP_CHUNK = hasattr(revlog.revlog, 'raw_comp_chunk')


def _parameters(function):
    """The parameters of ``function`` as Mercurial defines it: this
    module may be imported after extensions (ours too) wrapped it."""
    while hasattr(function, '_origfunc'):
        function = function._origfunc
    return inspect.signature(function).parameters


# Mercurial < 7.2: revlog._loadindex returns only the chunk cache, not the
# index and the chunk cache, and _load_inner takes only that.
_LOAD_INNER_TAKES_INDEX = 'index' in _parameters(revlog.revlog._load_inner)

# Mercurial < 7.1: slicechunk has no ``inlined`` and reads it off the revlog.
_SLICE_KNOWS_INLINE = 'inlined' in _parameters(deltas.slicechunk)

# Mercurial < 7.2 (6.9 has it not, 7.2 has it): revlog.clone always
# compresses again, and takes no ``reuse_compression``.
CLONE_REUSES_COMPRESSION = 'reuse_compression' in _parameters(
    revlog.revlog.clone)


def bytes_opts(opts):
    """``(opts with bytes keys, the key type opts came with)``.

    Mercurial < 7.0: the opts handed to cmdutil.amend have bytes keys,
    from 7.0 str keys."""
    if any(isinstance(k, str) for k in opts):
        return pycompat.byteskwargs(opts), pycompat.sysstr
    return opts, bytes


def vfs_base(opener):
    """The directory a store vfs opens files in, or None.

    Mercurial < 7.1: the fncache vfs keeps its base on the vfs it wraps."""
    return getattr(opener, 'base', None) or getattr(
        getattr(opener, 'vfs', None), 'base', None)


def load_index(rl):
    """Load the index of ``rl`` from disk and build its inner revlog."""
    loaded = rl._loadindex()
    if _LOAD_INNER_TAKES_INDEX:
        rl._load_inner(*loaded)
    else:
        rl._load_inner(loaded)


def slicechunk(inner, revs, targetsize):
    """``deltas.slicechunk`` for the revisions of an inner revlog."""
    if _SLICE_KNOWS_INLINE:
        return deltas.slicechunk(inner, revs, targetsize=targetsize,
                                 inlined=inner.inline)
    return deltas.slicechunk(inner, revs, targetsize=targetsize)


def report_our_crashes():
    """Send a crash in vcsperf's code to BUGLINK, once per process.

    Mercurial reads an extension's ``buglink`` only when the running
    release is missing from its ``testedwith``; on a release we test with
    it sends every crash to its own tracker.  Called from each extension's
    setup: a crash whose traceback passes through our code names our
    tracker and the module of ours nearest the error instead, unless
    ``ui.supportcontact`` (a packager's own address) is set."""
    if _crash_warning not in extensions.getwrapperchain(
            dispatch, '_exceptionwarning'):
        extensions.wrapfunction(dispatch, '_exceptionwarning',
                                _crash_warning)


def _crash_warning(orig, ui):
    ours = _our_module_nearest(sys.exc_info()[2])
    if ours is None or ui.config(b'ui', b'supportcontact') is not None:
        return orig(ui)
    contact = b'%s\n** (the error is in %s, vcsperf %s)' % (
        BUGLINK, pycompat.sysbytes(ours), VERSION)
    with ui.configoverride({(b'ui', b'supportcontact'): contact},
                           b'vcsperf'):
        return orig(ui)


def _our_module_nearest(tb):
    """The name of the innermost module of ours in the traceback ``tb``,
    or None when none of its frames runs our code."""
    ours = None
    for frame, _line in traceback.walk_tb(tb):
        name = frame.f_globals.get('__name__') or ''
        if _is_ours(name, frame.f_globals):
            ours = name
    return ours


def _is_ours(name, module_globals):
    """Whether the module ``name`` (its globals ``module_globals``) is part
    of vcsperf: the core, the codec, the importer, gitbridge, an
    extension (which declares BUGLINK; a package's submodules through
    their package) or a module the extensions import
    (``hgext3rd._NAME``)."""
    parts = name.split('.')
    if parts[0] in ('vcsperf', 'zstdwire', 'pastbytes', 'gitbridge') \
            or module_globals.get('buglink') == BUGLINK:
        return True
    if parts[0] != 'hgext3rd' or len(parts) < 2:
        return False
    package = sys.modules.get('hgext3rd.' + parts[1])
    return parts[1].startswith('_') or \
        getattr(package, 'buglink', None) == BUGLINK
