# bundlegen - generate clone bundles, their manifest and index
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""generate clone bundles from one consistent snapshot, for a CDN

``hg bundlegen`` makes the clone bundles of a server repository, writes
them where a web server or CDN serves them, and publishes them in the
repository's ``clonebundles.manifest``, which ``hg serve`` hands to cloning
clients.  Run it from cron or a systemd timer (``contrib/bundlegen/`` has
examples)::

  [extensions]
  bundlegen =
  # core's: makes hg serve offer the manifest to clients
  clonebundles =

  [bundlegen]
  output = /var/www/hg-bundles/myrepo
  base-url = https://cdn.example.com/hg-bundles/myrepo
  formats = zstd-max, gzip, stream

Object storage: ``bundlegen`` uploads the bundles itself to any number of
S3-compatible destinations (AWS S3 in several regions, GCS's XML API,
MinIO, versitygw...), each with manifest lines of its own.  Needs boto3
(the ``s3`` extra of your vcsperf checkout: ``pip install
'/path/to/vcsperf[s3]'``); credentials come the way boto3 finds them
(environment, ``~/.aws``, instance role; ``profile`` picks one)::

  [bundlegen]
  output = /var/lib/hg-bundles/mozilla-central
  # clients' order of preference, when they state none
  destinations = cdn, usw2, euc1

  [bundlegen-destinations]
  cdn.url = s3://moz-hg-bundles/mozilla-central
  cdn.region = us-west-2
  cdn.base-url = https://hg.cdn.example.com/mozilla-central
  cdn.cdn = true
  usw2.url = s3://moz-hg-bundles/mozilla-central
  usw2.region = us-west-2
  usw2.attributes = ec2region=us-west-2
  euc1.url = s3://moz-hg-bundles-euc1/mozilla-central
  euc1.region = eu-central-1
  euc1.attributes = ec2region=eu-central-1
  # a server that is not AWS: its endpoint (path-style URLs)
  # local.endpoint = http://127.0.0.1:7070

A destination's settings: ``url`` (``s3://BUCKET/PREFIX``, required),
``region`` (default ``us-east-1``), ``endpoint``, ``profile``,
``base-url`` (where clients download from, by default the bucket's S3
URL), ``attributes`` (``KEY=VALUE`` pairs its manifest lines carry, for
``ui.clonebundleprefers``), ``cdn`` (``true`` adds ``cdn=true``),
``cache-control`` (default ``public, max-age=31536000, immutable``: a
bundle's name never stands for other bytes).  Uploads go in 64 MiB parts
with a SHA-256 checksum per part that the server checks, with retries, as
``application/x-mercurial-bundle``; an object already there under the
same name, size and sha256 is not sent again.

Every run first checks each destination (boto3 installed, credentials
found, the bucket answering), before it builds anything.  All of a run's
requests to object storage together (checks, uploads, deletes) take at
most ``bundlegen.upload-timeout`` seconds (default 3600; raise it for
bundles of many GiB on a slow link), however a server stalls or trickles;
besides, each connect waits at most 20 s and each read 60 s, and a
request is tried 5 times.  A run that passes the deadline aborts before
the manifest is touched, and takes back what it uploaded.

One run:

1. decides whether new bundles are due: when the repository moved at
   least ``bundlegen.min-changesets`` (default 1) changesets or
   ``bundlegen.min-bytes`` (default 0: off) bytes of store past the last
   published tip, or formats or destinations changed, or ``--force``;
   otherwise it says why it does nothing (a no-op takes well under a
   second).  ``--dry-run`` says what a run would build and retire.
   Before it says the bundles are published already, it checks that
   they are: every object of the last generation on every destination
   (one HEAD each), the files of the output directory when ``base-url``
   serves it, and the manifest (the sha256 of what it last wrote, kept
   in ``bundles.json``).  A missing object is uploaded again from its
   local copy once the copy's sha256 is checked; without a good copy,
   new bundles are built.  A manifest that something else rewrote is
   written again;
2. takes a snapshot of the repository under its store lock, in the
   ``.hg`` directory that holds the store (``bundlegen-snapshot-*``), so
   with hardlinks whatever filesystem the output directory is on: seconds
   even for big repositories.  A push landing meanwhile cannot tear the
   bundles apart, and all of them hold the same changesets;
3. builds every format from the snapshot, each changegroup with what
   a pull from the server sends (no secret changeset; the published tip
   is the last one a pull sends, and secret changesets count for no
   ``min-changesets`` nor ``--check-fresh``'s changesets behind), in
   parallel up to
   ``bundlegen.jobs`` processes, in a directory of its own in the output
   directory (``.bundlegen-tmp-*``, removed by the next run if this one is
   killed), saying each one's size and time as it is done;
4. checks each bundle's spec (``hg debugbundle --spec``), computes its
   sha256 and moves it to ``<tip node>.<format>.<sha256 prefix>.hg``;
5. runs ``bundlegen.upload-command`` once per bundle that the published
   manifest does not name already, if set, with core clone-bundles'
   variables ``HGCB_BUNDLE_PATH`` and ``HGCB_BUNDLE_BASENAME``, and
   ``HGCB_BUNDLE_URL``, ``HGCB_BUNDLE_SPEC``, ``HGCB_BUNDLE_SHA256`` (the
   older ``BUNDLE_PATH``, ``BUNDLE_NAME``, ``BUNDLE_SPEC``,
   ``BUNDLE_SHA256`` and ``BUNDLE_URL`` are still set); then uploads every
   bundle to every destination;
6. replaces ``clonebundles.manifest`` atomically, keeping the previous one
   as ``clonebundles.manifest.old``.  Its lines come in the order of
   ``bundlegen.formats`` (clients take the first they can use unless
   ``ui.clonebundleprefers`` says otherwise), and within a format the
   ``base-url`` line first, then one per destination; they carry
   ``BUNDLESPEC``, ``DIGEST=sha256:...`` (clients check it), for https
   URLs ``REQUIRESNI=true``, and the destination's attributes;
7. records the generation in ``bundles.json`` next to the bundles
   (formats, specs, sizes, digests, build times), keeping the new
   generation and the ``bundlegen.keep`` ones before it (default 1, at
   least 1: the generation a run replaces is never deleted by that run,
   so a client that read the manifest just before, or a CDN's cached
   copy of it, still finds its bundle).  The bundles of older generations
   are recorded as still to delete (``undeleted``), then deleted from
   every destination, through ``bundlegen.delete-command`` (with
   ``HGCB_BUNDLE_URL`` and ``HGCB_BASENAME``, as core's) and from the
   output directory.  A deletion that is refused (an Object-Lock bucket,
   a policy without delete, a server that is down, a failing delete
   command) stays recorded and is tried again by every later run, even
   one with nothing else to do; the run says so in one line per place,
   goes on with the other places, and exits with status 1.  Last, it
   deletes the other bundles of the output directory, named neither by the
   new manifest nor by the one it replaced, once they are
   ``bundlegen.expire-days`` old.

Exit status: 0 when the bundles are published (or nothing was due), 1
when they are but some retired bundles could not be deleted, 255 on an
abort (the manifest is then unchanged).

Service operation: progress lines and one line per format go to
``ui.status`` on a terminal or not (to stderr with ``-T json``, which
prints one object per bundle, or one saying why nothing was done); a
second run started meanwhile says whose lock it waits for, and does
nothing if the first published the same tip; it waits at most
``ui.timeout`` seconds (core's lock setting, default 600), then aborts.
``bundlegen`` events go to ``ui.log`` (blackbox).

bundlegen owns ``.hg/clonebundles.manifest``.  Core's clone-bundles
auto-generation writes the same file, so a run aborts when
``clone-bundles.auto-generate.formats`` is set; use one or the other.  If
something else rewrites the manifest (``hg admin::clone-bundles-refresh``
run by hand, an editor), the next run notices and writes its own again.

A bundle's name holds the start of its sha256, so a name never stands for
other bytes, and no run changes a file that clients may be sent: a rerun
at the same tip whose bundle differs (bundles also hold caches and
obsolescence markers) publishes it under a new name.  The files of the
manifest a run replaces stay at least until the next run, for clients
that read it just before (see ``bundlegen.keep``).  The upload command
may write in place (a plain ``cp`` to a web server's directory): what it
writes is named by no manifest yet.  Use one output directory per
repository, outside its ``.hg`` (an output directory there, or in a
share's source's ``.hg``, is refused: Mercurial keeps its own files
there).

A bad configuration, a manifest clients cannot parse, or a failed upload
to any destination stops the run before the manifest is touched: clients
keep getting the bundles they got before (a failed run deletes what it
uploaded).  ``bundlegen.base-url`` must be an absolute
``http``, ``https`` or ``file`` URL with no query or fragment, and
characters a URL may not hold percent-encoded (a space as ``%20``); every
manifest line is parsed back as clients parse it before it is published.

A run killed with its process group (``kill -9 -PGID``, or systemd
stopping the unit) leaves nothing running.  On Linux, its ``hg bundle``
processes are also killed when only the run is; elsewhere they run on in
that run's own directory, and the next run does not wait for them.

Monitoring: with ``bundlegen.metrics-dir`` (or ``--metrics-dir``), every
run but a dry run writes a metrics file in Prometheus' text format there,
for node_exporter's textfile collector (the directory its
``--collector.textfile.directory`` names)::

  [bundlegen]
  output = /var/www/hg-bundles/myrepo
  base-url = https://cdn.example.com/hg-bundles/myrepo
  metrics-dir = /var/lib/prometheus/node-exporter

The file is ``vcsperf_bundlegen_<name>_<hash of the path>.prom``, one per
repository, replaced by rename (runs take turns through
``.<file>.lock`` beside it).  Every sample carries ``vcs="hg"`` and
``repository`` (the repository's path):

- ``vcsperf_bundlegen_last_success_timestamp_seconds`` and
  ``vcsperf_bundlegen_last_failure_timestamp_seconds`` (each kept until a
  later run ends that way), ``vcsperf_bundlegen_last_run_success`` (1 or
  0; a run that exits 1 because retired bundles could not be deleted
  counts as failed), ``vcsperf_bundlegen_last_run_duration_seconds``,
  ``vcsperf_bundlegen_runs_total{outcome="success"|"failure"}``;
- ``vcsperf_bundlegen_published_info{tip="<node>"}`` (1),
  ``vcsperf_bundlegen_published_timestamp_seconds`` (when the published
  bundles were made), ``vcsperf_bundlegen_published_behind_revisions``
  (changesets of the repository the published bundles lack);
- ``vcsperf_bundlegen_bundle_size_bytes{format}`` and
  ``vcsperf_bundlegen_bundle_build_duration_seconds{format}`` of the
  published bundles; ``vcsperf_bundlegen_upload_bytes{destination}``
  and ``vcsperf_bundlegen_upload_duration_seconds{destination}`` when the
  run uploaded.

A metrics directory that cannot be written stops the run before it does
anything; a file that cannot be written once the run is done is a
``warning:`` line, and the run's exit status stays what it was.
``contrib/bundlegen/vcsperf-alerts.yml`` has alert rules.

``--check-fresh`` builds nothing: it prints one line and exits 0 when the
published bundles are fresh, 1 when they are stale: more than
``--max-behind`` changesets behind the repository (default 1000), older
than ``--max-age`` seconds (default 172800, two days) while the
repository moved past them, a manifest that is not the one bundlegen
wrote, or a URL of the manifest that does not answer a HEAD with its
bundle (gone, another size, an error, a redirect loop or more than 5
redirects).  Each request waits at most 10 seconds for a connect or a
read, all of them together ``--check-timeout`` seconds (default 60).  For
cron mail, systemd's ``OnFailure=``, or a Nagios-style check.

Formats:

.. bundlegen-formats

Clients that cannot fetch a bundle (a 404, a refused connection) fall
back to a normal clone when they set ``ui.clonebundlefallback = true``.
A truncated or corrupt download is caught by the digest, and a stock
client then stops the clone with an error; a client with this extension
enabled falls back to a normal clone instead, as long as nothing of the
bundle stayed in the store (always so for changegroup bundles, whose
transaction is rolled back; a broken stream bundle still stops the clone,
whose destination is then removed).
"""

import os

from mercurial import (
    cmdutil,
    error,
    exchange,
    extensions,
    pycompat,
    registrar,
)
from mercurial.i18n import _

from hgext3rd import _hgcompat
from vcsperf.core import freshness

from . import fallback, formats, monitoring, run, settings

# The formats' paragraphs come from their table, as core's ``hg help
# bundlespec`` lists the compression engines from theirs.
__doc__ = __doc__.replace('.. bundlegen-formats\n', formats.help_text())

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

configitem(b'bundlegen', b'output', default=None)
configitem(b'bundlegen', b'base-url', default=None)
configitem(b'bundlegen', b'formats', default=[b'zstd-max', b'gzip',
                                              b'stream'])
configitem(b'bundlegen', b'zstd-level', default=19)
configitem(b'bundlegen', b'zstd-threads',
           default=min(os.cpu_count() or 1, 200))
configitem(b'bundlegen', b'jobs', default=os.cpu_count() or 1)
configitem(b'bundlegen', b'expire-days', default=7)
configitem(b'bundlegen', b'upload-command', default=None)
configitem(b'bundlegen', b'delete-command', default=None)
configitem(b'bundlegen', b'keep', default=1)
configitem(b'bundlegen', b'upload-timeout', default=3600)
configitem(b'bundlegen', b'min-changesets', default=1)
configitem(b'bundlegen', b'min-bytes', default=0)
configitem(b'bundlegen', b'destinations', default=[])
configitem(b'bundlegen', b'metrics-dir', default=None)


@command(
    b'bundlegen',
    [
        (b'', b'output', b'', _(b'write bundles to this directory'),
         _(b'DIR')),
        (b'', b'base-url', b'', _(b'URL under which the directory is '
                                  b'served'), _(b'URL')),
        (b'f', b'force', None, _(b'build new bundles even if the '
                                 b'repository has not moved enough')),
        (b'n', b'dry-run', None, _(b'say what a run would do, and do '
                                   b'nothing')),
        (b'', b'metrics-dir', b'', _(b'write the metrics file there '
                                     b'(default: bundlegen.metrics-dir)'),
         _(b'DIR')),
        (b'', b'check-fresh', None, _(b'build nothing: exit 1 unless the '
                                      b'published bundles are fresh')),
        (b'', b'max-age', freshness.DEFAULT_MAX_AGE,
         _(b'with --check-fresh: seconds bundles may be older than the '
           b'repository\'s tip'), _(b'SECONDS')),
        (b'', b'max-behind', freshness.DEFAULT_MAX_BEHIND,
         _(b'with --check-fresh: changesets the bundles may lack'),
         _(b'N')),
        (b'', b'check-timeout', freshness.TOTAL_TIMEOUT,
         _(b'with --check-fresh: seconds all HEAD requests may take'),
         _(b'SECONDS')),
    ] + cmdutil.formatteropts,
    _(b'hg bundlegen [--output DIR] [--base-url URL] [-f] [-n] [-T json] '
      b'[--metrics-dir DIR] [--check-fresh [--max-age SECONDS] '
      b'[--max-behind N] [--check-timeout SECONDS]]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def bundlegen(ui, repo, output=None, base_url=None, **opts):
    """generate clone bundles and publish them in the manifest

    Builds every format of ``bundlegen.formats`` from one snapshot of the
    repository, verifies each bundle, uploads it to every destination,
    then replaces ``.hg/clonebundles.manifest`` (see :hg:`help -e
    bundlegen`).  Does nothing when the repository has not moved past
    ``bundlegen.min-changesets`` or ``bundlegen.min-bytes`` since the
    last bundles, unless ``--force``; ``--dry-run`` says what a run would
    do.  With ``-T json``, one object per bundle (or one saying why
    nothing was done); progress then goes to stderr.

    Only one run per repository at a time; a second one says whose run it
    waits for, and then does nothing if that run published this tip.
    """
    if opts.get('check_fresh'):
        if min(opts['max_age'], opts['max_behind']) < 0 or \
                opts['check_timeout'] < 1:
            raise error.Abort(_(b'--max-age and --max-behind cannot be '
                                b'negative, nor --check-timeout below 1'))
        checked = settings.Settings(ui, output, base_url)
        return monitoring.check_fresh(
            ui, repo, settings.output_directory(repo, checked.output),
            opts['max_age'], opts['max_behind'], opts['check_timeout'])
    # First, so that a run stopped by its configuration is a failure in
    # the file too.
    report = None
    if not opts.get('dry_run'):
        report = monitoring.metrics_report(
            ui, repo, opts.get('metrics_dir')
            or ui.config(b'bundlegen', b'metrics-dir'))
    uploads = {}
    outdir = status = None
    try:
        checked = settings.Settings(ui, output, base_url)
        settings.refuse_core_autogeneration(ui)
        outdir = settings.output_directory(repo, checked.output)
        fm = ui.formatter(b'bundlegen', pycompat.byteskwargs(opts))
        status = run.run(ui, repo, checked, outdir, fm,
                         force=opts.get('force'),
                         dry_run=opts.get('dry_run'), uploads=uploads)
        return status
    finally:
        if report is not None:
            monitoring.write_metrics(
                ui, repo, report, 'success' if status == 0 else 'failure',
                outdir, uploads)


def extsetup(ui):
    _hgcompat.report_our_crashes()
    extensions.wrapfunction(exchange, 'trypullbundlefromurl',
                            fallback.trypullbundlefromurl)
