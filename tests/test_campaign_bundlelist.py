"""The adversarial campaign for ``gitbridge bundlegen``'s bundle lists:
what it writes into Git's bundle-uri lists (base URLs of any kind, read
back by Git's own config parser), its local output changed or deleted
behind its back, an object server that refuses deletes and loses or
changes objects, and a stock ``git clone --bundle-uri`` reading the lists
after every step."""

import hashlib
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import campaign
from gitbridge import bundlegen
from vcsperf.core import bundlestore
from vcsperf.core.errors import Abort
from vcsperf.harness import objectstore, tools
from vcsperf.harness.servers import FileServer

pytestmark = pytest.mark.campaign

PROPERTY = settings(max_examples=campaign.size(300, 5000), deadline=None,
                    derandomize=not campaign.FULL,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

CHAIN = [{"kind": "full", "token": 1795600000,
          "file": "1795600000.full.0123456789abcdef.bundle"},
         {"kind": "incremental", "token": 1795600001,
          "file": "1795600001.incremental.fedcba9876543210.bundle"}]

URLISH = st.one_of(
    st.builds(lambda scheme, rest: scheme + rest,
              st.sampled_from(["http://", "https://", "HTTPS://", "file:///",
                               "file://", "ftp://", "", "//"]),
              st.text(alphabet="abcXYZ019-._~:/@!$&'()*+,;=[]%2F?# \t\r\n"
                      "\x0b\x0c\x00\"\\\u00e9\u2028", max_size=60)),
    st.text(max_size=80))


@PROPERTY
@given(base=URLISH)
def test_any_base_url_is_refused_or_reads_back_through_git(base, git,
                                                           tmp_path, tally):
    """Any base URL: refused with one line, or the bundle list written
    with it is read by Git's own config parser into exactly one URI per
    bundle, each the base URL and the bundle's name."""
    try:
        checked = bundlestore.check_base_url(base)
    except Abort as err:
        ok = "\n" not in str(err) and "\n" not in (err.hint or "")
        tally.case(ok, "refusal of %r spans lines" % base)
        assert ok
        return
    path = tmp_path / "bundle-list"
    path.write_bytes(bundlegen.bundle_list(checked, CHAIN))
    read = git("config", "-f", path, "--get-regexp", r"^bundle\.").split(
        "\n")
    expected = ["bundle.version 1", "bundle.mode all",
                "bundle.heuristic creationToken"]
    for bundle in CHAIN:
        expected += ["bundle.%s-%d.uri %s/%s" % (
            bundle["kind"], bundle["token"], checked, bundle["file"]),
            "bundle.%s-%d.creationtoken %d" % (
                bundle["kind"], bundle["token"], bundle["token"])]
    ok = read[:-1] == expected and read[-1] == ""
    tally.case(ok, "base %r read back as %r" % (base, read))
    assert ok


def _commit(git, work, rng, tag):
    for number in range(rng.randint(1, 2)):
        with open(os.path.join(work, "%s-%d.txt" % (tag, number)), "w") as fh:
            fh.write("%s %d %s\n" % (tag, number, rng.random()) * 50)
        git("-C", work, "add", ".")
        git("-C", work, "commit", "-q", "-m", "%s %d" % (tag, number))
    git("-C", work, "push", "-q", "origin", "main")


@pytest.fixture
def origin(git, tmp_path):
    bare = tmp_path / "repo.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    work = tmp_path / "work"
    git("clone", "-q", bare, work)
    git("-C", work, "checkout", "-q", "-b", "main")
    with open(work / "first.txt", "w") as fh:
        fh.write("first\n")
    git("-C", work, "add", ".")
    git("-C", work, "commit", "-q", "-m", "first")
    git("-C", work, "push", "-q", "origin", "main")
    return bare, work


def _gitbridge(gitbridge_binary, env, *args):
    return campaign.run_bounded([gitbridge_binary, "bundlegen", *map(
        str, args)], env=env, address_space=2 << 30, timeout=300)


def test_hostile_base_urls_abort_cleanly_under_limits(origin, env, tally,
                                                      tmp_path):
    """Seeded hostile base URLs, on the command line and in a
    destination's config, through the real ``gitbridge bundlegen`` under
    an address-space limit: one clean abort, and nothing written."""
    bare, _work = origin
    binary = tools.executable("gitbridge")
    output = tmp_path / "out"
    for _ in range(campaign.size(6, 60)):
        url = campaign.hostile_url(tally.rng, plain="aZ09/:.-;")
        if tally.rng.random() < 0.5:
            proc = _gitbridge(binary, env, "--repo", bare, "--output",
                              output, "--base-url", url)
        else:
            config = bare / "config"
            saved = config.read_bytes()
            campaign_env = dict(env, GIT_CONFIG_COUNT="3",
                                GIT_CONFIG_KEY_0="bundlegen.cdn.url",
                                GIT_CONFIG_VALUE_0="s3://b/p",
                                GIT_CONFIG_KEY_1="bundlegen.cdn.base-url",
                                GIT_CONFIG_VALUE_1=url,
                                GIT_CONFIG_KEY_2="bundlegen.output",
                                GIT_CONFIG_VALUE_2=str(output))
            proc = _gitbridge(binary, campaign_env, "--repo", bare)
            assert config.read_bytes() == saved
        ok = campaign.is_clean_abort(proc) and not output.exists()
        tally.case(ok, "base-url %r: %s" % (url, proc.stderr))
    tally.check()


def _published(output, served_list):
    """The bundles a list names, each checked against the record: it is
    in the output directory with the bytes its name and record promise."""
    record = json.loads((output / "bundles.json").read_text())
    chain = {b["file"]: b for b in record["generations"][0]["chain"]}
    named = [line.split("/")[-1].rstrip('"') for line in
             served_list.splitlines() if line.startswith("\turi = ")]
    assert named == list(chain), (named, list(chain))
    for name in named:
        digest, size = bundlestore.sha256_file(output / name)
        assert (digest, size) == (chain[name]["sha256"], chain[name]["size"])
    return named


def _stock_clone(git, files_url, bare, target):
    """A stock clone through the published list: it succeeds, takes the
    bundles (refs/bundles) and ends at the server's tip."""
    proc = git.proc("clone", "-q", "--bundle-uri=" + files_url
                    + "bundle-list", bare, target)
    assert proc.returncode == 0, proc.stderr
    assert "failed to" not in proc.stderr, proc.stderr
    assert git("-C", target, "for-each-ref", "refs/bundles")
    assert git("-C", target, "rev-parse", "HEAD") == git(
        "-C", bare, "rev-parse", "main")
    shutil.rmtree(target)


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def _change(output, outside, rng):
    """One change behind bundlegen's back, seeded; returns its name."""
    record = json.loads((output / "bundles.json").read_text())
    chain = [output / b["file"] for b in record["generations"][0]["chain"]]
    victim = rng.choice(chain)
    what = rng.choice(["none", "delete", "flip", "truncate", "symlink",
                       "fifo", "list", "record-gone", "record-type",
                       "record-outside", "record-list"])
    if what == "delete":
        victim.unlink()
    elif what == "flip":
        _flip_last_byte(victim)
    elif what == "truncate":
        os.truncate(victim, victim.stat().st_size // 2)
    elif what == "symlink":
        victim.unlink()
        victim.symlink_to("/dev/zero")
    elif what == "fifo":
        victim.unlink()
        os.mkfifo(victim)
    elif what == "list":
        (output / "bundle-list").unlink()
    elif what == "record-gone":
        (output / "bundles.json").unlink()
    elif what == "record-type":
        record["generations"][0]["chain"][0]["size"] = "12"
        (output / "bundles.json").write_text(json.dumps(record))
    elif what == "record-outside":
        record["generations"][-1]["files"].append(os.path.relpath(
            outside, output))
        (output / "bundles.json").write_text(json.dumps(record))
    elif what == "record-list":
        (output / "bundles.json").write_text("[1, 2]")
    return "%s %s" % (what, victim.name)


def test_local_output_changed_behind_its_back(origin, git, env, tally,
                                              tmp_path):
    """Seeded changes to the output directory between runs (bundles of
    the list deleted, changed, made a symlink to /dev/zero or a FIFO; the
    list or the record deleted; a record of the wrong shape or naming a
    file outside), each followed by a run and a stock clone through the
    served list.  A run either publishes (the list names exactly the
    record's chain, each file with its bytes) or, for a record it did not
    write, aborts in one line and the rerun after the hint's fix
    publishes; no file outside its own is ever deleted."""
    bare, work = origin
    binary = tools.executable("gitbridge")
    output = tmp_path / "out"
    output.mkdir()
    outside = tmp_path / "not-ours.bundle"
    outside.write_text("the user's\n")
    (output / "notes.txt").write_text("the user's too\n")
    git("-C", bare, "config", "bundlegen.incrementals", "2")
    with FileServer(output) as files:
        base = files.url.rstrip("/")
        run = lambda *a: _gitbridge(binary, env, "--repo", bare,  # noqa
                                    "--output", output, "--base-url", base,
                                    *a)
        assert run().returncode == 0
        for step in range(campaign.size(8, 80)):
            what = _change(output, outside, tally.rng)
            print("step %d: %s" % (step, what))
            if tally.rng.random() < 0.7:
                _commit(git, work, tally.rng, "step%d" % step)
            proc = run()
            try:
                assert "Traceback" not in proc.stderr, proc.stderr
                if what.startswith(("record-type", "record-outside",
                                    "record-list")):
                    assert campaign.is_clean_abort(proc), proc.stderr
                    assert "remove it" in proc.stderr
                    assert campaign.is_clean_abort(run("--dry-run"))
                    (output / "bundles.json").unlink()
                    proc = run()
                assert proc.returncode == 0, proc.stderr
                assert (output / "bundle-list").is_file(), "list gone"
                _published(output, (output / "bundle-list").read_text())
                _stock_clone(git, files.url, bare, tmp_path / "clone")
                assert outside.read_text() == "the user's\n"
                assert (output / "notes.txt").exists()
            except AssertionError as err:
                tally.case(False, "step %d, %s: %s" % (step, what, err))
                break
            tally.case(True, what)
    tally.check()


def _lists(objectserver, bucket):
    return objectserver.client().get_object(
        Bucket=bucket, Key="repo/bundle-list")["Body"].read().decode()


@pytest.mark.slow
def test_a_server_that_refuses_deletes_and_loses_objects(
        origin, git, gitbridge, objectserver, env, tally, tmp_path):
    """Seeded object-server behaviour between runs: Object Lock legal
    holds on published bundles (deletes refused), holds released, objects
    deleted or replaced by other bytes behind bundlegen's back.  After
    each run: exit 0, or 1 with a warning when a delete was refused; each
    destination's list names only objects that are there with the bytes
    the record says; a stock clone through each list takes its bundles.
    At the end, with every hold released, one run leaves nothing
    undeleted and no object the record does not hold."""
    bare, work = origin
    client = objectserver.client()
    client.create_bucket(Bucket="locked", ObjectLockEnabledForBucket=True)
    client.put_bucket_policy(Bucket="locked", Policy=(
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",'
        ' "Principal": "*", "Action": ["s3:GetObject"],'
        ' "Resource": ["arn:aws:s3:::locked/*"]}]}'))
    objectserver.make_bucket("open")
    output = tmp_path / "out"
    git("-C", bare, "config", "bundlegen.output", str(output))
    git("-C", bare, "config", "bundlegen.incrementals", "1")
    for name in ("locked", "open"):
        for key, value in (("url", "s3://%s/repo" % name),
                           ("region", objectstore.REGION),
                           ("endpoint", objectserver.url.rstrip("/"))):
            git("-C", bare, "config", "bundlegen.%s.%s" % (name, key),
                value)
    held = set()
    gitbridge("bundlegen", "--repo", bare)
    for step in range(campaign.size(6, 60)):
        # the oldest kept bundles: those the next runs retire
        keys = ["repo/" + name for name in json.loads(
            (output / "bundles.json").read_text())["generations"][-1][
                "files"]]
        what = tally.rng.choice(["hold", "release", "delete", "replace",
                                 "none"])
        if what == "hold" and keys:
            key = tally.rng.choice(keys)
            client.put_object_legal_hold(Bucket="locked", Key=key,
                                         LegalHold={"Status": "ON"})
            held.add(key)
        elif what == "release" and held:
            key = held.pop()
            client.put_object_legal_hold(Bucket="locked", Key=key,
                                         LegalHold={"Status": "OFF"})
        elif what in ("delete", "replace"):
            key = tally.rng.choice(objectserver.keys("open"))
            if what == "delete":
                client.delete_object(Bucket="open", Key=key)
            else:
                client.put_object(Bucket="open", Key=key, Body=b"other")
        print("step %d: %s" % (step, what))
        if tally.rng.random() < 0.7:
            _commit(git, work, tally.rng, "step%d" % step)
        proc = gitbridge("bundlegen", "--repo", bare, check=False)
        try:
            assert "Traceback" not in proc.stderr, proc.stderr
            assert proc.returncode in (0, 1), proc.stderr
            assert (proc.returncode == 1) == ("refused to delete"
                                              in proc.stderr), proc.stderr
            record = json.loads((output / "bundles.json").read_text())
            chain = {b["file"]: b for b in
                     record["generations"][0]["chain"]}
            for bucket in ("locked", "open"):
                listed = _lists(objectserver, bucket)
                named = [line.split("/")[-1].rstrip('"')
                         for line in listed.splitlines()
                         if line.startswith("\turi = ")]
                assert named == list(chain), (bucket, named)
                for name in named:
                    body = client.get_object(
                        Bucket=bucket, Key="repo/" + name)["Body"].read()
                    assert hashlib.sha256(body).hexdigest() == \
                        chain[name]["sha256"], (bucket, name)
                target = tmp_path / "clone"
                clone = git.proc("clone", "-q", "--bundle-uri="
                                 + objectserver.url + bucket
                                 + "/repo/bundle-list", bare, target)
                assert clone.returncode == 0, clone.stderr
                assert git("-C", target, "for-each-ref", "refs/bundles")
                shutil.rmtree(target)
        except AssertionError as err:
            tally.case(False, "step %d, %s: %s" % (step, what, err))
            break
        tally.case(True, what)
    for key in held:
        client.put_object_legal_hold(Bucket="locked", Key=key,
                                     LegalHold={"Status": "OFF"})
    proc = gitbridge("bundlegen", "--repo", bare, check=False)
    record = json.loads((output / "bundles.json").read_text())
    kept = {"repo/" + name for generation in record["generations"]
            for name in generation["files"]} | {"repo/bundle-list"}
    # what the newest list names is there (uploaded again if it was
    # deleted); a bundle only an older kept list names may have been
    # deleted by hand; nothing else is left behind
    newest = {"repo/" + name for name in record["generations"][0][
        "files"]} | {"repo/bundle-list"}
    ok = (proc.returncode == 0 and not record.get("undeleted")
          and all(newest <= set(objectserver.keys(bucket)) <= kept
                  for bucket in ("locked", "open")))
    tally.case(ok, "final sweep: %s %s; locked has %s, open %s, kept %s"
               % (proc.stderr, record.get("undeleted"),
                  sorted(set(objectserver.keys("locked")) - kept),
                  sorted(set(objectserver.keys("open")) - kept),
                  sorted(kept)))
    tally.check()
