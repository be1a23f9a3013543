# zstdstore - revlog compression with trained zstd dictionaries
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""store revlogs with zstd dictionaries trained on the repository's history

Small revlog chunks (changelog entries, manifest deltas, small files)
compress badly when each starts from nothing.  This extension adds the
revlog compression engine ``zstd-dict``: each chunk is a zstd frame
compressed with a dictionary trained on the repository's own recent
history, one dictionary per revlog class (changelog, manifest, filelogs).
On real repositories the changelog shrinks by about 30% against core's
zstd and zlib, and reads faster.

New chunks are compressed at ``zstdstore.level`` (1 to 22, default 6: the
same read speed as level 3, and measured 8% smaller filelogs, for about 3
times the compression time).  A delta chain is at most 500 deltas long unless
``format.maxchainlen`` sets another bound: the dictionaries make deltas so
small that core's own bound, by bytes, would let chains grow past core
zstd's and slow reads of old revisions (``hg annotate``).

Convert a repository in one rewrite: train its dictionaries while it is
still stored with zlib or zstd, then upgrade::

  [extensions]
  zstdstore =

  $ hg zstd-train
  $ hg debugupgraderepo --run --config format.revlog-compression=zstd-dict
  $ hg zstd-stats

or, for a store too big for core's upgrade (it writes a second store and,
at 463,000 revlogs, needs 1 GB of memory), convert in place, one revlog at
a time, keeping the deltas the store has::

  $ hg zstd-train
  $ hg zstd-recompress --convert

or create one that uses it from the start (its first dictionaries come
from ``hg zstd-train`` once it has history, and ``hg zstd-recompress``
then rewrites what was stored before them)::

  $ hg init --config format.revlog-compression=zstd-dict repo

Such a repository carries the requirement ``exp-compression-zstd-dict``:
a Mercurial without this extension refuses it with "repository requires
features unknown to this Mercurial" instead of misreading it.  The Rust
core (``rhg`` and the Rust module policy) cannot read these chunks either.

Chunks for which a dictionary does not pay (chunks too large for a
dictionary to matter, or before any dictionary exists) are stored as core
Mercurial's own zstd chunks, which every Mercurial with zstd reads.

Dictionaries live in ``.hg/store/zstd-dicts/``, one immutable file per
dictionary, named by its dict ID; ``active`` names the dictionary new
chunks use for each class.  They travel with local clones, ``hg clone
--stream``, stream clone bundles and shares.  Pulls and pushes carry
uncompressed deltas, so any peer, with or without this extension,
exchanges changesets with such a repository; the receiver compresses
with its own engine.

Retraining happens on command only: run ``hg zstd-train`` when history has
drifted (``hg zstd-stats`` shows the share of chunks each dictionary
covers; for a busy repository, weekly from cron).  Each dictionary is
``zstdstore.dict-size`` bytes (256 to 16m, default 112k), trained on up to
``zstdstore.sample-budget`` bytes of the newest chunks of its revlog class
(1k to 1g, default 16m); ``--dict-size`` and ``--sample-budget`` override
them for one run.  A value outside these ranges stops the command with
one error naming it.  A retrained dictionary gets a new ID, one that no
dictionary of the store has (chosen at random, as zstd's own are), and
is used for new chunks; old chunks keep decoding with their own, until
``hg zstd-recompress`` rewrites them.  Old dictionary
files are never deleted.

``hg zstd-recompress`` holds the store lock and replaces each revlog by
renames that leave a valid revlog at every instant, so it can be killed at
any point; running it again finishes the job.  Readers keep working
meanwhile (``hg log``, ``hg serve``): a reader that finds the revlog it
loaded replaced loads it again and reads on.

A missing or corrupt dictionary file stops any command that needs it with
an error that names the file: copy it back from another clone of the
repository (``.hg/store/zstd-dicts/ID``), or from a backup, or clone the
repository again.  A damaged ``active`` file stops commands that write
revisions, naming it; ``hg zstd-train`` writes a new one.  A stream clone
checks the dictionaries and the ``active`` file it receives, and refuses
damaged ones before the clone is used.
"""

from mercurial import (
    cmdutil,
    error,
    extensions,
    pycompat,
    registrar,
    revlog,
    streamclone,
    util,
)
from mercurial.i18n import _
from mercurial.revlogutils import randomaccessfile
from mercurial.upgrade_utils import engine as upgrade_engine

import zstdwire
from hgext3rd import _hgcompat, _hgconfig

from . import engine, maintenance, readpath

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

#: ``zstdstore.dict-size``: zstd trains no smaller dictionary, and the cap
#: keeps a slip (``1g``) from asking the trainer for memory it lacks.
DICT_SIZES = (zstdwire.training.MIN_DICT_SIZE, 16 * 1024 * 1024)
#: ``zstdstore.sample-budget``: the samples are held in memory at once.
SAMPLE_BUDGETS = (1024, 1024 * 1024 * 1024)

configitem(b'zstdstore', b'level', default=engine.DEFAULT_LEVEL)
configitem(b'zstdstore', b'dict-size', default=112 * 1024)
configitem(b'zstdstore', b'sample-budget', default=16 * 1024 * 1024)


@command(
    b'zstd-train',
    [
        (b'', b'dict-size', 0, _(b'dictionary size in bytes (default: '
                                 b'zstdstore.dict-size)'), _(b'BYTES')),
        (b'', b'sample-budget', 0, _(b'bytes of recent chunks to train on '
                                     b'per class (default: '
                                     b'zstdstore.sample-budget)'), _(b'BYTES')),
    ],
    _(b'hg zstd-train [--dict-size BYTES] [--sample-budget BYTES]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def zstd_train(ui, repo, **opts):
    """train new dictionaries from the repository's recent history

    One dictionary is trained per revlog class (changelog, manifest,
    filelogs) from its most recent stored chunks, and becomes the one new
    chunks use.  Existing chunks keep their dictionary until
    :hg:`zstd-recompress` rewrites them.  A class with too little history
    keeps its current dictionary (or none).

    A repository still stored with zlib or zstd can be trained too:
    :hg:`debugupgraderepo` to ``zstd-dict`` then writes every chunk with
    the new dictionaries, in one rewrite.
    """
    maintenance.train(
        ui, repo,
        dict_size=_training_size(ui, opts, b'dict-size', DICT_SIZES),
        budget=_training_size(ui, opts, b'sample-budget', SAMPLE_BUDGETS))


def _training_size(ui, opts, name, limits):
    """``--NAME`` if given, else ``zstdstore.NAME``; aborts outside
    ``limits``."""
    given = opts[pycompat.sysstr(name).replace('-', '_')]
    if not given:
        return _hgconfig.config_bytes(ui, b'zstdstore', name, *limits)
    if not limits[0] <= given <= limits[1]:
        raise error.Abort(
            _(b'--%s must be from %d to %d bytes') % (name, *limits),
            hint=_(b'it is %d') % given)
    return given


@command(
    b'zstd-recompress',
    [(b'', b'convert', False,
      _(b'first make a repository of another engine use this one, in '
        b'place'))],
    _(b'hg zstd-recompress [--convert]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def zstd_recompress(ui, repo, **opts):
    """rewrite every stored chunk with the active dictionaries

    Runs under the store lock.  Each revlog is replaced atomically, so the
    command can be interrupted at any point; running it again skips the
    revlogs already done with the same dictionaries and finishes the rest.

    With ``--convert``, a repository stored with zlib or core's zstd (its
    dictionaries trained by ``hg zstd-train``) first gets the requirement
    ``exp-compression-zstd-dict``, under the working directory's lock too;
    then every chunk is rewritten as above.  Unlike ``hg
    debugupgraderepo``, this writes no second store and holds one revlog
    at a time: on a store of 463,000 revlogs the upgrade needs 1 GB of
    memory.  Deltas stay as they are: the upgrade computes them again,
    with chains of at most 500 deltas, while these keep the chains the
    store has.  An interrupted conversion leaves a repository that reads
    as before (each chunk says how it is compressed); run the command
    again to finish it.  Stop long-running readers, such as ``hg serve``,
    for the conversion, as for an upgrade: one that opened the repository
    before it may abort on a revlog rewritten under it (never with wrong
    data: every revision is checked against its hash).  A share made
    without share-safe keeps its own list of requirements: the conversion
    is refused there, and after converting its source, such a share needs
    ``exp-compression-zstd-dict`` added to its ``.hg/requires`` (with the
    extension enabled it reads the store either way).
    """
    maintenance.recompress(ui, repo, convert=opts.get('convert'))


@command(
    b'zstd-stats',
    cmdutil.formatteropts,
    _(b'hg zstd-stats'),
    helpcategory=command.CATEGORY_MAINTENANCE,
    intents={registrar.INTENT_READONLY},
)
def zstd_stats(ui, repo, **opts):
    """show how each revlog class is stored, beside core's zstd

    Per class: revisions, the bytes of the chunks once decompressed, the
    bytes stored now, the bytes core Mercurial's zstd would store for the
    same chunks (each recompressed here at zstdstore.level), and the share
    of chunks stored with each dictionary, core's zstd, zlib, or raw.
    """
    maintenance.stats(ui, repo, opts)


def reposetup(ui, repo):
    if repo.local():
        options = repo.svfs.options
        options[engine.OPT_LEVEL] = engine.configured_level(ui)
        # core registers this item with a dynamic default: name ours
        if ui.config(b'format', b'maxchainlen', None) is None:
            options[engine.OPT_MAX_CHAIN_LEN] = engine.MAX_CHAIN_LEN


def extsetup(ui):
    _hgcompat.report_our_crashes()
    if engine.ENGINE not in util.compengines:
        util.compengines.register(engine.ZstdDictEngine())
    wrap = extensions.wrapfunction
    wrap(revlog.revlog, '__init__', engine.revlog_init)
    wrap(streamclone, '_walkstreamfiles', engine.walkstreamfiles)
    for consume in ('consumev1', 'consumev2', 'consumev3'):
        wrap(streamclone, consume, engine.check_streamed)
    wrap(streamclone, 'local_copy', engine.check_local_copy)
    wrap(upgrade_engine, '_clonerevlogs', engine.clonerevlogs)
    if _hgcompat.CLONE_REUSES_COMPRESSION:
        wrap(revlog.revlog, 'clone', engine.clone)

    wrap(revlog._InnerRevlog, '_chunks', readpath.chunks)
    wrap(revlog._InnerRevlog, '_chunk', readpath.inner_chunk)
    wrap(revlog.revlog, '_get_data', readpath.get_data)
    wrap(revlog.revlog, '_load_inner', readpath.load_inner)
    wrap(revlog.revlog, 'reading', readpath.reading)
    wrap(revlog.revlog, '_writing', readpath.writing)
    if _hgcompat.HAS_RAW_COMP_CHUNK:
        wrap(revlog.revlog, 'raw_comp_chunk', readpath.raw_comp_chunk)
    wrap(randomaccessfile.randomaccessfile, '_open', readpath.open_segment)
