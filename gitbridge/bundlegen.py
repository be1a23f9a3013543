"""``gitbridge bundlegen``: Git's clone bundles (bundle-uri), published to
object storage the way ``hg bundlegen`` publishes Mercurial's.

From a (bare) Git repository, each run writes one bundle: a full one
(every branch and tag) the first time and after ``bundlegen.incrementals``
incremental ones (default 6), otherwise an incremental one holding what
the branches and tags gained since the previous run.  Then it publishes a
bundle list in Git's bundle-uri format (``mode = all``, ``heuristic =
creationToken``, one ``creationToken`` per bundle, growing) naming the
last full bundle and the incremental ones after it, so that::

  git clone --bundle-uri=https://cdn.example.com/git/firefox/bundle-list \\
      https://git.example.com/firefox

downloads the bundles first and then fetches only what is newer from the
server.  A client that cannot download a bundle (missing, cut short) goes
on with a normal clone.

Settings, in the repository's Git config (``git config -f`` reads this
example as it is)::

  [bundlegen]
      output = /var/lib/git-bundles/firefox
      base-url = https://git.example.com/bundles/firefox
      destinations = usw2 euc1
      keep = 1
      upload-timeout = 3600
      min-commits = 1
      incrementals = 6
      parts = 4
      advertise = true
      metrics-dir = /var/lib/prometheus/node-exporter
  [bundlegen "usw2"]
      url = s3://git-bundles/firefox
      region = us-west-2
      base-url = https://usw2.cdn.example.com/firefox
  [bundlegen "euc1"]
      url = s3://git-bundles-euc1/firefox
      region = eu-central-1
      endpoint = http://127.0.0.1:7070

``output`` holds the local bundles, their list and the record
(``bundles.json``), outside git's own files: an output directory in the
repository's ``.git``, or in a bare repository, is refused (a relative
``output`` of the config is relative to the repository: ``../NAME``
beside a bare one).  ``base-url`` (optional) is where ``output`` is
served: an absolute http, https or file URL without query or fragment,
the rule ``hg bundlegen`` applies; a destination's ``base-url`` (default:
its S3 URL) follows the same rule.  ``destinations`` gives their order
(default: every one configured).  ``keep`` is how many bundle lists
before the newest keep their bundles (default 1, at least 1: the list a
run replaces keeps its bundles until a later run, for clients and CDNs
that read it just before), ``min-commits`` how many new commits make a
run due (default 1), ``incrementals`` how many incremental bundles come
between full ones (default 6), ``parts`` how many packs each full
bundle is also published as (default 0: none; see below),
``upload-timeout`` the seconds each phase
of requests to object storage (checks, uploads, deletes) may take in all
before the run aborts (default 3600), however a server stalls.

Every destination takes the same settings as ``hg bundlegen``'s
(``vcsperf.core.bundlestore``; ``endpoint`` for servers other than AWS)
and gets its own ``bundle-list`` (Git 2.39 and later resolve only
absolute bundle URIs, so each list names its own destination's).
Bundles are ``<token>.<full|incremental>.<sha256 prefix>.bundle``; a name
never stands for other bytes: a bundle of the list that is missing from
``output`` or holds other bytes than the record says starts a new full
bundle, and the run says so (with a ``base-url`` every run reads the
served bundles for this; otherwise a run that extends the list).
Destinations are checked (boto3,
credentials, the bucket) before a bundle is built.  A failed upload to
any destination leaves every bundle list as it was; bundles of older
lists than those kept are deleted, everywhere, only after the new lists
are out.  A run with nothing new checks that the bundles and the list
are on every destination, and uploads again what was deleted there.  A
destination that refuses the deletes (Object Lock, a bucket policy
without deletes) gets a warning, keeps the names in the record
(``undeleted``) for the next run to delete, and the others go on; such a
run exits with status 1.

With ``parts`` N of 2 or more, every full bundle is published a second
time as N packs, ``<token>.full.part<K>.<sha256 prefix>.pack``: its
objects sorted by path (a file's revisions delta against each other in
one pack) and cut into N of about equal size.  The list names them in
the bundle's own section (``gitbridgePart``, a key Git's bundle-uri
client ignores), and ``gitbridge checkout --bundle-uri`` indexes them
side by side instead of the one bundle: ``git index-pack`` reads a pack
on one core, so on a cold worker with two cores or more the seeding
takes about half the time or less.  The cost is the full bundle's size
again on every host.

``advertise`` makes the repository's own Git server name the list: it
sets ``uploadpack.advertiseBundleURIs``, ``bundle.version``,
``bundle.mode`` and one ``bundle.bundlegen.uri`` (the list's URL, updated
in place by every run) in this repository's config, so that a Git 2.40
or later that sets ``transfer.bundleURI`` takes the bundles on a plain
``git clone`` without being told where they are.  ``true`` advertises the
``base-url`` list, or without one the first destination's; a destination
name picks that one's; ``false`` (the default) leaves the config alone
(unset ``uploadpack.advertiseBundleURIs`` to stop).

``metrics-dir`` (or ``--metrics-dir``) is where each run but a dry run
writes its metrics file for node_exporter's textfile collector: the
names of ``hg help -e bundlegen`` with ``vcs="git"``; a format is
``full`` or ``incremental`` (the sizes and build times of the list's
incremental bundles added up), ``published_info``'s ``tip`` is the commit
of the branch HEAD names, and ``published_behind_revisions`` counts
commits.  ``--check-fresh`` writes nothing and exits 1 with one line when
the published bundles are stale: more than ``--max-behind`` commits
behind (default 1000), older than ``--max-age`` seconds (default 172800)
while the repository moved past them, or a bundle or list URL of the
base-url or a destination that does not answer a HEAD with it; else 0
and one line.  Requests as in ``hg bundlegen --check-fresh``
(``--check-timeout``, default 60 seconds in all).

A run with nothing new (the same tips, or fewer than ``min-commits`` new
commits) says so and does nothing but retry undeleted bundles;
``--force`` writes a bundle anyway, ``--dry-run`` says what a run would
do, ``--json`` prints the result as JSON.  One run at a time per output
directory; a second one says whose run it waits for.
"""

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

from gitbridge import gitconfig
from vcsperf.core import bundlestore, freshness, metrics
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.pooling import (
    LockPolicy,
    PidLock,
    describe_owner,
    format_bytes as _size,
)
from vcsperf.core.process import CommandError, git, git_abort
from vcsperf.core.settings import ACCEPTED_BOOLEANS, as_bool
from vcsperf.core.spawn import git_bytes

LIST_NAME = "bundle-list"
RECORD = "bundles.json"
CONTENT_TYPE = "application/x-git-bundle"
#: The most packs a full bundle is published as (``bundlegen.parts``).
MOST_PARTS = 64
#: What the names of a run's temporary files in the output start with.
TEMPORARY = ".bundlegen-tmp-"
#: The id of the one entry ``bundlegen.advertise`` writes in the served
#: repository's ``bundle.*`` config.
ADVERTISED_ID = "bundlegen"
DEFAULTS = {"keep": 1, "min-commits": 1, "incrementals": 6,
            "upload-timeout": 3600, "parts": 0}
#: The place name of the output directory in the record's pending
#: deletions (destinations go by their names).
OUTPUT_PLACE = ""


def add_commands(subparsers):
    parser = subparsers.add_parser(
        "bundlegen", help="write Git bundles and a bundle-uri list, and "
        "publish them to object storage", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", default=".", help="the Git repository "
                        "(default: the current directory)")
    parser.add_argument("--output", help="directory of the local bundles "
                        "(default: git config bundlegen.output)")
    parser.add_argument("--base-url", help="URL under which --output is "
                        "served (default: git config bundlegen.base-url)")
    parser.add_argument("-f", "--force", action="store_true",
                        help="write a bundle even if nothing is due")
    parser.add_argument("-n", "--dry-run", action="store_true",
                        help="say what a run would do, and do nothing")
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON object")
    parser.add_argument("--metrics-dir", metavar="DIR", help="write the "
                        "metrics file there (default: git config "
                        "bundlegen.metrics-dir)")
    parser.add_argument("--check-fresh", action="store_true",
                        help="write nothing: exit 1 unless the published "
                        "bundles are fresh")
    parser.add_argument("--max-age", type=_count, metavar="SECONDS",
                        default=freshness.DEFAULT_MAX_AGE,
                        help="with --check-fresh: seconds bundles may be "
                        "older than the repository's tips (default: %d)"
                        % freshness.DEFAULT_MAX_AGE)
    parser.add_argument("--max-behind", type=_count, metavar="N",
                        default=freshness.DEFAULT_MAX_BEHIND,
                        help="with --check-fresh: commits the bundles may "
                        "lack (default: %d)" % freshness.DEFAULT_MAX_BEHIND)
    parser.add_argument("--check-timeout", type=_count, metavar="SECONDS",
                        default=freshness.TOTAL_TIMEOUT,
                        help="with --check-fresh: seconds all HEAD requests "
                        "may take (default: %d)" % freshness.TOTAL_TIMEOUT)
    parser.set_defaults(func=main)


def _count(text):
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise argparse.ArgumentTypeError("not a whole number: %r" % text)
    return int(text)


def main(args):
    # Paths on the command line are the caller's, relative to where it
    # runs; git config's ``bundlegen.output`` stays the repository's.
    for name in ("output", "metrics_dir"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    try:
        if args.check_fresh:
            return check_fresh(args.repo, args.output, args.base_url,
                               args.max_age, args.max_behind,
                               max(args.check_timeout, 1))
        result = generate(args.repo, output=args.output,
                          base_url=args.base_url, force=args.force,
                          dry_run=args.dry_run,
                          say=_stderr if args.json else _stdout,
                          metrics_dir=args.metrics_dir)
    except Abort as abort:
        return print_abort(abort)
    except CommandError as failure:
        return print_abort(git_abort(failure))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result["message"])
    # published, but something retired is still there: a partial failure
    return 1 if result.get("refused") else 0


def _stdout(message):
    print(message, flush=True)


def _stderr(message):
    print(message, file=sys.stderr, flush=True)


class Settings:
    """The ``bundlegen`` settings of a repository's Git config."""

    def __init__(self, repo, output=None, base_url=None):
        not_repository = Abort("%s is not a Git repository" % repo,
                               hint="--repo names the repository, as it "
                               "is served")
        if not os.path.isdir(repo):
            raise not_repository
        # before asking whether it is a repository: git says that of a
        # repository whose config it cannot parse
        config = gitconfig.read(repo, r"^bundlegen\.")
        git_files = _git_directories(repo)
        if git_files is None:
            raise not_repository
        options, table = {}, {}
        for key, value in config.entries:
            parts = key.split(".")
            if len(parts) == 2:
                options[parts[1]] = value
            else:
                table.setdefault(".".join(parts[1:-1]), {})[parts[-1]] = \
                    value
        self.output = output or _in_repository(repo, options.get("output"))
        if not self.output:
            raise Abort("gitbridge bundlegen needs an output directory",
                        hint="git config bundlegen.output DIR, or --output")
        bundlestore.check_output_outside(self.output, git_files, "git")
        self.base_url = base_url or options.get("base-url") or ""
        if self.base_url:
            self.base_url = bundlestore.check_base_url(self.base_url)
        order = options.get("destinations", "").replace(",", " ").split()
        self.destinations = bundlestore.destinations(table,
                                                     order or list(table))
        for destination in self.destinations:
            # the same URLs as the base-url: the list is Git config
            bundlestore.check_base_url(
                destination.base_url,
                "bundlegen.%s.base-url" % destination.name)
        if not self.base_url and not self.destinations:
            raise Abort("gitbridge bundlegen has nowhere to publish",
                        hint="git config bundlegen.base-url URL, or a "
                             "destination: bundlegen.NAME.url s3://...")
        for name, default in DEFAULTS.items():
            value = options.get(name, str(default)).strip()
            least = 1 if name in ("keep", "upload-timeout") else 0
            if not (value.isascii() and value.isdigit()) or len(value) > 9 \
                    or int(value) < least:
                raise Abort("bundlegen.%s must be a whole number%s, not %r"
                            % (name, " of 1 or more" if least else "",
                               value))
            setattr(self, name.replace("-", "_"), int(value))
        if self.parts > MOST_PARTS:
            raise Abort("bundlegen.parts is at most %d, not %d"
                        % (MOST_PARTS, self.parts))
        self.advertise = self._advertised_list(
            options.get("advertise", "").strip())

    def _advertised_list(self, value):
        """The URL of the bundle list ``bundlegen.advertise`` names: none
        (false, or unset or empty as in git), a place's (the base-url's or
        a destination's), or (true) the first place's."""
        lists = ([("base-url", "%s/%s" % (self.base_url, LIST_NAME))]
                 if self.base_url else [])
        lists += [(d.name, d.public_url(LIST_NAME))
                  for d in self.destinations]
        if not value:
            return None
        boolean = as_bool(value)
        if boolean is not None:
            return lists[0][1] if boolean else None
        for name, url in lists:
            if name == value:
                return url
        raise Abort("bundlegen.advertise must be a boolean (%s) or where "
                    "the list to advertise is published, not %r"
                    % (ACCEPTED_BOOLEANS, value),
                    hint="published at: %s" % ", ".join(
                        name for name, _ in lists))

    def layout(self):
        return {"base-url": self.base_url,
                "destinations": [d.name for d in self.destinations]}


def _git_directories(path):
    """The directories of git's own files for the repository at
    ``path`` (its git directory, and a worktree's common one), or None
    when it is not a repository."""
    # bytes: a path need not be UTF-8; 128: not a repository
    out = git_bytes(path, "rev-parse", "--absolute-git-dir",
                    "--git-common-dir", ok=(0, 128))
    # the common directory is given relative to ``path``
    return [os.path.join(os.path.abspath(path), os.fsdecode(line))
            for line in out.splitlines()] or None


def _tips(repo):
    """refname -> object of every branch and tag."""
    out = git("for-each-ref", "--format=%(objectname) %(refname)",
              "refs/heads", "refs/tags", cwd=repo)
    return dict(reversed(line.split(" ", 1)) for line in out.splitlines())


def _new_commits(repo, tips, old_tips):
    """Commits reachable from ``tips`` and from none of ``old_tips`` that
    the repository still has."""
    known = [sha for sha in set(old_tips.values())
             if _has_object(repo, sha)]
    if not tips:
        return 0
    return int(git("rev-list", "--count", *sorted(set(tips.values())),
                   "--not", *known, "--", cwd=repo).strip() or 0)


def _has_object(repo, sha):
    try:
        git("cat-file", "-e", sha, cwd=repo)
        return True
    except CommandError:
        return False


def _plan(repo, settings, latest, force):
    """``(kind, reason)``: the bundle a run writes ("full" or
    "incremental"), and why; kind None when nothing is due."""
    tips = _tips(repo)
    if not tips:
        raise Abort("%s has no branches or tags, nothing to bundle" % repo)
    if latest is None:
        return "full", "no bundles yet"
    if any(latest.get(k) != v for k, v in settings.layout().items()):
        return "full", "destinations changed"
    chain = latest["chain"]
    if not all(_has_object(repo, sha) for sha in latest["tips"].values()):
        return "full", "history was rewritten past the last bundle"
    # with a base-url the output directory is what clients download: its
    # bytes are checked on every run, else only when the list is extended
    lost = _lost_bundle(settings.output, chain,
                        digests=bool(settings.base_url))
    if lost:
        return "full", lost
    if tips == latest["tips"]:
        return (("full", "forced") if force else
                (None, "the bundles of these tips are published already"))
    if _new_commits(repo, latest["tips"], tips):
        # the published bundles hand out history no ref holds any more
        return "full", "history was rewound past the last bundle"
    moved = _new_commits(repo, tips, latest["tips"])
    reason = bundlestore.freshness(moved, 0, settings.min_commits, 0)
    if reason is None and not force:
        return None, ("%d new commits, fewer than bundlegen.min-commits "
                      "(%d)" % (moved, settings.min_commits))
    if moved == 0:
        # only refs moved to known commits: a full bundle records them
        return "full", reason or "refs moved"
    incrementals = len(chain) - 1
    if incrementals >= settings.incrementals:
        return "full", "%s; %d incremental bundles since the full one" % (
            reason or "forced", incrementals)
    # the new list names the chain's bundles again: their bytes must be
    # the ones their names and the record promise
    lost = _lost_bundle(settings.output, chain, digests=True)
    if lost:
        return "full", lost
    return "incremental", reason or "forced"


def _lost_bundle(output, chain, digests):
    """Why the local copy of a bundle of ``chain`` is not the one the
    record holds (gone, or other bytes: its size, or with ``digests`` its
    SHA-256), or None when they all are."""
    for bundle in published_files(chain):
        path = os.path.join(output, bundle["file"])
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return "%s of the list is missing from %s" % (bundle["file"],
                                                          output)
        try:
            same = (stat.S_ISREG(found.st_mode)
                    and found.st_size == bundle["size"]
                    and (not digests or bundlestore.sha256_file(path)[0]
                         == bundle["sha256"]))
        except OSError:
            same = False
        if not same:
            return "%s of the list was changed in %s" % (bundle["file"],
                                                         output)
    return None


def generate(repo, output=None, base_url=None, force=False, dry_run=False,
             say=_stdout, metrics_dir=None):
    """One run; returns what it did as a dict (``message`` says it in a
    line).  Writes its metrics file in ``metrics_dir`` (default:
    ``bundlegen.metrics-dir``), unless a dry run."""
    if dry_run:
        return _generate(repo, Settings(repo, output, base_url), force,
                         True, say, {})
    # First, so that a run stopped by its settings is a failure in the
    # file too.
    report = _metrics_report(repo, metrics_dir or _metrics_setting(repo))
    uploads = {}
    outcome = "failure"
    settings = None
    try:
        settings = Settings(repo, output, base_url)
        result = _generate(repo, settings, force, False, say, uploads)
        if not result.get("refused"):
            outcome = "success"
        return result
    finally:
        if report is not None:
            _write_metrics(repo, settings, report, outcome, uploads)


def _metrics_setting(repo):
    """``bundlegen.metrics-dir`` of the repository, read before its other
    settings are checked; None when unset or unreadable."""
    try:
        return _in_repository(repo, gitconfig.read(
            repo, r"^bundlegen\.metrics-dir$").get("bundlegen.metrics-dir"))
    except (Abort, CommandError, OSError):
        return None


def _in_repository(repo, path):
    """A path of the repository's config: a relative one is relative to
    the repository, wherever the command runs (git runs there)."""
    return os.path.join(os.path.abspath(repo), path) if path else None


def _metrics_report(repo, directory):
    """The run's metrics file in ``directory`` (checked: an Abort when it
    cannot be written), or None without one."""
    if not directory:
        return None
    checked = metrics.check_directory(directory, "bundlegen.metrics-dir")
    return metrics.BundlegenReport(checked, "git", os.path.abspath(repo))


def _write_metrics(repo, settings, report, outcome, uploads):
    """What is published (the record, when ``settings`` were read), how
    many commits behind the repository it is, and what this run
    uploaded; never an error."""
    latest = None
    try:
        if settings is not None:  # None: the settings stopped the run
            generations = bundlestore.Generations(
                os.path.join(settings.output, RECORD))
            _check_record(generations, generations.path)
            latest = generations.latest
    except Abort:
        pass  # the run's own abort says why
    if latest:
        behind = None
        try:
            if all(_has_object(repo, sha) for sha in latest["tips"].values()):
                behind = _new_commits(repo, _tips(repo), latest["tips"])
        except CommandError:
            pass  # the repository broke under the run: no count
        report.published(latest["tips"].get(_head_ref(repo)) or "",
                         latest["generated"], behind)
        for kind in ("full", "incremental"):
            chain = [b for b in latest["chain"] if b["kind"] == kind]
            if chain:
                report.bundle(kind, sum(b["size"] for b in chain),
                              sum(b.get("seconds", 0) for b in chain))
    report.uploads(uploads)
    metrics.write_quietly(report, outcome, _stderr)


def _head_ref(repo):
    """The ref HEAD names (the branch clients check out)."""
    try:
        return git("symbolic-ref", "-q", "HEAD", cwd=repo).strip()
    except CommandError:
        return ""


def check_fresh(repo, output, base_url, max_age, max_behind, total):
    """``--check-fresh``: one line, and 0 when the published bundles are
    fresh, 1 when not (see ``vcsperf.core.freshness``)."""
    settings = Settings(repo, output, base_url)
    record_path = os.path.join(settings.output, RECORD)
    generations = bundlestore.Generations(record_path)
    _check_record(generations, record_path)
    latest = generations.latest
    if latest is None:
        return _stale("no bundles are published (%s records none)"
                      % record_path)
    if not all(_has_object(repo, sha) for sha in latest["tips"].values()):
        return _stale("the published tips are no longer all in the "
                      "repository")
    tips = _tips(repo)
    # a branch rewound or deleted leaves its commits in the object store
    # until gc: the bundles would still hand out history no ref holds
    dropped = _new_commits(repo, latest["tips"], tips)
    if dropped:
        return _stale("%d published commits are on no branch or tag of "
                      "the repository any more (rewound or deleted)"
                      % dropped)
    behind = _new_commits(repo, tips, latest["tips"])
    reason = freshness.staleness(latest["generated"], behind, max_age,
                                 max_behind)
    if reason:
        return _stale("the published bundles are %s" % reason)
    chain = latest["chain"]
    lists = [(d.base_url, d.public_url) for d in settings.destinations]
    if settings.base_url:
        lists.insert(0, (settings.base_url, lambda name: "%s/%s" % (
            settings.base_url, name)))
    published = []
    for base, url in lists:
        published.append((url(LIST_NAME), len(bundle_list(base, chain))))
        published += [(url(f["file"]), f["size"])
                      for f in published_files(chain)]
    problem = freshness.missing(published, total)
    if problem:
        return _stale(problem)
    print("fresh: %d bundles, %d commits behind, %s old; %d URLs answer"
          % (len(chain), behind, freshness.describe_age(
              freshness.age(latest["generated"])), len(published)))
    return 0


def _stale(reason):
    print("stale: %s" % reason, flush=True)
    return 1


def _generate(repo, settings, force, dry_run, say, uploads):
    """One run of ``generate`` with its checked ``settings``."""
    record_path = os.path.join(settings.output, RECORD)
    if dry_run:
        generations = bundlestore.Generations(record_path)
        _check_record(generations, record_path)
        latest = generations.latest
        kind, reason = _plan(repo, settings, latest, force)
        message = ("nothing to do: %s" % reason if kind is None else
                   "would write %s bundle (%s) and publish it to %s"
                   % (_article(kind), reason, ", ".join(
                       [d.name for d in settings.destinations]
                       + (["base-url"] if settings.base_url else []))))
        return {"action": "dry-run", "kind": kind, "reason": reason,
                "message": message}

    def waiting(owner, seconds, takeover):
        say("waiting for another gitbridge bundlegen run (%s) to finish"
            % describe_owner(owner))

    started = time.monotonic()
    try:
        os.makedirs(settings.output, exist_ok=True)
    except OSError as err:
        raise Abort("cannot make the output directory %s: %s"
                    % (settings.output, err.strerror))
    lock = PidLock(os.path.join(settings.output, ".bundlegen.lock"),
                   LockPolicy(), waiting)
    # One bound for each phase of requests to object storage, however a
    # server stalls or trickles.
    network = bundlestore.Deadline(settings.upload_timeout,
                                   "bundlegen.upload-timeout")
    with lock:
        bundlestore.remove_leftovers(settings.output, TEMPORARY)
        generations = bundlestore.Generations(record_path)
        _check_record(generations, record_path)
        with network:
            clients = bundlestore.check(settings.destinations)
        latest = generations.latest
        kind, reason = _plan(repo, settings, latest, force)
        if kind is None:
            with network:
                kind, reason = _check_published(settings, latest, clients,
                                                say) or (None, reason)
        if kind is None:
            refused = _sweep(settings, generations, clients, network)
            _advertise(repo, settings.advertise, say)
            return {"action": "skipped", "reason": reason,
                    "refused": refused, "advertised": settings.advertise,
                    "message": "nothing to do: %s (--force writes a "
                               "bundle anyway)" % reason}
        say("writing %s bundle (%s)" % (_article(kind), reason))
        token = max(bundlestore.now(), latest["token"] + 1 if latest else 0)
        tips = _tips(repo)
        bundle = _write_bundle(repo, settings.output, token, kind,
                               {} if kind == "full" else latest["tips"],
                               settings.parts if kind == "full" else 0)
        chain = ([] if kind == "full" else latest["chain"]) + [bundle]
        with network:
            sent = _publish(settings, chain, bundle, latest, clients, say,
                            uploads)
        generations.add(dict(settings.layout(), tips=tips, token=token,
                             generated=bundlestore.now(), chain=chain,
                             files=[f["file"] for f in
                                    published_files(chain)]))
        _advertise(repo, settings.advertise, say)
        retired = generations.retire(settings.keep, [
            d.name for d in settings.destinations] + [OUTPUT_PLACE])
        # The deletions are recorded before any is sent: a refused or
        # killed one is done by a later run.
        generations.save()
        refused = _sweep(settings, generations, clients, network)
    seconds = time.monotonic() - started
    return {"action": "published", "kind": kind, "reason": reason,
            "bundle": bundle, "chain": [b["file"] for b in chain],
            "uploaded_bytes": sent, "retired": retired, "refused": refused,
            "advertised": settings.advertise,
            "seconds": round(seconds, 2),
            "message": "%s: %s bundle, %s, %d bundles in the list, "
                       "uploaded %s in %.1f s; retired %d%s"
                       % (bundle["file"], kind,
                          _size(bundle["size"]), len(chain), _size(sent),
                          seconds, len(retired),
                          " (not all deleted yet: see the warnings)"
                          if refused else "")}


_BUNDLE_NAME = re.compile(r"\d+\.(?:(?:full|incremental)\.[0-9a-f]{16}\.bundle"
                          r"|full\.part\d{1,2}\.[0-9a-f]{16}\.pack)\Z")
_OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


def _check_record(generations, path):
    """Abort unless the record is one this command wrote: a record
    changed behind its back must not make it delete files it did not
    create, nor end in a traceback."""
    def names(value):
        return isinstance(value, list) and all(
            isinstance(name, str) and _BUNDLE_NAME.match(name)
            for name in value)

    def stored(value):
        return (isinstance(value, dict) and names([value.get("file")])
                and isinstance(value.get("sha256"), str)
                and re.match(r"[0-9a-f]{64}\Z", value["sha256"])
                and isinstance(value.get("size"), int))

    def bundle(value):
        parts = value.get("parts", []) if isinstance(value, dict) else None
        return (stored(value) and isinstance(value.get("token"), int)
                and value.get("kind") in ("full", "incremental")
                and isinstance(parts, list) and len(parts) <= MOST_PARTS
                and all(stored(part) for part in parts))

    record = generations.record
    listed = generations.list
    good = (isinstance(record, dict) and isinstance(listed, list)
            and all(isinstance(g, dict) and names(g.get("files"))
                    for g in listed)
            and isinstance(record.get("undeleted", {}), dict)
            and all(isinstance(place, str) and names(pending)
                    for place, pending in
                    record.get("undeleted", {}).items()))
    if good and listed:
        latest = listed[0]
        tips = latest.get("tips")
        chain = latest.get("chain")
        good = (isinstance(tips, dict) and all(
            isinstance(ref, str) and isinstance(sha, str)
            and _OBJECT_ID.match(sha) for ref, sha in tips.items())
            and isinstance(latest.get("token"), int)
            and isinstance(chain, list) and chain
            and all(bundle(b) for b in chain)
            and isinstance(latest.get("base-url"), str)
            and isinstance(latest.get("destinations"), list))
    if not good:
        raise Abort("%s is not a record gitbridge bundlegen wrote" % path,
                    hint="remove it: the next run starts a new full bundle")


def _check_published(settings, latest, clients, say):
    """Before saying the latest list is published already: the list is in
    the output directory (with a base-url), and every bundle it names and
    the list itself are on every destination.  What is
    missing there (deleted by hand, a lifecycle rule) goes up again from
    its checked local copy; returns ``(kind, reason)`` of a new bundle
    when that cannot be done, else None."""
    if _write_local_list(settings, latest["chain"]):
        say("wrote %s again" % os.path.join(settings.output, LIST_NAME))
    files = published_files(latest["chain"])
    for destination in settings.destinations:
        client = clients[destination.name]
        lacking = bundlestore.missing(destination, files, client)
        if lacking:
            gone = [f for f in files if f["file"] in lacking]
            lost = _lost_bundle(settings.output, gone, True)
            if lost:
                return "full", ("published bundles are missing from %s, "
                                "and %s" % (destination.name, lost))
            bundlestore.upload_all([destination], settings.output, gone,
                                   CONTENT_TYPE, lambda *args: None, clients)
            say("uploaded %d missing bundles to %s again"
                % (len(lacking), destination.name))
        data = bundle_list(destination.base_url, latest["chain"])
        if bundlestore.missing(destination, [{
                "file": LIST_NAME, "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}], client):
            bundlestore.put_bytes(destination, LIST_NAME, data,
                                  "text/plain", client=client)
            say("wrote the bundle list to %s again" % destination.name)
    return None


def _sweep(settings, generations, clients, network):
    """Delete the retired bundles still pending (see
    ``bundlestore.Generations.sweep``) from every destination and the
    output directory.  What a place refuses (an Object Lock, a bucket
    policy without deletes, a server that is down) stays in the record
    for the next run, with a warning; the others go on.  Returns the
    places that refused."""
    if not generations.pending:
        return []
    deleters = {d.name: functools.partial(bundlestore.delete_objects, d,
                                          client=clients.get(d.name))
                for d in settings.destinations}
    deleters[OUTPUT_PLACE] = functools.partial(_delete_local,
                                               settings.output)
    try:
        with network:
            results = generations.sweep(deleters)
    except Abort as err:
        _stderr("warning: retiring old bundles stopped: %s; the next run "
                "tries again" % err)
        return ["?"]
    finally:
        generations.save()
    refused = []
    for place, (_deleted, refusals) in sorted(results.items()):
        if refusals:
            name = sorted(refusals)[0]
            _stderr("warning: %s refused to delete %d retired bundles (%s: "
                    "%s); %s keeps them for the next run"
                    % (place or "the output directory", len(refusals), name,
                       refusals[name], RECORD))
            refused.append(place or "output")
    return refused


def _delete_local(output, names):
    """Delete retired bundles from the output directory; returns the
    ones that could not be, name -> reason."""
    refused = {}
    for name in names:
        try:
            _unlink(os.path.join(output, name))
        except OSError as err:
            refused[name] = err.strerror
    return refused


def _advertise(repo, list_url, say):
    """Have the repository's Git server (protocol v2's ``bundle-uri``
    command, Git 2.40 and later) advertise the bundle list at
    ``list_url`` to clients that set ``transfer.bundleURI``: one entry,
    ``bundle.bundlegen.uri``, naming the list, which each run updates in
    place, so the server's config never names a retired bundle.  Nothing
    when ``list_url`` is None; settings already right are not rewritten."""
    if list_url is None:
        return
    wanted = (("uploadpack.advertiseBundleURIs", "true"),
              ("bundle.version", "1"), ("bundle.mode", "all"),
              ("bundle.%s.uri" % ADVERTISED_ID, list_url))
    current = gitconfig.read(repo, "^(%s)$" % "|".join(
        re.escape(key.lower()) for key, _ in wanted))
    changed = False
    for key, value in wanted:
        # as git lists it: no upper case in the subsection
        if current.get_all(key.lower()) != [value]:
            git("config", "--replace-all", key, value, cwd=repo)
            changed = True
    if changed:
        say("the server of %s now advertises %s" % (repo, list_url))


def _article(kind):
    return ("an " if kind == "incremental" else "a ") + kind


def _write_bundle(repo, output, token, kind, old_tips, parts):
    """Write the bundle (what the branches and tags hold beyond
    ``old_tips``), and with ``parts`` of 2 or more its packs, under their
    final names; returns its record.  Everything is written under a
    temporary name first (in a ``.bundlegen-tmp-*`` directory, which the
    next run sweeps if this one is killed) and renamed last."""
    work = tempfile.mkdtemp(prefix=TEMPORARY, dir=output)
    temp = os.path.join(work, "bundle")
    started = time.monotonic()
    record = None
    try:
        excluded = sorted({sha for sha in old_tips.values()})
        try:
            git("bundle", "create", "-q", temp, "--branches", "--tags",
                *(["--not", *excluded] if excluded else []), cwd=repo)
            git("bundle", "verify", "-q", temp, cwd=repo)
        except CommandError as err:
            raise Abort("git bundle failed: %s" % err.stderr.strip())
        sha256, size = bundlestore.sha256_file(temp)
        packs = _write_parts(repo, temp, work, parts) if parts > 1 else []
        record = {"file": "%d.%s.%s.bundle" % (token, kind, sha256[:16]),
                  "token": token, "kind": kind, "sha256": sha256,
                  "size": size,
                  "seconds": round(time.monotonic() - started, 2)}
        if packs:
            record["parts"] = [
                {"file": "%d.full.part%d.%s.pack" % (token, number,
                                                     digest[:16]),
                 "sha256": digest, "size": packed}
                for number, (_path, digest, packed) in enumerate(packs, 1)]
        for (path, _digest, _packed), part in zip(packs, record.get(
                "parts", [])):
            os.replace(path, os.path.join(output, part["file"]))
        os.replace(temp, os.path.join(output, record["file"]))
    except BaseException:
        if record is not None:
            _unlink_written(output, record)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return record


def _write_parts(repo, bundle, work, count):
    """The objects of the full ``bundle`` (a file) again as ``count``
    packs in ``work``, for clients that index them side by side; returns
    ``(path, sha256, size)`` of each.  The objects are those its refs
    reach, sorted by path, so that the revisions of a file, which delta
    against each other, share a pack, and cut where the packed sizes add
    up to a ``count``-th each.  Nothing is held in memory per object: a
    Firefox-sized history has millions."""
    tips = [line.split(" ", 1)[0] for line in git(
        "bundle", "list-heads", bundle, cwd=repo).splitlines()]
    listing = os.path.join(work, "objects")
    _sorted_objects(repo, tips, listing)
    packs = []
    for number, objects in enumerate(_cut(listing, count, work), 1):
        path = os.path.join(work, "part%d.pack" % number)
        with open(objects, "rb") as names, open(path, "wb") as pack:
            packed = subprocess.run(
                ["git", "pack-objects", "-q", "--stdout",
                 "--delta-base-offset"], cwd=repo, stdin=names,
                stdout=pack, stderr=subprocess.PIPE)
        if packed.returncode:
            raise Abort("git pack-objects failed: %s" % _last_line(
                packed.stderr, packed.returncode))
        packs.append((path, *bundlestore.sha256_file(path)))
    return packs


def _sorted_objects(repo, tips, listing):
    """Write ``path TAB id TAB packed size`` of every object ``tips``
    reach, sorted (bytes, as git names them), to ``listing``."""
    work = os.path.dirname(listing)
    errors = [open(os.path.join(work, "errors%d" % n), "w+b")
              for n in range(3)]
    try:
        walk = subprocess.Popen(
            ["git", "rev-list", "--objects", "--stdin"], cwd=repo,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors[0])
        sizes = subprocess.Popen(
            ["git", "cat-file",
             "--batch-check=%(rest)\t%(objectname)\t%(objectsize:disk)"],
            cwd=repo, stdin=walk.stdout, stdout=subprocess.PIPE,
            stderr=errors[1])
        walk.stdout.close()
        with open(listing, "wb") as out:
            try:
                order = subprocess.Popen(
                    ["sort", "-T", work], stdin=sizes.stdout, stdout=out,
                    stderr=errors[2], env=dict(os.environ, LC_ALL="C"))
            except OSError as err:
                _kill_all(walk, sizes)
                raise Abort("cannot run sort: %s" % err.strerror,
                            hint="bundlegen.parts needs sort (coreutils) "
                                 "on PATH")
        sizes.stdout.close()
        try:
            walk.stdin.write("".join(tip + "\n" for tip in tips).encode())
            walk.stdin.close()
        except BrokenPipeError:
            pass  # rev-list has stopped: its status says why
        # the last that failed first: an earlier one may only have
        # lost its reader (SIGPIPE)
        for proc, what, err in reversed(list(zip(
                (walk, sizes, order), ("git rev-list", "git cat-file",
                                       "sort"), errors))):
            if proc.wait():
                err.seek(0)
                raise Abort("%s failed: %s" % (what, _last_line(
                    err.read(4096), proc.returncode)))
    finally:
        for err in errors:
            err.close()


def _last_line(said, status):
    """The last line a failed process said, where git and sort say why
    (else its status)."""
    lines = said.decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else "status %d" % status


def _kill_all(*procs):
    for proc in procs:
        proc.kill()
        proc.wait()


def _cut(listing, count, work):
    """Files of ``id path`` lines (``git pack-objects``' input), ``count``
    runs of ``listing`` of about equal packed size."""
    total = 0
    with open(listing, "rb") as fh:
        for line in fh:
            total += int(line.rsplit(b"\t", 1)[1])
    lists, size, out = [], 0, None
    with open(listing, "rb") as fh:
        for line in fh:
            path, sha, packed = line.rstrip(b"\n").rsplit(b"\t", 2)
            if out is None or (size >= total * len(lists) / count
                               and len(lists) < count):
                if out is not None:
                    out.close()
                lists.append(os.path.join(work, "part%d" % len(lists)))
                out = open(lists[-1], "wb")
            out.write(sha + b" " + path + b"\n")
            size += int(packed)
    if out is not None:
        out.close()
    return lists


def published_files(chain):
    """The files a list of ``chain`` names: each bundle, then its parts
    (dicts with ``file``, ``size`` and ``sha256``)."""
    return [f for bundle in chain for f in [bundle, *bundle.get("parts",
                                                                 [])]]


def _unlink_written(output, bundle):
    """Delete what this run wrote: ``bundle`` and its parts."""
    for written in published_files([bundle]):
        _unlink(os.path.join(output, written["file"]))


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def bundle_list(base_url, chain):
    """Git's bundle-uri list (Git config format) naming ``chain``'s
    bundles under ``base_url``."""
    lines = ["[bundle]", "\tversion = 1", "\tmode = all",
             "\theuristic = creationToken"]
    for bundle in chain:
        # quoted: a URL may hold ";", which starts a comment in Git config
        lines += ['[bundle "%s-%d"]' % (bundle["kind"], bundle["token"]),
                  '\turi = "%s/%s"' % (base_url, bundle["file"]),
                  "\tcreationToken = %d" % bundle["token"]]
        lines += ['\tgitbridgePart = "%s/%s"' % (base_url, part["file"])
                  for part in bundle.get("parts", [])]
    return ("\n".join(lines) + "\n").encode()


def _publish(settings, chain, bundle, latest, clients, say, uploads):
    """Upload the new bundle to every destination, then each one's list,
    then the local list; on a failure (or when the deadline passes), take
    back what this run changed and abort.  Returns the bytes uploaded;
    ``uploads`` gets destination name -> (bytes, seconds)."""
    output = settings.output

    def report(destination, size, seconds):
        uploads[destination.name] = (size, seconds)
        say("uploaded %s to %s in %.1f s" % (_size(size), destination.name,
                                             seconds))
    try:
        # after a layout change every bundle of the chain goes up
        sent, uploaded = bundlestore.upload_all(
            settings.destinations, output, published_files(chain),
            CONTENT_TYPE, report, clients)
    except (Abort, bundlestore.DeadlinePassed):
        _unlink_written(output, bundle)
        raise
    updated = []
    try:
        for destination in settings.destinations:
            bundlestore.put_bytes(destination, LIST_NAME, bundle_list(
                destination.base_url, chain), "text/plain",
                client=clients[destination.name])
            updated.append(destination)
    except (Abort, bundlestore.DeadlinePassed):
        for destination in updated:
            try:
                if latest and destination.name in latest["destinations"]:
                    bundlestore.put_bytes(
                        destination, LIST_NAME, bundle_list(
                            destination.base_url, latest["chain"]),
                        "text/plain", client=clients[destination.name])
                else:
                    bundlestore.delete_objects(
                        destination, [LIST_NAME],
                        client=clients[destination.name])
            except Abort as err:
                _stderr("warning: the list on %s names the new bundle: %s"
                        % (destination.name, err))
        bundlestore.take_back(uploaded)
        _unlink_written(output, bundle)
        raise
    _write_local_list(settings, chain)
    return sent


def _write_local_list(settings, chain):
    """Write the list of ``chain`` served from the output directory (with
    a base-url), if it does not hold it already; True if it was written."""
    if not settings.base_url:
        return False
    data = bundle_list(settings.base_url, chain)
    path = os.path.join(settings.output, LIST_NAME)
    try:
        with open(path, "rb") as fh:
            if fh.read(len(data) + 1) == data:
                return False
    except OSError:
        pass  # gone, or not a file we can read: written anew
    temp = os.path.join(settings.output, ".%s.tmp" % LIST_NAME)
    with open(temp, "wb") as fh:
        fh.write(data)
    os.replace(temp, path)
    return True
