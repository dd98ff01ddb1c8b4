"""gpu_market.workload: canonical spec encoding and hash, validation, strict JSON, sealed
secrets and wallet-signed worker API requests."""

from __future__ import annotations

import base64
import hashlib
import json
import string

import pytest
from gpu_market import workload
from gpu_market.workload import (
    NO_WORKLOAD,
    REQUEST_DOMAIN,
    REQUEST_MAX_SKEW_S,
    PortSpec,
    RequestAuthError,
    WorkloadSpec,
    WorkloadSpecError,
    canonical_bytes,
    open_secret,
    open_secrets,
    parse_env_arg,
    parse_port_arg,
    request_message,
    seal_secret,
    seal_secrets,
    sign_request,
    spec_from_json,
    spec_hash,
    spec_to_json,
    verify_request,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

SECRET_B64 = base64.b64encode(bytes(range(64))).decode()
GOLDEN = WorkloadSpec(
    image="docker.io/library/python:3.12",
    command=("python",),
    args=("-u", "train.py", "--epochs=3"),
    env=(("LANG", "C.UTF-8"), ("GREETING", "h\u00e9llo \u2603")),
    secret_env=(("HF_TOKEN", SECRET_B64),),
    ports=(PortSpec(8888), PortSpec(5353, "udp")),
    shm_size_mib=1024,
    scratch_mib=10240,
    finish_on_exit=True,
)
GOLDEN_BYTES = (
    b'{"args":["-u","train.py","--epochs=3"],"command":["python"],'
    b'"env":{"GREETING":"h\\u00e9llo \\u2603","LANG":"C.UTF-8"},"finish_on_exit":true,'
    b'"image":"docker.io/library/python:3.12",'
    b'"ports":[{"port":5353,"protocol":"udp"},{"port":8888,"protocol":"tcp"}],'
    b'"scratch_mib":10240,'
    b'"secret_env":{"HF_TOKEN":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKiss'
    b'LS4vMDEyMzQ1Njc4OTo7PD0+Pw=="},"shm_size_mib":1024,"version":1}'
)
GOLDEN_HASH = "ebf4736c777137649c8ed7bed3c486d0e56aba7e7dba349d9eb59fc3905ff802"
MINIMAL_BYTES = (
    b'{"args":[],"command":[],"env":{},"finish_on_exit":false,"image":"x","ports":[],'
    b'"secret_env":{},"version":1}'
)
MINIMAL_HASH = "24e5419cef8e1b6f4f6e9aac4f158278ab58c347d7bc6a469e397b1930b54907"

WORKER = Keypair.from_seed(bytes([11] * 32))
WORKER_SEED = bytes(WORKER)[:32]
OTHER_WORKER = Keypair.from_seed(bytes([12] * 32))
USER = Keypair.from_seed(bytes([21] * 32))
STRANGER = Keypair.from_seed(bytes([22] * 32))
JOB = bytes(range(32))
HASH = hashlib.sha256(b"spec").digest()
NOW = 1_700_000_000


def b64(n: int) -> str:
    return base64.b64encode(bytes(n)).decode()


# ----------------------------------------------------------------------------- encoding


def test_public_api_is_pinned():
    assert sorted(workload.__all__) == sorted([
        "ACTIONS", "MAX_ARGV_ITEMS", "MAX_ENV_ENTRIES", "MAX_IMAGE_BYTES", "MAX_ITEM_BYTES",
        "MAX_PORTS", "MAX_SCRATCH_MIB", "MAX_SECRET_B64_CHARS", "MAX_SHM_MIB", "MAX_SPEC_BYTES",
        "NO_WORKLOAD", "REQUEST_DOMAIN", "REQUEST_MAX_SKEW_S", "SEALED_BOX_OVERHEAD",
        "WORKLOAD_VERSION", "PortSpec", "RequestAuthError", "WorkloadSpec", "WorkloadSpecError",
        "canonical_bytes", "open_secret", "open_secrets", "parse_env_arg", "parse_port_arg",
        "request_message", "seal_secret", "seal_secrets", "sign_request", "spec_from_json",
        "spec_hash", "spec_to_json", "verify_request",
    ])  # fmt: skip
    for name in workload.__all__:
        assert getattr(workload, name) is not None
    assert workload.WORKLOAD_VERSION == 1 and NO_WORKLOAD == bytes(32)
    assert REQUEST_DOMAIN == b"gpum-workload-request-v1\x00" and REQUEST_MAX_SKEW_S == 300
    assert workload.ACTIONS == ("deliver", "status", "logs", "exec", "files", "mesh")


def test_golden_canonical_bytes_and_hash():
    assert canonical_bytes(GOLDEN) == GOLDEN_BYTES
    assert spec_hash(GOLDEN).hex() == GOLDEN_HASH
    assert hashlib.sha256(GOLDEN_BYTES).hexdigest() == GOLDEN_HASH
    assert canonical_bytes(WorkloadSpec(image="x")) == MINIMAL_BYTES
    assert spec_hash(WorkloadSpec(image="x")).hex() == MINIMAL_HASH


def test_json_form():
    obj = spec_to_json(GOLDEN)
    assert obj == {
        "version": 1,
        "image": "docker.io/library/python:3.12",
        "command": ["python"],
        "args": ["-u", "train.py", "--epochs=3"],
        "env": {"GREETING": "h\u00e9llo \u2603", "LANG": "C.UTF-8"},
        "secret_env": {"HF_TOKEN": SECRET_B64},
        "ports": [{"port": 5353, "protocol": "udp"}, {"port": 8888, "protocol": "tcp"}],
        "shm_size_mib": 1024,
        "scratch_mib": 10240,
        "finish_on_exit": True,
    }
    minimal = spec_to_json(WorkloadSpec(image="x"))
    assert "shm_size_mib" not in minimal and "scratch_mib" not in minimal


def test_round_trip_from_every_input_form():
    text = canonical_bytes(GOLDEN)
    assert spec_from_json(text) == GOLDEN
    assert spec_from_json(text.decode()) == GOLDEN
    assert spec_from_json(bytearray(text)) == GOLDEN
    assert spec_from_json(spec_to_json(GOLDEN)) == GOLDEN
    assert spec_from_json(json.dumps(spec_to_json(GOLDEN), indent=2, ensure_ascii=False)) == GOLDEN


def test_ordering_is_normalized():
    shuffled = WorkloadSpec(
        image=GOLDEN.image,
        command=["python"],
        args=["-u", "train.py", "--epochs=3"],
        env={"LANG": "C.UTF-8", "GREETING": "h\u00e9llo \u2603"},
        secret_env=[["HF_TOKEN", SECRET_B64]],
        ports=[PortSpec(8888, "tcp"), PortSpec(5353, "udp")],
        shm_size_mib=1024,
        scratch_mib=10240,
        finish_on_exit=True,
    )
    assert shuffled == GOLDEN and hash(shuffled) == hash(GOLDEN)
    assert shuffled.env == (("GREETING", "h\u00e9llo \u2603"), ("LANG", "C.UTF-8"))
    assert spec_hash(shuffled).hex() == GOLDEN_HASH
    text = (
        '{"finish_on_exit": true, "version": 1, "scratch_mib": 10240, "shm_size_mib": 1024,'
        ' "ports": [{"protocol": "tcp", "port": 8888}, {"port": 5353, "protocol": "udp"}],'
        f' "secret_env": {{"HF_TOKEN": "{SECRET_B64}"}},'
        ' "env": {"LANG": "C.UTF-8", "GREETING": "h\u00e9llo \u2603"},'
        ' "args": ["-u", "train.py", "--epochs=3"], "command": ["python"],'
        ' "image": "docker.io/library/python:3.12"}'
    )
    assert spec_hash(spec_from_json(text)).hex() == GOLDEN_HASH


def test_args_order_matters():
    a = WorkloadSpec(image="x", args=("a", "b"))
    b = WorkloadSpec(image="x", args=("b", "a"))
    assert spec_hash(a) != spec_hash(b)


def test_defaults_are_filled_and_null_means_omitted():
    spec = spec_from_json('{"image": "x", "shm_size_mib": null, "ports": [{"port": 22}]}')
    assert spec == WorkloadSpec(image="x", ports=(PortSpec(22, "tcp"),))
    assert spec.shm_size_mib is None and spec.version == 1


# ----------------------------------------------------------------------------- validation

VALID_IMAGES = [
    "x",
    "localhost/x:1",
    "docker.io/library/x:tag",
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "ghcr.io/org/my-app_v2:1.0-rc.1",
    "registry.example.com:5000/a/b/c",
    "a__b/c--d.e",
    "x@sha256:" + "a" * 64,
    "x:1@sha256:" + "0123456789abcdef" * 4,
    "Registry.Example.COM/x",
    "a" * 255,
]


@pytest.mark.parametrize("image", VALID_IMAGES)
def test_valid_images(image):
    WorkloadSpec(image=image).validate()


@pytest.mark.parametrize(
    "image",
    [
        "Python:3",
        "py thon",
        "-x",
        "x/-y",
        "x\n",
        "x\t:1",
        "x:-tag",
        "x:",
        "x@sha256:abc",
        "x@sha256:" + "A" * 64,
        "x@md5:" + "a" * 64,
        "/x",
        "x/",
        "x//y",
        "x_-y",
        "h\u00e9/x",
        "x:" + "t" * 129,
    ],
)
def test_invalid_images(image):
    with pytest.raises(WorkloadSpecError, match="is not a valid image reference"):
        WorkloadSpec(image=image).validate()


LONG = "a" * 4097
ENV_64 = tuple((f"E{i:02d}", "v") for i in range(64))

INVALID = [
    ({"version": 2}, "version 2 is not supported; this SDK knows version 1"),
    ({"version": True}, "version True is not supported"),
    ({"version": 1.0}, "version 1.0 is not supported"),
    ({"image": ""}, "image must not be empty"),
    ({"image": "a" * 256}, "image is 256 bytes; at most 255"),
    ({"image": 5}, "image must be a string, got int"),
    ({"image": "x\x00"}, "image contains a NUL character"),
    ({"command": tuple("a" * 65)}, "command and args have 65 items together; at most 64"),
    ({"command": tuple("a" * 32), "args": tuple("a" * 33)}, "have 65 items together"),
    ({"args": ("ok", LONG)}, "args\\[1\\] is 4097 bytes; at most 4096 UTF-8 bytes"),
    ({"args": ("\u00e9" * 2049,)}, "args\\[0\\] is 4098 bytes"),
    ({"command": ("python", 3)}, "command\\[1\\] must be a string, got int"),
    ({"command": "python"}, "command must be a tuple of strings"),
    ({"command": ("-c",)}, "command\\[0\\] '-c' is not allowed; the entrypoint must be non-emp"),
    ({"command": ("",)}, "command\\[0\\] '' is not allowed"),
    ({"args": ("a", "b\x00")}, "args\\[1\\] contains a NUL character"),
    ({"env": (("A", "\ud800"),)}, "env\\['A'\\] contains a lone surrogate"),
    ({"env": (("1A", "v"),)}, "env name '1A' is not allowed; names match \\[A-Za-z_\\]"),
    ({"env": (("A-B", "v"),)}, "env name 'A-B' is not allowed"),
    ({"env": (("", "v"),)}, "env name '' is not allowed"),
    ({"env": (("A" * 129, "v"),)}, "is not allowed; names match"),
    ({"env": (("A", "1"), ("A", "2"))}, "env has 'A' twice; names must be unique"),
    ({"env": (("A", LONG),)}, "env\\['A'\\] is 4097 bytes"),
    ({"env": (("A", 1),)}, "env\\['A'\\] must be a string, got int"),
    ({"env": (("A",),)}, "env must be a tuple of \\(name, value\\) pairs"),
    ({"env": ENV_64, "secret_env": (("S", b64(48)),)}, "65 entries together; at most 64"),
    ({"secret_env": (("S", "not base64!"),)}, "must be the standard padded base64"),
    ({"secret_env": (("S", b64(48).rstrip("=") + "A"),)}, "standard padded base64"),
    ({"secret_env": (("S", b64(48) + "\n"),)}, "standard padded base64"),
    ({"secret_env": (("S", b64(47)),)}, "decodes to 47 bytes; a sealed secret is 48..4144"),
    ({"secret_env": (("S", b64(4145)),)}, "decodes to 4145 bytes"),
    ({"secret_env": (("S", "A" * 8196),)}, "is 8196 bytes; at most 8192"),
    ({"secret_env": (("S", 5),)}, "secret_env\\['S'\\] must be a string"),
    ({"env": (("S", "v"),), "secret_env": (("S", b64(48)),)}, "'S' is in both env and secret_env"),
    ({"ports": tuple(PortSpec(p) for p in range(1, 18))}, "ports has 17 entries; at most 16"),
    ({"ports": (PortSpec(0),)}, "ports\\[0\\].port=0 is out of range; allowed 1..65535"),
    ({"ports": (PortSpec(65536),)}, "ports\\[0\\].port=65536 is out of range"),
    ({"ports": (PortSpec(True),)}, "ports\\[0\\].port must be an integer 1..65535, got bool"),
    ({"ports": (PortSpec(80, "sctp"),)}, "ports\\[0\\].protocol 'sctp' is not allowed; use"),
    ({"ports": (PortSpec(80), PortSpec(80))}, "ports has 80/tcp twice"),
    ({"ports": (80,)}, "ports\\[0\\] must be a PortSpec, got int"),
    ({"shm_size_mib": 0}, "shm_size_mib=0 is out of range; allowed 1..1048576"),
    ({"shm_size_mib": 1_048_577}, "shm_size_mib=1048577 is out of range"),
    ({"shm_size_mib": True}, "shm_size_mib must be an integer 1..1048576, got bool"),
    ({"shm_size_mib": 1.0}, "shm_size_mib must be an integer 1..1048576, got float"),
    ({"scratch_mib": 0}, "scratch_mib=0 is out of range; allowed 1..16777216"),
    ({"scratch_mib": 16_777_217}, "scratch_mib=16777217 is out of range"),
    ({"finish_on_exit": 1}, "finish_on_exit must be true or false, got int"),
    (
        {"env": tuple((f"E{i:02d}", "v" * 4096) for i in range(16))},
        "the canonical spec is 6[0-9]{4} bytes; at most 65536 allowed",
    ),
]


@pytest.mark.parametrize(("fields", "message"), INVALID)
def test_validation_rules(fields, message):
    spec = WorkloadSpec(**{"image": "x", **fields})
    for check in (spec.validate, lambda: canonical_bytes(spec), lambda: spec_hash(spec)):
        with pytest.raises(WorkloadSpecError, match=message):
            check()
    with pytest.raises(WorkloadSpecError):
        spec_to_json(spec)


def test_limits_are_inclusive():
    WorkloadSpec(
        image="x",
        command=("python", "-u"),  # only the entrypoint may not start with '-'
        args=("-c",) + ("a",) * 61,
        env=(("A" * 128, "v" * 4096), ("_", "")),
        secret_env=tuple((f"S{i:02d}", b64(48)) for i in range(61)) + (("Z", b64(4144)),),
        ports=tuple(PortSpec(p, "udp") for p in range(65520, 65536)),
        shm_size_mib=1_048_576,
        scratch_mib=16_777_216,
    ).validate()
    WorkloadSpec(image="x", args=("a" * 4096,), shm_size_mib=1, scratch_mib=1).validate()


def test_size_limit_counts_ascii_escapes():
    # "\u00e9" is 2 UTF-8 bytes (within the 4096-byte value limit) but 6 canonical bytes.
    fits = WorkloadSpec(image="x", env=tuple((f"E{i:02d}", "\u00e9" * 1000) for i in range(10)))
    fits.validate()
    too_big = WorkloadSpec(image="x", env=tuple((f"E{i:02d}", "\u00e9" * 2000) for i in range(6)))
    with pytest.raises(WorkloadSpecError, match="the canonical spec is 72"):
        too_big.validate()


# ----------------------------------------------------------------------------- strict JSON

STRICT = [
    ('{"image": "x", "extra": 1}', "the spec has the unknown key 'extra'; allowed: args,"),
    ('{"image": "x", "ports": [{"port": 1, "proto": "tcp"}]}', "ports\\[0\\] has the unknown key"),
    ('{"image": "x", "image": "y"}', "the spec JSON has the key 'image' twice in one object"),
    ('{"image": "x", "env": {"A": "1", "A": "2"}}', "has the key 'A' twice"),
    ('{"image": 5}', "image must be a string, got a number"),
    ('{"image": "x", "command": "python"}', "command must be a JSON array of strings"),
    ('{"image": "x", "args": ["a", 1]}', "args\\[1\\] must be a string, got a number"),
    ('{"image": "x", "args": [null]}', "args\\[0\\] must be a string, got null"),
    ('{"image": "x", "env": []}', "env must be a JSON object of name: string"),
    ('{"image": "x", "env": {"A": 1}}', "env\\['A'\\] must be a string, got a number"),
    ('{"image": "x", "secret_env": {"A": true}}', "secret_env\\['A'\\] must be a string, got a"),
    ('{"image": "x", "shm_size_mib": true}', "shm_size_mib must be an integer 1..1048576, got b"),
    ('{"image": "x", "scratch_mib": false}', "scratch_mib must be an integer"),
    ('{"image": "x", "shm_size_mib": 1.0}', "the spec JSON has the number 1.0; only integers"),
    ('{"image": "x", "shm_size_mib": 1e3}', "the spec JSON has the number 1e3"),
    ('{"image": "x", "shm_size_mib": "64"}', "shm_size_mib must be an integer"),
    ('{"image": "x", "shm_size_mib": NaN}', "the spec JSON has NaN, which is not JSON"),
    ('{"image": "x", "ports": [{"port": "80"}]}', "ports\\[0\\].port must be an integer"),
    ('{"image": "x", "ports": [{"port": true}]}', "ports\\[0\\].port must be an integer .*bool"),
    ('{"image": "x", "ports": [{"protocol": "tcp"}]}', 'ports\\[0\\] is missing "port"'),
    ('{"image": "x", "ports": [{"port": 80, "protocol": 6}]}', "ports\\[0\\].protocol must be"),
    ('{"image": "x", "ports": [{"port": 80, "protocol": "TCP"}]}', "protocol 'TCP' is not all"),
    ('{"image": "x", "ports": [80]}', "ports\\[0\\] must be an object"),
    ('{"image": "x", "ports": {"port": 80}}', "ports must be a JSON array"),
    ('{"image": "x", "ports": [{"port": 80}, {"port": 80, "protocol": "tcp"}]}', "80/tcp twice"),
    ('{"image": "x", "finish_on_exit": 0}', "finish_on_exit must be true or false, got a number"),
    ('{"image": "x", "version": "1"}', "version must be the integer 1"),
    ('{"image": "x", "version": true}', "version must be the integer 1"),
    ('{"image": "x", "version": 2}', "version 2 is not supported"),
    ('{"command": ["a"]}', 'the spec is missing "image"'),
    ('["x"]', "the spec must be a JSON object, got an array"),
    ("null", "the spec must be a JSON object, got null"),
    ('{"image": "x",}', "the spec is not valid JSON"),
    ('{"image": "x", "args": ["\\u0000"]}', "args\\[0\\] contains a NUL character"),
    ('{"image": "x", "args": ["\\ud800"]}', "args\\[0\\] contains a lone surrogate"),
    ('{"image": "Bad Image"}', "is not a valid image reference"),
]


@pytest.mark.parametrize(("text", "message"), STRICT)
def test_strict_json(text, message):
    with pytest.raises(WorkloadSpecError, match=message):
        spec_from_json(text)
    with pytest.raises(WorkloadSpecError, match=message):
        spec_from_json(text.encode())


def test_strict_json_input_bytes():
    with pytest.raises(WorkloadSpecError, match="the spec JSON is not UTF-8"):
        spec_from_json(b'{"image": "\xff"}')
    with pytest.raises(WorkloadSpecError, match="the spec JSON is 1048577 bytes; at most 1048576"):
        spec_from_json(b" " * (1024 * 1024 + 1))
    with pytest.raises(WorkloadSpecError, match="nested too deeply|not valid JSON"):
        spec_from_json('{"image": "x", "args": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(WorkloadSpecError, match="the spec must be a JSON object, got a number"):
        spec_from_json(5)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- property

_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_PATH = st.from_regex(r"[a-z0-9]{1,6}([._-][a-z0-9]{1,4})?", fullmatch=True)


@st.composite
def valid_specs(draw):
    image = "/".join(draw(st.lists(_PATH, min_size=1, max_size=3)))
    registry = draw(st.sampled_from(["", "localhost/", "ghcr.io/", "reg.example:5000/"]))
    tag = draw(st.sampled_from(["", ":1", ":v1.2-rc_3", "@sha256:" + "c" * 64]))
    entrypoint = draw(st.lists(_TEXT.filter(lambda s: s and not s.startswith("-")), max_size=1))
    names = draw(st.lists(_NAMES, unique=True, max_size=10))
    n_secret = draw(st.integers(0, len(names)))
    ports = draw(st.lists(st.tuples(st.integers(1, 65535), st.sampled_from(["tcp", "udp"])),
                          unique=True, max_size=16))  # fmt: skip
    return WorkloadSpec(
        image=registry + image + tag,
        command=tuple(entrypoint) + tuple(draw(st.lists(_TEXT, max_size=3 * len(entrypoint)))),
        args=tuple(draw(st.lists(_TEXT, max_size=5))),
        env=[(n, draw(_TEXT)) for n in names[n_secret:]],
        secret_env=[
            (n, base64.b64encode(draw(st.binary(min_size=48, max_size=80))).decode())
            for n in names[:n_secret]
        ],
        ports=[PortSpec(p, proto) for p, proto in ports],
        shm_size_mib=draw(st.none() | st.integers(1, workload.MAX_SHM_MIB)),
        scratch_mib=draw(st.none() | st.integers(1, workload.MAX_SCRATCH_MIB)),
        finish_on_exit=draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None)
@given(spec=valid_specs(), data=st.data())
def test_property_round_trip_and_stable_hash(spec, data):
    spec.validate()
    raw = canonical_bytes(spec)
    assert raw.isascii()
    assert spec_from_json(raw) == spec
    assert spec_from_json(spec_to_json(spec)) == spec
    assert spec_from_json(json.dumps(spec_to_json(spec), ensure_ascii=False, indent=1)) == spec
    assert canonical_bytes(spec_from_json(raw)) == raw
    reordered = WorkloadSpec(
        image=spec.image,
        command=spec.command,
        args=spec.args,
        env=data.draw(st.permutations(spec.env)),
        secret_env=data.draw(st.permutations(spec.secret_env)),
        ports=data.draw(st.permutations(spec.ports)),
        shm_size_mib=spec.shm_size_mib,
        scratch_mib=spec.scratch_mib,
        finish_on_exit=spec.finish_on_exit,
    )
    assert reordered == spec and spec_hash(reordered) == spec_hash(spec)
    assert spec_hash(spec) == hashlib.sha256(raw).digest()


# ----------------------------------------------------------------------------- CLI arguments


@pytest.mark.parametrize(
    ("text", "expected"),
    [("K=V", ("K", "V")), ("K=", ("K", "")), ("_k1=a=b", ("_k1", "a=b")), ("K= x ", ("K", " x "))],
)
def test_parse_env_arg(text, expected):
    assert parse_env_arg(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("K", "'K' is not NAME=VALUE"),
        ("", "'' is not NAME=VALUE"),
        ("=v", "env name '' is not allowed"),
        ("1K=v", "env name '1K' is not allowed"),
        ("K=a\x00", "contains a NUL character"),
        ("K=" + LONG, "is 4097 bytes"),
    ],
)
def test_parse_env_arg_errors(text, message):
    with pytest.raises(WorkloadSpecError, match=message):
        parse_env_arg(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8888", PortSpec(8888)), ("53/udp", PortSpec(53, "udp")), (" 1/tcp ", PortSpec(1)),
     ("65535", PortSpec(65535))],
)  # fmt: skip
def test_parse_port_arg(text, expected):
    assert parse_port_arg(text) == expected
    assert str(expected) == f"{expected.port}/{expected.protocol}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "port.port=0 is out of range"),
        ("65536", "port.port=65536 is out of range"),
        ("80/sctp", "'80/sctp' is not PORT or PORT/PROTOCOL"),
        ("80/", "is not PORT or PORT/PROTOCOL"),
        ("http", "'http' is not PORT"),
        ("", "'' is not PORT"),
        ("-1", "is not PORT"),
    ],
)
def test_parse_port_arg_errors(text, message):
    with pytest.raises(WorkloadSpecError, match=message):
        parse_port_arg(text)


# ----------------------------------------------------------------------------- sealed secrets


def test_seal_open_round_trip():
    worker_key = bytes(WORKER.pubkey())
    a = seal_secret(worker_key, b"hunter2")
    b = seal_secret(WORKER.pubkey(), b"hunter2")  # a solders Pubkey works too
    assert a != b and len(a) == len(b) == 7 + workload.SEALED_BOX_OVERHEAD
    assert open_secret(WORKER_SEED, a) == open_secret(WORKER_SEED, b) == b"hunter2"
    assert open_secret(bytes(WORKER), a) == b"hunter2"  # the 64-byte keypair works too
    assert open_secret(WORKER_SEED, seal_secret(worker_key, b"")) == b""
    big = bytes(range(256)) * 16
    assert open_secret(WORKER_SEED, seal_secret(worker_key, big)) == big


def test_open_with_another_key_fails_clearly():
    sealed = seal_secret(bytes(WORKER.pubkey()), b"hunter2")
    with pytest.raises(WorkloadSpecError, match="sealed to a different worker key or is damaged"):
        open_secret(bytes(OTHER_WORKER)[:32], sealed)
    damaged = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(WorkloadSpecError, match="sealed to a different worker key"):
        open_secret(WORKER_SEED, damaged)
    with pytest.raises(WorkloadSpecError, match="at least 48 bytes, got 47"):
        open_secret(WORKER_SEED, sealed[:47])


def test_seal_argument_errors():
    with pytest.raises(WorkloadSpecError, match="a secret is 4097 bytes; at most 4096"):
        seal_secret(bytes(WORKER.pubkey()), bytes(4097))
    with pytest.raises(WorkloadSpecError, match="worker_key is not a valid ed25519 public key"):
        seal_secret(bytes(32), b"x")  # small-order point
    with pytest.raises(ValueError, match="worker_key must be 32 bytes, got 31"):
        seal_secret(bytes(31), b"x")
    with pytest.raises(ValueError, match="plaintext must be bytes, got str"):
        seal_secret(bytes(WORKER.pubkey()), "hunter2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker_key must be bytes, got str"):
        seal_secret(str(WORKER.pubkey()), b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker_seed must be 32 or 64 bytes, got 16"):
        open_secret(bytes(16), bytes(48))
    mismatched = WORKER_SEED + bytes(OTHER_WORKER.pubkey())
    with pytest.raises(ValueError, match="last 32 are not the seed's public key"):
        open_secret(mismatched, bytes(48))


def test_seal_secrets_into_a_spec_and_open_them():
    secrets = {"TOKEN": "hunter2", "API_KEY": "k\u00e9y=1", "EMPTY": ""}
    sealed = seal_secrets(bytes(WORKER.pubkey()), secrets)
    assert [n for n, _ in sealed] == ["API_KEY", "EMPTY", "TOKEN"]
    spec = WorkloadSpec(image="x", env=(("PLAIN", "1"),), secret_env=sealed)
    spec = spec_from_json(canonical_bytes(spec))
    assert open_secrets(WORKER_SEED, spec) == tuple(sorted(secrets.items()))
    again = seal_secrets(bytes(WORKER.pubkey()), secrets)
    assert again != sealed  # fresh ephemeral keys: the spec hash changes with every sealing
    assert open_secrets(WORKER_SEED, WorkloadSpec(image="x", secret_env=again)) == open_secrets(
        WORKER_SEED, spec
    )
    with pytest.raises(WorkloadSpecError, match="secret_env\\['API_KEY'\\]: cannot open"):
        open_secrets(bytes(OTHER_WORKER)[:32], spec)


def test_seal_secrets_errors():
    key = bytes(WORKER.pubkey())
    with pytest.raises(WorkloadSpecError, match="secret_env name 'BAD-NAME' is not allowed"):
        seal_secrets(key, {"BAD-NAME": "v"})
    with pytest.raises(WorkloadSpecError, match="secret_env\\['A'\\] contains a NUL"):
        seal_secrets(key, {"A": "v\x00"})
    with pytest.raises(WorkloadSpecError, match="secret_env\\['A'\\] is 4097 bytes"):
        seal_secrets(key, {"A": LONG})
    for plaintext, message in ((b"\xff", "does not decrypt to UTF-8"), (b"a\x00", "NUL")):
        sealed = base64.b64encode(seal_secret(key, plaintext)).decode()
        with pytest.raises(WorkloadSpecError, match=f"secret_env\\['A'\\] {message}|{message}"):
            open_secrets(WORKER_SEED, WorkloadSpec(image="x", secret_env=(("A", sealed),)))


# ----------------------------------------------------------------------------- requests


def test_request_message_layout():
    msg = request_message("logs", bytes(range(32)), bytes([7]) * 32, -2)
    assert msg.hex() == (
        "6770756d2d776f726b6c6f61642d726571756573742d7631"  # "gpum-workload-request-v1"
        "00" "04" "6c6f6773"  # NUL, len("logs"), "logs"
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        "0707070707070707070707070707070707070707070707070707070707070707"
        "feffffffffffffff"
    )  # fmt: skip
    assert len(request_message("deliver", JOB, HASH, NOW)) == 25 + 1 + 7 + 64 + 8
    assert request_message("status", Pubkey(JOB), HASH, NOW) == request_message(
        "status", JOB, HASH, NOW
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("delete", JOB, HASH, NOW), "action 'delete' is not one of deliver, status, logs"),
        (("status", JOB[:31], HASH, NOW), "job must be 32 bytes, got 31"),
        (("status", JOB, HASH + b"x", NOW), "workload_hash must be 32 bytes, got 33"),
        (("status", JOB, HASH, 2**63), "timestamp=9223372036854775808 is out of i64 range"),
        (("status", JOB, HASH, True), "timestamp must be an int, got bool"),
        (("status", JOB, HASH, 1.5), "timestamp must be an int, got float"),
    ],
)
def test_request_message_errors(args, message):
    with pytest.raises(ValueError, match=message):
        request_message(*args)


def signed(action="deliver", job=JOB, workload_hash=HASH, timestamp=NOW, signer=USER):
    return sign_request(bytes(signer), action, job, workload_hash, timestamp)


def check(headers, action="deliver", job=JOB, workload_hash=HASH, now=NOW, signer=USER):
    verify_request(headers, action, job, workload_hash,
                   expected_signer=bytes(signer.pubkey()), now=now)  # fmt: skip


def test_signed_request_verifies():
    headers = signed()
    assert set(headers) == {"X-Gpum-Signer", "X-Gpum-Timestamp", "X-Gpum-Signature"}
    assert headers["X-Gpum-Signer"] == str(USER.pubkey())
    assert headers["X-Gpum-Timestamp"] == str(NOW)
    check(headers)
    check({k.lower(): v for k, v in headers.items()})
    check({k.upper(): v for k, v in headers.items()} | {"Content-Type": "application/json"})
    verify_request(headers, "deliver", Pubkey(JOB), HASH, expected_signer=USER.pubkey(), now=NOW)
    # A CLI key file's 64 numbers and a solders Keypair sign alike.
    key_file = json.dumps(list(bytes(USER)))
    assert sign_request(bytes(json.loads(key_file)), "status", JOB, HASH, NOW) == signed("status")
    assert sign_request(USER, "logs", JOB, HASH, NOW) == signed("logs")  # type: ignore[arg-type]


def test_wrong_signer_is_403():
    with pytest.raises(RequestAuthError, match="is not this job's user") as err:
        check(signed(signer=STRANGER))
    assert err.value.status == 403
    assert str(STRANGER.pubkey()) in str(err.value) and str(USER.pubkey()) in str(err.value)


@pytest.mark.parametrize(
    ("header_change", "checked_for"),
    [
        ({}, {"job": bytes(32)}),
        ({}, {"workload_hash": NO_WORKLOAD}),
        ({}, {"action": "status"}),
        ({"X-Gpum-Timestamp": str(NOW + 1)}, {}),
    ],
)
def test_tampered_request_is_401(header_change, checked_for):
    with pytest.raises(RequestAuthError, match="the request signature does not verify") as err:
        check(signed() | header_change, **checked_for)
    assert err.value.status == 401


def test_tampered_signature_and_signer_are_401():
    headers = signed()
    sig = bytearray(bytes(Signature.from_string(headers["X-Gpum-Signature"])))
    sig[0] ^= 1
    bad = headers | {"X-Gpum-Signature": str(Signature.from_bytes(bytes(sig)))}
    with pytest.raises(RequestAuthError, match="does not verify") as err:
        check(bad)
    assert err.value.status == 401
    # Claiming to be the user with someone else's signature is a bad signature, not a 403.
    forged = signed(signer=STRANGER) | {"X-Gpum-Signer": str(USER.pubkey())}
    with pytest.raises(RequestAuthError, match="does not verify") as err:
        check(forged)
    assert err.value.status == 401


@pytest.mark.parametrize("skew", [REQUEST_MAX_SKEW_S + 1, -REQUEST_MAX_SKEW_S - 1, 10**9])
def test_skew_is_401(skew):
    with pytest.raises(RequestAuthError, match="from the worker's clock; at most ±300 s") as err:
        check(signed(timestamp=NOW + skew))
    assert err.value.status == 401
    assert f"{skew:+d} s" in str(err.value)


@pytest.mark.parametrize("skew", [REQUEST_MAX_SKEW_S, -REQUEST_MAX_SKEW_S, 0])
def test_skew_at_the_limit_is_accepted(skew):
    check(signed(timestamp=NOW + skew))


def test_stale_request_by_a_stranger_is_401_not_403():
    with pytest.raises(RequestAuthError) as err:
        check(signed(signer=STRANGER, timestamp=NOW - 1000))
    assert err.value.status == 401


@pytest.mark.parametrize("missing", ["X-Gpum-Signer", "X-Gpum-Timestamp", "X-Gpum-Signature"])
def test_missing_header_is_401(missing):
    headers = signed()
    del headers[missing]
    with pytest.raises(RequestAuthError, match=f"missing {missing} header: sign the request") as e:
        check(headers)
    assert e.value.status == 401


@pytest.mark.parametrize(
    ("header", "value", "message"),
    [
        ("X-Gpum-Signer", "not-base58-0OIl", "X-Gpum-Signer 'not-base58-0OIl' is not a base58"),
        ("X-Gpum-Signer", "", "is not a base58 public key"),
        ("X-Gpum-Signer", "1111", "is not a base58 public key"),
        ("X-Gpum-Timestamp", "12a", "X-Gpum-Timestamp '12a' is not unix seconds"),
        ("X-Gpum-Timestamp", "+1700000000", "is not unix seconds"),
        ("X-Gpum-Timestamp", "01700000000", "is not unix seconds"),
        ("X-Gpum-Timestamp", "1.7e9", "is not unix seconds"),
        ("X-Gpum-Timestamp", "", "is not unix seconds"),
        ("X-Gpum-Timestamp", "9" * 19, "is not unix seconds"),
        ("X-Gpum-Signature", "garbage!", "X-Gpum-Signature is not a base58 64-byte ed25519"),
        ("X-Gpum-Signature", str(USER.pubkey()), "is not a base58 64-byte"),
    ],
)
def test_garbage_header_is_401(header, value, message):
    with pytest.raises(RequestAuthError, match=message) as err:
        check(signed() | {header: value})
    assert err.value.status == 401


def test_duplicate_header_is_401():
    items = list(signed().items()) + [("x-gpum-signer", str(STRANGER.pubkey()))]
    with pytest.raises(RequestAuthError, match="has the x-gpum-signer header twice") as err:
        check(items)  # type: ignore[arg-type]
    assert err.value.status == 401


def test_sign_request_argument_errors():
    with pytest.raises(ValueError, match="signer_secret must be 64 bytes, got 32"):
        sign_request(bytes(USER)[:32], "status", JOB, HASH, NOW)
    with pytest.raises(ValueError, match="signer_secret is not a Solana keypair"):
        sign_request(bytes(USER)[:32] + bytes(STRANGER.pubkey()), "status", JOB, HASH, NOW)
    with pytest.raises(ValueError, match="action 'run' is not one of"):
        sign_request(bytes(USER), "run", JOB, HASH, NOW)
    with pytest.raises(ValueError, match="now must be an int"):
        verify_request(signed(), "deliver", JOB, HASH, expected_signer=bytes(32), now=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected_signer must be 32 bytes"):
        verify_request(signed(), "deliver", JOB, HASH, expected_signer=b"", now=NOW)


def test_signature_header_alphabet():
    headers = signed()
    alphabet = set(string.digits + string.ascii_letters) - set("0OIl")
    assert set(headers["X-Gpum-Signature"]) <= alphabet
