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

Settings, in the repository's Git config::

  [bundlegen]
      output = /var/lib/git-bundles/firefox    # local bundles and record
      base-url = https://git.example.com/bundles/firefox  # optional: where
                                               # output is served
      destinations = usw2 euc1                 # default: every one below
      keep = 2              # bundle lists whose bundles stay (default 2)
      min-commits = 1       # new commits that make a run due (default 1)
      incrementals = 6      # incremental bundles between full ones
  [bundlegen "usw2"]
      url = s3://git-bundles/firefox
      region = us-west-2
      endpoint = http://127.0.0.1:7070   # for servers other than AWS
      base-url = https://usw2.cdn.example.com/firefox   # default: S3's URL
  [bundlegen "euc1"]
      url = s3://git-bundles-euc1/firefox
      region = eu-central-1

Every destination takes the same settings as ``hg bundlegen``'s
(``vcsperf.core.bundlestore``) and gets its own ``bundle-list`` (Git 2.39
and later resolve only absolute bundle URIs, so each list names its own
destination's).  Bundles are ``<token>.<full|incremental>.<sha256
prefix>.bundle``; a name never stands for other bytes.  A failed upload to
any destination leaves every bundle list as it was; bundles of lists older
than the last ``keep`` are deleted, everywhere, only after the new lists
are out.  A run with nothing new (the same tips, or fewer than
``min-commits`` new commits) says so and does nothing; ``--force`` writes
a bundle anyway, ``--dry-run`` says what a run would do, ``--json``
prints the result as JSON.  One run at a time per output directory; a
second one says whose run it waits for.
"""

import argparse
import json
import os
import sys
import time

from vcsperf.core import bundlestore
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.pooling import (LockPolicy, PidLock, describe_owner,
                                  format_bytes as _size)
from vcsperf.core.process import CommandError, git, git_output

LIST_NAME = "bundle-list"
RECORD = "bundles.json"
CONTENT_TYPE = "application/x-git-bundle"
DEFAULTS = {"keep": 2, "min-commits": 1, "incrementals": 6}


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
    parser.set_defaults(func=main)


def main(args):
    try:
        result = generate(args.repo, output=args.output,
                          base_url=args.base_url, force=args.force,
                          dry_run=args.dry_run,
                          say=_stderr if args.json else _stdout)
    except Abort as abort:
        return print_abort(abort)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result["message"])
    return 0


def _stdout(message):
    print(message, flush=True)


def _stderr(message):
    print(message, file=sys.stderr, flush=True)


class Settings:
    """The ``bundlegen`` settings of a repository's Git config."""

    def __init__(self, repo, output=None, base_url=None):
        try:
            listed = git_output(repo, "config", "--get-regexp",
                                r"^bundlegen\.")
        except Abort:
            listed = ""  # git config exits 1 when nothing matches
        options, table = {}, {}
        for line in listed.splitlines():
            key, _, value = line.partition(" ")
            parts = key.split(".")
            if len(parts) == 2:
                options[parts[1]] = value
            else:
                table.setdefault(".".join(parts[1:-1]), {})[parts[-1]] = \
                    value
        self.output = output or options.get("output")
        if not self.output:
            raise Abort("gitbridge bundlegen needs an output directory",
                        hint="git config bundlegen.output DIR, or --output")
        self.base_url = (base_url or options.get("base-url") or "") \
            .rstrip("/")
        order = options.get("destinations", "").replace(",", " ").split()
        self.destinations = bundlestore.destinations(table,
                                                     order or list(table))
        if not self.base_url and not self.destinations:
            raise Abort("gitbridge bundlegen has nowhere to publish",
                        hint="git config bundlegen.base-url URL, or a "
                             "destination: bundlegen.NAME.url s3://...")
        for name, default in DEFAULTS.items():
            value = options.get(name, str(default))
            if not value.isdigit() or int(value) < (name == "keep"):
                raise Abort("bundlegen.%s must be a whole number%s, not %r"
                            % (name, " of 1 or more" if name == "keep"
                               else "", value))
            setattr(self, name.replace("-", "_"), int(value))

    def layout(self):
        return {"base-url": self.base_url,
                "destinations": [d.name for d in self.destinations]}


def _tips(repo):
    """refname -> object of every branch and tag."""
    out = git_output(repo, "for-each-ref", "--format=%(objectname) "
                     "%(refname)", "refs/heads", "refs/tags")
    return dict(reversed(line.split(" ", 1)) for line in out.splitlines())


def _new_commits(repo, tips, old_tips):
    """Commits reachable from ``tips`` and from none of ``old_tips`` that
    the repository still has."""
    known = [sha for sha in set(old_tips.values())
             if _has_object(repo, sha)]
    if not tips:
        return 0
    return int(git_output(repo, "rev-list", "--count", *sorted(
        set(tips.values())), "--not", *known, "--").strip() or 0)


def _has_object(repo, sha):
    try:
        git_output(repo, "cat-file", "-e", sha)
        return True
    except Abort:
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
    if tips == latest["tips"]:
        return (("full", "forced") if force else
                (None, "the bundles of these tips are published already"))
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
    return "incremental", reason or "forced"


def generate(repo, output=None, base_url=None, force=False, dry_run=False,
             say=_stdout):
    """One run; returns what it did as a dict (``message`` says it in a
    line)."""
    settings = Settings(repo, output, base_url)
    os.makedirs(settings.output, exist_ok=True)
    record_path = os.path.join(settings.output, RECORD)
    if dry_run:
        latest = bundlestore.Generations(record_path).latest
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
    lock = PidLock(os.path.join(settings.output, ".bundlegen.lock"),
                   LockPolicy(), waiting)
    with lock:
        generations = bundlestore.Generations(record_path)
        latest = generations.latest
        kind, reason = _plan(repo, settings, latest, force)
        if kind is None:
            return {"action": "skipped", "reason": reason,
                    "message": "nothing to do: %s (--force writes a "
                               "bundle anyway)" % reason}
        say("writing %s bundle (%s)" % (_article(kind), reason))
        token = max(bundlestore.now(), latest["token"] + 1 if latest else 0)
        tips = _tips(repo)
        bundle = _write_bundle(repo, settings.output, token, kind,
                               {} if kind == "full" else latest["tips"])
        chain = ([] if kind == "full" else latest["chain"]) + [bundle]
        sent = _publish(settings, chain, bundle, latest, say)
        generations.add(dict(settings.layout(), tips=tips, token=token,
                             generated=bundlestore.now(), chain=chain,
                             files=[b["file"] for b in chain]))
        retired = generations.retire(settings.keep)
        generations.save()
        for destination in settings.destinations:
            bundlestore.delete(destination, retired)
        for name in retired:
            _unlink(os.path.join(settings.output, name))
    seconds = time.monotonic() - started
    return {"action": "published", "kind": kind, "reason": reason,
            "bundle": bundle, "chain": [b["file"] for b in chain],
            "uploaded_bytes": sent, "retired": retired,
            "seconds": round(seconds, 2),
            "message": "%s: %s bundle, %s, %d bundles in the list, "
                       "uploaded %s in %.1f s; retired %d"
                       % (bundle["file"], kind,
                          _size(bundle["size"]), len(chain), _size(sent),
                          seconds, len(retired))}


def _article(kind):
    return ("an " if kind == "incremental" else "a ") + kind


def _write_bundle(repo, output, token, kind, old_tips):
    """Write the bundle (what the branches and tags hold beyond
    ``old_tips``) under its final name; returns its record."""
    temp = os.path.join(output, ".bundlegen-tmp-%d.bundle" % os.getpid())
    excluded = sorted({sha for sha in old_tips.values()})
    started = time.monotonic()
    try:
        git("-C", repo, "bundle", "create", "-q", temp, "--branches",
            "--tags", *(["--not", *excluded] if excluded else []))
        git("-C", repo, "bundle", "verify", "-q", temp)
    except CommandError as err:
        _unlink(temp)
        raise Abort("git bundle failed: %s" % err.stderr.strip())
    sha256, size = bundlestore.sha256_file(temp)
    name = "%d.%s.%s.bundle" % (token, kind, sha256[:16])
    os.replace(temp, os.path.join(output, name))
    return {"file": name, "token": token, "kind": kind, "sha256": sha256,
            "size": size, "seconds": round(time.monotonic() - started, 2)}


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
        lines += ['[bundle "%s-%d"]' % (bundle["kind"], bundle["token"]),
                  "\turi = %s/%s" % (base_url, bundle["file"]),
                  "\tcreationToken = %d" % bundle["token"]]
    return ("\n".join(lines) + "\n").encode()


def _publish(settings, chain, bundle, latest, say):
    """Upload the new bundle to every destination, then each one's list,
    then the local list; on a failure, take back what this run changed
    and abort.  Returns the bytes uploaded."""
    output = settings.output

    def report(destination, size, seconds):
        say("uploaded %s to %s in %.1f s" % (_size(size), destination.name,
                                             seconds))
    try:
        # after a layout change every bundle of the chain goes up
        sent, uploaded = bundlestore.upload_all(
            settings.destinations, output, chain, CONTENT_TYPE, report)
    except Abort:
        _unlink(os.path.join(output, bundle["file"]))
        raise
    updated = []
    try:
        for destination in settings.destinations:
            bundlestore.put_bytes(destination, LIST_NAME, bundle_list(
                destination.base_url, chain), "text/plain")
            updated.append(destination)
    except Abort:
        for destination in updated:
            if latest and destination.name in latest["destinations"]:
                bundlestore.put_bytes(destination, LIST_NAME, bundle_list(
                    destination.base_url, latest["chain"]), "text/plain")
            else:
                bundlestore.delete(destination, [LIST_NAME])
        bundlestore.take_back(uploaded)
        _unlink(os.path.join(output, bundle["file"]))
        raise
    if settings.base_url:
        temp = os.path.join(output, ".%s.tmp" % LIST_NAME)
        with open(temp, "wb") as fh:
            fh.write(bundle_list(settings.base_url, chain))
        os.replace(temp, os.path.join(output, LIST_NAME))
    return sent
