"""The spec's checkpoint section (``gpu_market.checkpoint_spec``), its sealing
(``gpu_market.checkpoint``) and the manifest format (``gpu_market.checkpoint_manifest``):
pure, no store."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from gpu_market.checkpoint import (
    CheckpointError,
    Credentials,
    open_checkpoint_credentials,
    seal_checkpoint,
)
from gpu_market.checkpoint_manifest import (
    CHUNK_BYTES,
    FileEntry,
    Manifest,
    ManifestError,
    may_write_after,
    parse_manifest,
)
from gpu_market.checkpoint_spec import CheckpointConfig, checkpoint_to_json
from gpu_market.proof import CheckpointRecord
from gpu_market.workload import (
    WorkloadSpec,
    WorkloadSpecError,
    canonical_bytes,
    spec_from_json,
    spec_hash,
)
from solders.keypair import Keypair

WORKER = Keypair.from_seed(bytes([11] * 32))
WORKER_SEED = bytes(WORKER)[:32]
OTHER = Keypair.from_seed(bytes([12] * 32))
CREDS = Credentials("AKIAEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
CONFIG = CheckpointConfig(store="s3://my-bucket/runs/llama", endpoint="http://10.0.0.5:8333",
                          interval_s=60, max_mib=2048)
SEALED = seal_checkpoint(CONFIG, CREDS, bytes(WORKER.pubkey()))
MINIMAL_HASH = "24e5419cef8e1b6f4f6e9aac4f158278ab58c347d7bc6a469e397b1930b54907"


def _json(**over) -> dict:
    obj = checkpoint_to_json(SEALED)
    obj.update(over)
    return {"image": "x", "checkpoint": {k: v for k, v in obj.items() if v is not ...}}


# ----------------------------------------------------------------------------- spec


def test_round_trip_and_canonical_shape() -> None:
    spec = WorkloadSpec(image="x", checkpoint=SEALED)
    data = canonical_bytes(spec)
    assert spec_from_json(data) == spec
    obj = json.loads(data)["checkpoint"]
    assert sorted(obj) == ["access_key_id", "dir", "endpoint", "interval_s", "max_mib",
                           "region", "secret_access_key", "store"]
    assert obj["dir"] == "/checkpoint" and obj["region"] == "us-east-1"
    assert obj["store"] == "s3://my-bucket/runs/llama" and obj["max_mib"] == 2048
    aws = seal_checkpoint(CheckpointConfig(store="s3://b-1"), CREDS, bytes(WORKER.pubkey()))
    assert "endpoint" not in json.loads(canonical_bytes(WorkloadSpec("x", checkpoint=aws)))[
        "checkpoint"]
    assert spec_hash(spec) != spec_hash(WorkloadSpec(image="x"))


def test_specs_without_checkpoint_hash_as_before() -> None:
    assert b"checkpoint" not in canonical_bytes(WorkloadSpec(image="x"))
    assert spec_hash(WorkloadSpec(image="x")).hex() == MINIMAL_HASH
    assert spec_hash(spec_from_json({"image": "x", "checkpoint": None})).hex() == MINIMAL_HASH


def test_parsing_fills_defaults_and_the_canonical_form_has_them() -> None:
    minimal = {"image": "x", "checkpoint": {
        "store": "s3://bucket", "access_key_id": SEALED.access_key_id,
        "secret_access_key": SEALED.secret_access_key}}
    spec = spec_from_json(minimal)
    assert spec.checkpoint is not None
    assert spec.checkpoint.config == CheckpointConfig(store="s3://bucket")
    assert spec.checkpoint.config.prefix == "" and spec.checkpoint.config.interval_s == 30


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"dir": "checkpoint"}, "absolute container path"),
        ({"dir": "/"}, "absolute container path|other than /"),
        ({"dir": "/a/../b"}, "normalized"),
        ({"dir": "/a/./b"}, "normalized"),
        ({"dir": "/a//b"}, "normalized"),
        ({"dir": "/ckpt/"}, "normalized"),
        ({"dir": "/a b"}, "letters, digits"),
        ({"dir": "/a:b"}, "letters, digits"),
        ({"dir": "/proc/x"}, "inside /proc"),
        ({"dir": "/scratch"}, "inside /scratch"),
        ({"dir": "/etc"}, "system directory"),
        ({"dir": 5}, "checkpoint.dir must be a string"),
        ({"store": "https://bucket/p"}, "s3://bucket/prefix"),
        ({"store": "s3://Bucket/p"}, "not a valid S3 bucket name"),
        ({"store": "s3://ab/p"}, "not a valid S3 bucket name"),
        ({"store": "s3://a..b/p"}, "not a valid S3 bucket name"),
        ({"store": "s3://10.0.0.1/p"}, "not a valid S3 bucket name"),
        ({"store": "s3://bucket/p/"}, "prefix"),
        ({"store": "s3://bucket/a//b"}, "prefix"),
        ({"store": "s3://bucket/a/../b"}, "prefix"),
        ({"store": "s3://bucket/a b"}, "prefix"),
        ({"endpoint": "ftp://host"}, "http\\(s\\)://host\\[:port\\]"),
        ({"endpoint": "http://host/path"}, "no path"),
        ({"endpoint": "http://host:0"}, "no path"),
        ({"endpoint": "http://host:65536"}, "no path"),
        ({"endpoint": "http://ho st"}, "no path"),
        ({"endpoint": "http://[::1]:9000/"}, "no path"),
        ({"endpoint": 8333}, "checkpoint.endpoint must be a string"),
        ({"region": "us east"}, "checkpoint.region"),
        ({"interval_s": 9}, "interval_s=9 is out of range; allowed 10..3600"),
        ({"interval_s": 3601}, "interval_s=3601"),
        ({"interval_s": True}, "interval_s must be an integer"),
        ({"max_mib": 0}, "max_mib=0"),
        ({"max_mib": 1_048_577}, "max_mib=1048577"),
        ({"access_key_id": "AKIAEXAMPLEKEY"}, "checkpoint.access_key_id must be the standard"),
        ({"secret_access_key": base64.b64encode(bytes(47)).decode()}, "decodes to 47 bytes"),
        ({"secret_access_key": ...}, 'missing "secret_access_key"'),
        ({"store": ...}, 'missing "store"'),
        ({"extra": 1}, "unknown key 'extra'"),
    ],
)
def test_each_invalid_field_is_named(over: dict, needle: str) -> None:
    with pytest.raises(WorkloadSpecError, match=needle):
        spec_from_json(_json(**over))


def test_valid_edge_values_are_accepted() -> None:
    for over in ({"dir": "/workspace/ckpt-1_a.b"}, {"store": "s3://a.b-c/x=1/y"},
                 {"endpoint": "https://[2001:db8::1]:9000"}, {"endpoint": "http://minio"},
                 {"interval_s": 10}, {"interval_s": 3600}, {"max_mib": 1_048_576},
                 {"endpoint": None}):
        spec_from_json(_json(**over))


def test_checkpoint_must_be_an_object() -> None:
    with pytest.raises(WorkloadSpecError, match="checkpoint must be a JSON object"):
        spec_from_json({"image": "x", "checkpoint": "s3://b/p"})
    with pytest.raises(WorkloadSpecError, match="CheckpointSpec or None"):
        canonical_bytes(WorkloadSpec(image="x", checkpoint=CONFIG))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- sealing


def test_sealed_keys_open_only_with_the_worker_key() -> None:
    got = open_checkpoint_credentials(WORKER_SEED, SEALED)
    assert got == CREDS
    assert CREDS.secret_access_key not in json.dumps(checkpoint_to_json(SEALED))
    assert CREDS.access_key_id not in json.dumps(checkpoint_to_json(SEALED))
    with pytest.raises(WorkloadSpecError, match="checkpoint.access_key_id: cannot open"):
        open_checkpoint_credentials(bytes(OTHER)[:32], SEALED)
    again = seal_checkpoint(CONFIG, CREDS, bytes(WORKER.pubkey()))
    assert again.secret_access_key != SEALED.secret_access_key  # fresh ephemeral key


def test_seal_refuses_an_invalid_config() -> None:
    with pytest.raises(WorkloadSpecError, match="checkpoint.interval_s"):
        seal_checkpoint(dataclasses.replace(CONFIG, interval_s=1), CREDS, bytes(WORKER.pubkey()))


def test_credentials_never_show_their_secret(tmp_path: Path) -> None:
    assert CREDS.secret_access_key not in repr(CREDS) and "AKIA" not in repr(CREDS)
    assert CREDS.secret_access_key not in repr(SEALED) and "Credentials" not in repr(SEALED)
    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "sec/ret"}
    assert Credentials.from_env(env) == Credentials("AKID", "sec/ret")
    with pytest.raises(CheckpointError, match="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        Credentials.from_env({"AWS_ACCESS_KEY_ID": "AKID"})
    f = tmp_path / "credentials"
    f.write_text("[default]\naws_access_key_id = AKID\naws_secret_access_key = s3cr%t\n"
                 "[other]\naws_access_key_id = X\n")
    assert Credentials.from_file(f) == Credentials("AKID", "s3cr%t")
    with pytest.raises(CheckpointError, match=r"\[other\] of .* needs aws_access_key_id and"):
        Credentials.from_file(f, "other")
    with pytest.raises(CheckpointError, match="no \\[nope\\] profile"):
        Credentials.from_file(f, "nope")


# ----------------------------------------------------------------------------- manifests

SHA_EMPTY = hashlib.sha256(b"").hexdigest()
SHA_A = hashlib.sha256(b"a").hexdigest()
M = Manifest(seq=3, created_at=1_767_225_600, files=(
    FileEntry("a/b.txt", 1, SHA_A, 0o644), FileEntry("empty", 0, SHA_EMPTY, 0o600)))


def test_manifest_canonical_bytes_digest_and_record() -> None:
    data = M.canonical_bytes()
    assert parse_manifest(data) == M
    assert json.loads(data) == {"version": 2, "seq": 3, "created_at": 1_767_225_600,
                                "parent": None, "job": None,
                                "total_bytes": 1, "files": [
                                    {"path": "a/b.txt", "size": 1, "sha256": SHA_A, "mode": 420},
                                    {"path": "empty", "size": 0, "sha256": SHA_EMPTY,
                                     "mode": 384}]}
    assert M.digest == hashlib.sha256(data).digest()
    assert M.record() == CheckpointRecord(3, M.digest, 1, 1_767_225_600)
    assert M.files[0].blobs == (SHA_A,) and M.files[1].blobs == ()


def test_a_large_file_lists_its_chunks() -> None:
    size = CHUNK_BYTES * 2 + 1
    f = FileEntry("big", size, SHA_A, 0o644, (SHA_A, SHA_A, SHA_EMPTY))
    m = Manifest(1, 0, (f,))
    assert parse_manifest(m.canonical_bytes()).files[0].blobs == (SHA_A, SHA_A, SHA_EMPTY)
    with pytest.raises(ManifestError, match="has 3 chunk digests, got 2"):
        Manifest(1, 0, (dataclasses.replace(f, chunks=(SHA_A, SHA_A)),)).validate()
    with pytest.raises(ManifestError, match="has 0 chunk digests, got 1"):
        FileEntry("small", 5, SHA_A, 0o644, (SHA_A,)).validate()


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d + b" ", "not in canonical form|not JSON"),
        (lambda d: d.replace(b'"seq":3', b'"seq":3.0'), "only integers"),
        (lambda d: d.replace(b'"seq":3', b'"seq":0'), "seq must be an integer 1"),
        (lambda d: d.replace(b'"total_bytes":1', b'"total_bytes":2'), "not the sum"),
        (lambda d: d.replace(b'"version":2', b'"version":3'), "version"),
        (lambda d: d.replace(b'"version":2', b'"version":true'), "version"),
        (lambda d: d.replace(b'"version":2', b'"version":1'), "version 1 manifest is an"),
        (lambda d: d.replace(b'"parent":null', b'"parent":"ab"'), "parent must be 64"),
        (lambda d: d.replace(b'"parent":null', b'"parent":1'), "parent must be 64"),
        (lambda d: d.replace(b'"job":null', b'"job":"0OIl"'), "job must be a base58"),
        (lambda d: d.replace(b'"job":null,', b''), "exactly the keys"),
        (lambda d: d.replace(b'"a/b.txt"', b'"../b.txt"'), "relative without"),
        (lambda d: d.replace(b'"a/b.txt"', b'"/abs"'), "relative without"),
        (lambda d: d.replace(b'"empty"', b'"a/b.txt/c"'), "both a file and a directory"),
        (lambda d: d.replace(b'"mode":420', b'"mode":4095'), "mode"),
        (lambda d: d.replace(SHA_A.encode(), SHA_A.upper().encode()), "64 lowercase hex"),
        (lambda d: d.replace(b'{"created_at"', b'{"x":1,"created_at"'), "exactly the keys"),
        (lambda d: d.replace(b'"seq":3', b'"seq":3,"seq":3'), "twice"),
        (lambda d: b"\xff" + d, "not JSON"),
    ],
)
def test_parse_manifest_accepts_only_canonical_valid_bytes(mutate, needle: str) -> None:
    with pytest.raises(ManifestError, match=needle):
        parse_manifest(mutate(M.canonical_bytes()))


JOB_A = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
JOB_B = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T"


def test_a_manifest_names_its_parent_and_its_job() -> None:
    child = dataclasses.replace(M, seq=4, parent=M.digest, job=JOB_A)
    data = child.canonical_bytes()
    assert json.loads(data)["parent"] == M.digest.hex() and json.loads(data)["job"] == JOB_A
    assert parse_manifest(data) == child and child.digest != dataclasses.replace(
        child, job=JOB_B).digest != dataclasses.replace(child, parent=bytes(32)).digest
    with pytest.raises(ManifestError, match="32-byte manifest digest"):
        dataclasses.replace(M, parent=b"short").validate()


def test_a_version_1_manifest_stays_readable_with_its_digest_and_no_parent() -> None:
    """Written before manifests named their parent: the same bytes, the same digest (window
    proofs name it), read as parentless and by no known job; never written again."""
    v1 = (b'{"created_at":1767225600,"files":[{"mode":420,"path":"a/b.txt","sha256":"'
          + SHA_A.encode() + b'","size":1}],"seq":3,"total_bytes":1,"version":1}')
    m = parse_manifest(v1)
    assert (m.version, m.parent, m.job, m.seq) == (1, None, None, 3)
    assert m.canonical_bytes() == v1 and m.digest == hashlib.sha256(v1).digest()
    with pytest.raises(ManifestError, match="names no parent and no job"):
        dataclasses.replace(m, job=JOB_A).validate()
    # It is a parent like any other: its child is written as version 2.
    assert may_write_after(m, m.digest, None)
    assert not may_write_after(m, M.digest, JOB_A)  # its job is unknown: never "our own"


def test_only_the_writer_whose_parent_is_the_newest_may_write_next() -> None:
    first = dataclasses.replace(M, seq=1, job=JOB_A)
    second = dataclasses.replace(M, seq=2, parent=first.digest, job=JOB_B)
    assert may_write_after(None, None, None) and may_write_after(None, first.digest, JOB_A)
    assert may_write_after(second, second.digest, JOB_A)  # built on the newest
    assert not may_write_after(second, first.digest, JOB_A)  # built on an older one
    assert not may_write_after(second, None, JOB_A)  # built on nothing, the store has one
    assert may_write_after(second, first.digest, JOB_B)  # the newest is its own job's
    assert not may_write_after(second, first.digest, None)


def test_manifest_files_are_sorted_and_unique() -> None:
    a = FileEntry("a", 1, SHA_A)
    with pytest.raises(ManifestError, match="sorted by path, each once"):
        Manifest(1, 0, (a, a)).validate()
    with pytest.raises(ManifestError, match="sorted by path"):
        Manifest(1, 0, (FileEntry("b", 1, SHA_A), a)).validate()
