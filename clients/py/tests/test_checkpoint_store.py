"""Checkpoint store (``gpu_market.checkpoint``) against a real S3 server (SeaweedFS's weed,
``tests/s3server.py``): check, incremental upload, complete-or-absent, limits, restore."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from botocore.exceptions import EndpointConnectionError
from gpu_market.checkpoint import (
    CheckpointConfig,
    CheckpointError,
    CheckpointStore,
    CheckpointStoreError,
    CheckpointSuperseded,
    CheckpointTooLarge,
    Credentials,
    Manifest,
)
from gpu_market.checkpoint_manifest import CHUNK_BYTES, parse_manifest


def _config(s3, store: str | None = None, **kw) -> CheckpointConfig:
    return CheckpointConfig(store=store or s3.store_url(), endpoint=s3.endpoint,
                            region=s3.region, **kw)


def _store(s3, config: CheckpointConfig | None = None, creds: Credentials | None = None,
           **kw) -> CheckpointStore:
    creds = creds or Credentials(s3.access_key_id, s3.secret_access_key)
    return CheckpointStore(config or _config(s3), creds, **kw)


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def _read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _count(store: CheckpointStore, op: str) -> list[str]:
    """Keys of every ``op`` request the store's client sends from now on."""
    seen: list[str] = []
    store.client.meta.events.register(f"before-parameter-build.s3.{op}",
                                      lambda params, **_: seen.append(params["Key"]))
    return seen


FILES = {"state": b"step=1\n", "model/weights.bin": os.urandom(200_000),
         "model/empty": b"", "logs/a.txt": b"hello\n", "logs/copy.txt": b"hello\n"}


# ----------------------------------------------------------------------------- check


def test_check_accepts_a_writable_store_and_leaves_nothing(s3) -> None:
    store = _store(s3)
    store.check()
    assert s3.keys(store.prefix) == []


def test_check_names_wrong_credentials(s3) -> None:
    with pytest.raises(CheckpointStoreError, match="SignatureDoesNotMatch") as e:
        _store(s3, creds=Credentials(s3.access_key_id, "not-the-secret")).check()
    assert e.value.kind == "credentials" and "not-the-secret" not in str(e.value)
    with pytest.raises(CheckpointStoreError, match="InvalidAccessKeyId") as e:
        _store(s3, creds=Credentials("NOSUCHKEY", "whatever")).check()
    assert e.value.kind == "credentials" and "NOSUCHKEY" not in str(e.value)


def test_check_names_a_missing_bucket(s3) -> None:
    store = _store(s3, _config(s3, "s3://no-such-bucket-here/x"))
    with pytest.raises(CheckpointStoreError, match="'no-such-bucket-here' does not exist") as e:
        store.check()
    assert e.value.kind == "bucket"


def test_check_names_missing_write_permission(s3) -> None:
    reader = Credentials(s3.reader_access_key_id, s3.reader_secret_access_key)
    with pytest.raises(CheckpointStoreError, match="refused to write a probe object") as e:
        _store(s3, creds=reader).check()
    assert e.value.kind == "permission"


def test_check_names_an_unreachable_endpoint_within_its_bounds(s3) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    config = CheckpointConfig(store="s3://bucket/p", endpoint=f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(CheckpointStoreError, match="cannot reach the checkpoint store") as e:
        _store(s3, config, connect_timeout_s=1).check()
    assert e.value.kind == "unreachable" and time.monotonic() - t0 < 10


def test_an_operation_past_its_deadline_sends_nothing(s3) -> None:
    store = _store(s3, deadline_s=-1)
    puts = _count(store, "ListObjectsV2")
    with pytest.raises(CheckpointStoreError, match="did not finish within") as e:
        store.check()
    assert e.value.kind == "deadline" and puts == []


# ----------------------------------------------------------------------------- upload


def test_upload_restore_round_trip_with_modes(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", FILES)
    (src / "state").chmod(0o600)
    (src / "model" / "weights.bin").chmod(0o755)
    store = _store(s3)
    assert store.latest() is None
    m = store.upload(src)
    assert m is not None and m.seq == 1 and m.total_bytes == sum(map(len, FILES.values()))
    assert [f.path for f in m.files] == sorted(FILES)
    latest = store.latest()
    assert latest == m and latest.digest == hashlib.sha256(
        s3.client().get_object(Bucket=s3.bucket, Key=f"{store.prefix}/manifests/"
                               f"{1:016d}.json")["Body"].read()).digest()
    dst = tmp_path / "dst"
    _store(s3, store.config).restore(latest, dst)
    assert _read_tree(dst) == FILES
    assert (dst / "state").stat().st_mode & 0o777 == 0o600
    assert (dst / "model" / "weights.bin").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]  # no temporaries


def test_second_sync_uploads_only_changed_blobs(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path, FILES)
    store = _store(s3)
    puts = _count(store, "PutObject")
    first = store.upload(src)
    assert first is not None
    blobs = [k for k in puts if "/blobs/" in k]
    assert len(blobs) == 3  # two files hold "hello\n"; the empty file has no blob
    assert puts[-1].endswith("/manifests/0000000000000001.json")  # the manifest last
    puts.clear()
    assert store.upload(src, first) == first and puts == []  # unchanged: nothing written
    (src / "state").write_bytes(b"step=2\n")
    second = store.upload(src, first)
    assert second is not None and second.seq == 2
    changed = hashlib.sha256(b"step=2\n").hexdigest()
    assert puts == [f"{store.prefix}/blobs/{changed}",
                    f"{store.prefix}/manifests/0000000000000002.json"]
    # A new store (a successor worker) given the last manifest sends only what is new too.
    successor = _store(s3, store.config)
    puts2 = _count(successor, "PutObject")
    (src / "new").write_bytes(b"n")
    third = successor.upload(src, second)
    assert third is not None and third.seq == 3 and len(puts2) == 2
    # Forced (a container that stopped): a new manifest of the same files, no blob sent.
    forced = successor.upload(src, third, force=True)
    assert forced is not None and (forced.seq, forced.files) == (4, third.files)
    assert puts2[2:] == [f"{store.prefix}/manifests/0000000000000004.json"]


def test_a_store_that_lost_the_previous_checkpoint_gets_every_blob_again(s3, tmp_path: Path
                                                                        ) -> None:
    src = _tree(tmp_path / "src", FILES)
    store = _store(s3)
    first = store.upload(src)
    assert first is not None
    admin = s3.client()
    for key in s3.keys(store.prefix):  # someone emptied the store
        admin.delete_object(Bucket=s3.bucket, Key=key)
    puts = _count(store, "PutObject")
    again = store.upload(src, first)  # unchanged files, but nothing of them is stored
    assert again is not None and again.files == first.files and again.seq == 1
    assert len([k for k in puts if "/blobs/" in k]) == 3
    store.restore(store.latest(), tmp_path / "dst")  # type: ignore[arg-type]
    assert _read_tree(tmp_path / "dst") == FILES


def test_a_large_file_is_stored_in_chunks(s3, tmp_path: Path) -> None:
    big = os.urandom(1024) * ((CHUNK_BYTES + 5000) // 1024)
    src = _tree(tmp_path / "src", {"big.bin": big})
    store = _store(s3)
    m = store.upload(src)
    assert m is not None and len(m.files[0].chunks) == 2
    assert m.files[0].sha256 == hashlib.sha256(big).hexdigest()
    store.restore(m, tmp_path / "dst")
    assert (tmp_path / "dst" / "big.bin").read_bytes() == big


def test_interrupted_upload_leaves_no_manifest(s3, tmp_path: Path) -> None:
    """Complete or absent: the store fails after two blobs; no reader sees a checkpoint,
    and the next upload completes."""
    src = _tree(tmp_path, FILES)
    store = _store(s3)
    first = store.upload(src)
    for rel in ("state", "model/weights.bin", "logs/a.txt"):
        (src / rel).write_bytes(os.urandom(100))
    calls = []

    def fail_after_two(params, **_):
        calls.append(params["Key"])
        if len(calls) > 2:
            raise EndpointConnectionError(endpoint_url=s3.endpoint)

    store.client.meta.events.register("before-parameter-build.s3.PutObject", fail_after_two)
    with pytest.raises(CheckpointStoreError) as e:
        store.upload(src, first)
    assert e.value.kind == "unreachable"
    assert not [k for k in s3.keys(store.prefix) if k.endswith("02.json")]
    assert _store(s3, store.config).latest() == first
    store.client.meta.events.unregister("before-parameter-build.s3.PutObject", fail_after_two)
    second = store.upload(src, first)
    assert second is not None and _store(s3, store.config).latest() == second


def test_a_killed_uploader_leaves_no_manifest(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", {f"f{i}": os.urandom(1000) for i in range(6)})
    config = _config(s3)
    script = textwrap.dedent(f"""
        import os, signal
        from gpu_market.checkpoint import CheckpointConfig, CheckpointStore, Credentials
        store = CheckpointStore(CheckpointConfig(store={config.store!r}, endpoint={s3.endpoint!r}),
                                Credentials({s3.access_key_id!r}, {s3.secret_access_key!r}))
        n = []
        def die(**_):
            n.append(1)
            if len(n) == 4:
                os.kill(os.getpid(), signal.SIGKILL)
        store.client.meta.events.register("after-call.s3.PutObject", die)
        store.upload({str(src)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                          check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    keys = s3.keys(config.prefix)
    assert len([k for k in keys if "/blobs/" in k]) == 4 and not [
        k for k in keys if "/manifests/" in k]
    assert _store(s3, config).latest() is None


def test_a_file_changing_while_read_skips_this_checkpoint(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path, {"a": b"one", "b": b"two"})
    store = _store(s3)

    def write_while_uploading(params, **_):
        if params["Key"].endswith(hashlib.sha256(b"one").hexdigest()):
            with open(src / "a", "ab") as f:
                f.write(b" more")

    store.client.meta.events.register("before-parameter-build.s3.PutObject", write_while_uploading)
    assert store.upload(src) is None
    assert store.latest() is None
    store.client.meta.events.unregister("before-parameter-build.s3.PutObject", write_while_uploading)
    m = store.upload(src)
    assert m is not None and {f.path: f.size for f in m.files} == {"a": 8, "b": 3}


def test_over_the_size_limit_nothing_is_written(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path, {"a": os.urandom(700_000), "b": os.urandom(700_000)})
    store = _store(s3, _config(s3, max_mib=1))
    with pytest.raises(CheckpointTooLarge, match=r"holds 1\.3 MiB in 2 file\(s\), over the "
                       r"spec's limit of 1 MiB"):
        store.upload(src)
    assert s3.keys(store.prefix) == []


def test_symlinks_and_fifos_are_skipped_never_followed(s3, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"host file")
    src = _tree(tmp_path / "src", {"real": b"r"})
    (src / "link").symlink_to(outside)
    (src / "dirlink").symlink_to(tmp_path)
    os.mkfifo(src / "fifo")
    m = _store(s3).upload(src)
    assert m is not None and [f.path for f in m.files] == ["real"]


JOB_A = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
JOB_B = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T"


def _manifest_keys(s3, store: CheckpointStore) -> list[str]:
    return [k for k in s3.keys(store.prefix) if "/manifests/" in k]


def test_a_stale_writer_never_hides_the_newest_checkpoint(s3, tmp_path: Path) -> None:
    """Job A syncs 1 and 2, then its worker goes away; job B restores 2 and writes 3; A's
    late final sync (its old directory) writes nothing and says who moved the store on."""
    config = _config(s3)
    a_dir = _tree(tmp_path / "a", {"n": b"1"})
    a = _store(s3, config)
    one = a.upload(a_dir, job=JOB_A)
    (a_dir / "n").write_bytes(b"2")
    two = a.upload(a_dir, one, job=JOB_A)
    assert one is not None and two is not None and (one.seq, two.seq) == (1, 2)
    assert (one.parent, one.job, two.parent, two.job) == (None, JOB_A, one.digest, JOB_A)
    b = _store(s3, config)
    newest = b.latest()
    assert newest == two
    b.restore(newest, tmp_path / "b")  # type: ignore[arg-type]
    (tmp_path / "b" / "n").write_bytes(b"3")
    three = b.upload(tmp_path / "b", newest, job=JOB_B)
    assert three is not None and (three.seq, three.parent, three.job) == (3, two.digest, JOB_B)
    (a_dir / "n").write_bytes(b"2 and a bit")  # what A did after its last sync
    puts = _count(a, "PutObject")
    for force in (True, False):
        with pytest.raises(CheckpointSuperseded, match=rf"^the store moved on \(newer "
                           rf"checkpoint by job {JOB_B}\)$") as e:
            a.upload(a_dir, two, force=force, job=JOB_A)
        assert e.value.job == JOB_B and e.value.newest == three
    assert puts == []  # refused before any blob was sent
    with pytest.raises(CheckpointSuperseded):
        _store(s3, config).upload(a_dir, job=JOB_A)  # built on nothing: refused as well
    assert len(_manifest_keys(s3, a)) == 3 and _store(s3, config).latest() == three


def test_two_writers_on_the_same_parent_exactly_one_wins(s3, tmp_path: Path) -> None:
    config = _config(s3)
    base = _store(s3, config).upload(_tree(tmp_path / "base", {"x": b"0"}), job=JOB_A)
    assert base is not None
    dirs = {job: _tree(tmp_path / job, {"x": job.encode()}) for job in (JOB_A, JOB_B)}
    both_checked = threading.Barrier(2, timeout=30)
    out: dict[str, object] = {}

    def write(job: str) -> None:
        store = _store(s3, config)

        def hold(params, **_):  # both passed the newest check before either writes
            if "/manifests/" in params["Key"]:
                both_checked.wait()

        store.client.meta.events.register("before-parameter-build.s3.PutObject", hold)
        try:
            out[job] = store.upload(dirs[job], base, job=job)
        except CheckpointSuperseded as e:
            out[job] = e

    threads = [threading.Thread(target=write, args=(job,)) for job in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [r for r in out.values() if not isinstance(r, CheckpointSuperseded)]
    lost = [r for r in out.values() if isinstance(r, CheckpointSuperseded)]
    assert len(won) == 1 and len(lost) == 1, out
    winner = won[0]
    assert isinstance(winner, Manifest) and winner.seq == 2 and winner.parent == base.digest
    assert lost[0].job == winner.job and lost[0].newest == winner
    assert _store(s3, config).latest() == winner
    assert len([k for k in s3.keys(config.prefix) if "/manifests/" in k]) == 2


def test_a_claim_makes_the_restoring_job_the_owner_of_the_line(s3, tmp_path: Path) -> None:
    config = _config(s3)
    src = _tree(tmp_path / "a", FILES)
    a = _store(s3, config)
    first = a.upload(src, job=JOB_A)
    assert first is not None
    b = _store(s3, config)
    puts = _count(b, "PutObject")
    claim = b.claim(first, job=JOB_B)
    assert (claim.seq, claim.files, claim.parent, claim.job) == (2, first.files, first.digest,
                                                                 JOB_B)
    assert puts == [f"{config.prefix}/manifests/{2:016d}.json"]  # no blob sent again
    (src / "state").write_bytes(b"A's late step")
    with pytest.raises(CheckpointSuperseded, match=f"by job {JOB_B}"):
        a.upload(src, first, force=True, job=JOB_A)
    with pytest.raises(CheckpointSuperseded, match=f"by job {JOB_B}"):
        _store(s3, config).claim(first, job=JOB_A)  # restored before B's claim: restore again
    assert _store(s3, config).latest() == claim


def test_a_job_that_lost_its_record_of_its_own_write_goes_on_after_it(s3, tmp_path) -> None:
    """A worker killed between a write and noting it locally: the store's newest is its
    own job's, so it goes on from there (its directory is at least as new)."""
    src = _tree(tmp_path, {"x": b"1"})
    store = _store(s3)
    first = store.upload(src, job=JOB_A)
    (src / "x").write_bytes(b"2")
    second = store.upload(src, first, job=JOB_A)
    assert first is not None and second is not None
    restarted = _store(s3, store.config)
    assert restarted.upload(src, first, job=JOB_A) == second  # nothing changed since
    (src / "x").write_bytes(b"3")
    third = restarted.upload(src, first, job=JOB_A)
    assert third is not None and (third.seq, third.parent) == (3, second.digest)
    with pytest.raises(CheckpointSuperseded):  # another job with that old record: refused
        _store(s3, store.config).upload(src, first, force=True, job=JOB_B)


# ----------------------------------------------------------------------------- latest, restore


def test_latest_skips_a_damaged_manifest_and_refuses_when_none_verifies(s3, tmp_path) -> None:
    src = _tree(tmp_path, {"x": b"1"})
    store = _store(s3)
    first = store.upload(src)
    (src / "x").write_bytes(b"2")
    second = store.upload(src, first)
    assert second is not None
    admin = s3.client()
    key = f"{store.prefix}/manifests/{2:016d}.json"
    admin.put_object(Bucket=s3.bucket, Key=key, Body=second.canonical_bytes() + b" ")
    assert store.latest() == first
    admin.put_object(Bucket=s3.bucket, Key=f"{store.prefix}/manifests/{1:016d}.json",
                     Body=b"{}")
    with pytest.raises(CheckpointStoreError, match="none of the newest 2 verifies") as e:
        store.latest()
    assert e.value.kind == "corrupt"


def test_restore_refuses_a_tampered_blob_and_keeps_the_target(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", FILES)
    store = _store(s3)
    m = store.upload(src)
    assert m is not None
    dst = _tree(tmp_path / "dst", {"old": b"keep me"})
    digest = hashlib.sha256(FILES["model/weights.bin"]).hexdigest()
    s3.client().put_object(Bucket=s3.bucket, Key=f"{store.prefix}/blobs/{digest}",
                           Body=b"x" * len(FILES["model/weights.bin"]))
    with pytest.raises(CheckpointStoreError, match="does not match its digest") as e:
        store.restore(m, dst)
    assert e.value.kind == "corrupt"
    assert _read_tree(dst) == {"old": b"keep me"}
    assert sorted(p.name for p in (tmp_path).iterdir()) == ["dst", "src"]
    s3.client().delete_object(Bucket=s3.bucket, Key=f"{store.prefix}/blobs/{digest}")
    with pytest.raises(CheckpointStoreError, match="missing from the store"):
        store.restore(m, dst)
    assert _read_tree(dst) == {"old": b"keep me"}


def test_restore_replaces_an_existing_directory_whole(s3, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", FILES)
    store = _store(s3)
    m = store.upload(src)
    assert m is not None
    dst = _tree(tmp_path / "dst", {"stale": b"gone after restore", "state": b"old"})
    store.restore(m, dst)
    assert _read_tree(dst) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]


def test_manifests_are_canonical_json_in_the_store(s3, tmp_path: Path) -> None:
    store = _store(s3)
    m = store.upload(_tree(tmp_path, {"a": b"1"}))
    assert m is not None
    raw = s3.client().get_object(Bucket=s3.bucket, Key=f"{store.prefix}/manifests/"
                                 f"{m.seq:016d}.json")["Body"].read()
    assert parse_manifest(raw) == m and raw == m.canonical_bytes()


def test_store_refuses_an_invalid_config() -> None:
    with pytest.raises(ValueError, match="checkpoint.store"):
        CheckpointStore(CheckpointConfig(store="http://x"), Credentials("a", "b"))
    with pytest.raises(CheckpointError, match="printable ASCII"):
        Credentials("a b", "c")


@pytest.fixture
def s3(s3_server):
    return s3_server


# ----------------------------------------------------------------------------- sweep


def _blob_keys(store: CheckpointStore) -> set[str]:
    resp = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store._key("blobs") + "/")
    return {o["Key"].rsplit("/", 1)[1] for o in resp.get("Contents", [])}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_sweep_deletes_only_blobs_no_manifest_names(s3, tmp_path: Path) -> None:
    store = _store(s3, _config(s3, store=s3.store_url("sweep-a")))
    src = _tree(tmp_path / "src", {"keep": b"always", "state": b"v0"})
    prev = store.upload(src)
    for i in range(1, 20):  # 20 manifests: the first 4 are deleted (KEEP_MANIFESTS = 16)
        (src / "state").write_bytes(f"v{i}".encode())
        prev = store.upload(src, prev)
    assert prev is not None and prev.seq == 20
    before = _blob_keys(store)
    assert {_digest(f"v{i}".encode()) for i in range(20)} <= before
    # Too young: nothing goes (a manifest may be on its way).
    assert store.sweep(min_age_s=3600) == 0 and _blob_keys(store) == before
    deletes = _count(store, "DeleteObject")
    assert store.sweep(min_age_s=0) == 4
    gone = {_digest(f"v{i}".encode()) for i in range(4)}
    assert _blob_keys(store) == before - gone
    assert sorted(k.rsplit("/", 1)[1] for k in deletes) == sorted(gone)
    # Every checkpoint left restores, the oldest kept one included.
    for seq in (5, 20):
        out = tmp_path / f"out{seq}"
        store.restore(store._read_manifest(seq, _deadline()), out)
        assert _read_tree(out) == {"keep": b"always", "state": f"v{seq - 1}".encode()}


def _deadline():
    from gpu_market.checkpoint import _Deadline

    return _Deadline(60, "test")


def test_content_that_comes_back_after_a_sweep_is_sent_again(s3, tmp_path: Path) -> None:
    """The writer's memory of stored blobs must not outlive the sweep: a file that returns
    to swept content would otherwise be named by a manifest whose blob is gone."""
    store = _store(s3, _config(s3, store=s3.store_url("sweep-b")))
    src = _tree(tmp_path / "src", {"state": b"v0"})
    prev = store.upload(src)
    for i in range(1, 17):
        (src / "state").write_bytes(f"v{i}".encode())
        prev = store.upload(src, prev)
    assert store.sweep(min_age_s=0) == 1  # v0's blob: its manifest was deleted
    (src / "state").write_bytes(b"v0")
    back = store.upload(src, prev)
    assert back is not None
    out = tmp_path / "out"
    _store(s3, store.config).restore(back, out)  # a successor restores it
    assert _read_tree(out) == {"state": b"v0"}


def test_a_manifest_that_does_not_verify_stops_the_sweep(s3, tmp_path: Path) -> None:
    store = _store(s3, _config(s3, store=s3.store_url("sweep-c")))
    src = _tree(tmp_path / "src", {"state": b"v0"})
    prev = store.upload(src)
    (src / "state").write_bytes(b"v1")
    prev = store.upload(src, prev)
    store.client.put_object(Bucket=store.bucket, Body=b"{not json",
                            Key=store._key("manifests", f"{1:016d}.json"))
    orphan = b"an upload that never finished"
    store.client.put_object(Bucket=store.bucket, Body=orphan,
                            Key=store._key("blobs", _digest(orphan)))
    before = _blob_keys(store)
    with pytest.raises(CheckpointStoreError, match="manifest 1"):
        store.sweep(min_age_s=0)
    assert _blob_keys(store) == before


def test_a_writer_sweeps_on_its_own_every_sweep_every_manifests(s3, tmp_path: Path,
                                                                monkeypatch) -> None:
    import gpu_market.checkpoint as ck

    monkeypatch.setattr(ck, "SWEEP_MIN_AGE_S", 0)
    store = _store(s3, _config(s3, store=s3.store_url("sweep-d")))
    src = _tree(tmp_path / "src", {"state": b"v0"})
    prev = store.upload(src)  # manifest k holds "v{k-1}"
    for i in range(1, 2 * ck.SWEEP_EVERY):
        (src / "state").write_bytes(f"v{i}".encode())
        prev = store.upload(src, prev)
        if prev.seq == ck.SWEEP_EVERY:  # every manifest is still there: nothing swept
            assert len(_blob_keys(store)) == ck.SWEEP_EVERY
    assert prev is not None and prev.seq == 2 * ck.SWEEP_EVERY
    # The sweep at seq 32 ran after manifest 16 was deleted: manifests 17..32 name v16..v31.
    assert _blob_keys(store) == {_digest(f"v{i}".encode()) for i in range(16, 32)}
