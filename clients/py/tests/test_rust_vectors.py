"""The SDK decodes every account type and event exactly as the Rust program serializes them.

``docs/vectors/accounts.json`` is written by ``program-tests/tests/vectors.rs`` from the
program's own types (and, under ``runtime``, from bytes read in a real runtime run). Every
vector is decoded here with the SDK's codec (accounts and events), the typed account views,
and the log parser behind ``GpuMarketClient.events``; every field must equal the JSON.
"""

from __future__ import annotations

import base64
import json
from dataclasses import fields as dc_fields
from pathlib import Path
from typing import Any

import pytest
from gpu_market import accounts
from gpu_market.accounts import decode_fixed_str
from gpu_market.codec import plain
from solders.pubkey import Pubkey

VECTORS = Path(__file__).resolve().parents[3] / "docs" / "vectors" / "accounts.json"
DOC = json.loads(VECTORS.read_text())
ACCOUNTS = DOC["accounts"] + DOC["runtime"]["accounts"]
EVENTS = DOC["events"] + DOC["runtime"]["events"]


def _normal(value: Any) -> Any:
    """SDK-decoded plain value -> the vectors' spelling (ints and pubkeys as str, bytes hex)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Pubkey):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _idl_fields(new_idl: dict, type_name: str) -> set[str]:
    ty = next(t for t in new_idl["types"] if t["name"] == type_name)
    return {f["name"] for f in ty["type"]["fields"]}


def test_vectors_cover_every_account_and_event_of_the_idl(new_idl):
    assert {v["type"] for v in ACCOUNTS} == {a["name"] for a in new_idl["accounts"]}
    assert {v["type"] for v in EVENTS} == {e["name"] for e in new_idl["events"]}
    statuses = {json.dumps(v["fields"]["status"]) for v in ACCOUNTS if v["type"] == "Provider"}
    assert {'"active"', '"paused"'} <= statuses and any("jailed" in s for s in statuses)
    job_statuses = {v["fields"]["status"] for v in ACCOUNTS if v["type"] == "Job"}
    assert job_statuses == set(accounts.JOB_STATUSES)


@pytest.mark.parametrize("vector", ACCOUNTS, ids=lambda v: v["name"])
def test_codec_decodes_account(codec, new_idl, vector):
    data = bytes.fromhex(vector["hex"])
    assert codec.account_size(vector["type"]) == len(data)
    name, decoded = codec.decode_account(data)
    assert name == vector["type"]
    assert set(vector["fields"]) == _idl_fields(new_idl, name), (
        "vector lists exactly the IDL fields"
    )
    assert _normal(plain(decoded)) == vector["fields"]


@pytest.mark.parametrize("vector", EVENTS, ids=lambda v: v["name"])
def test_codec_decodes_event(codec, new_idl, vector):
    data = bytes.fromhex(vector["hex"])
    decoded = codec.decode_event(data)
    assert decoded is not None, f"unknown event discriminator for {vector['type']}"
    name, value = decoded
    assert name == vector["type"]
    assert set(vector["fields"]) == _idl_fields(new_idl, name), (
        "vector lists exactly the IDL fields"
    )
    assert _normal(plain(value)) == vector["fields"]


def test_log_parser_decodes_every_event_in_order(codec):
    """The path of ``GpuMarketClient.events``: ``Program data:`` lines of this program."""
    pid = str(codec.program_id)
    logs = [f"Program {pid} invoke [1]"]
    logs += [f"Program data: {base64.b64encode(bytes.fromhex(v['hex'])).decode()}" for v in EVENTS]
    logs.append(f"Program {pid} success")
    parsed = codec.parse_events(logs)
    assert [n for n, _ in parsed] == [v["type"] for v in EVENTS]
    assert [_normal(plain(d)) for _, d in parsed] == [v["fields"] for v in EVENTS]


def _view_expected(view_value: Any, expected: Any, field: str) -> Any:
    """The vectors' value of ``field`` as the typed views present it."""
    if field in ("gpu_model", "region", "endpoint"):
        return decode_fixed_str(bytes.fromhex(expected))
    if isinstance(view_value, bytes):
        return bytes.fromhex(expected)
    if isinstance(view_value, Pubkey):
        return Pubkey.from_string(expected)
    if isinstance(view_value, bool):
        return expected
    if isinstance(view_value, int):
        return int(expected)
    return expected


def _check_view(view: Any, expected: dict, where: str) -> None:
    names = {f.name for f in dc_fields(view)} - {"address", "jailed_until"}
    missing = set(expected) - names
    assert not missing, f"{where}: the view drops fields {sorted(missing)}"
    for f in sorted(expected):
        got = getattr(view, f)
        want = expected[f]
        if f == "status":
            status = want if isinstance(want, str) else next(iter(want))
            assert got == status, f"{where}.status"
            if status == "jailed":
                assert view.jailed_until == int(want["jailed"]["until"])
            continue
        if isinstance(want, dict):
            _check_view(got, want, f"{where}.{f}")
            continue
        if f == "committee":  # the view keeps the committee_len occupied slots
            n = int(expected["committee_len"])
            assert got == [Pubkey.from_string(k) for k in want[:n]], f"{where}.committee"
            assert all(Pubkey.from_string(k) == Pubkey.default() for k in want[n:]), where
            continue
        if isinstance(want, list) and want and isinstance(want[0], dict):  # [struct; N]
            assert len(got) == len(want), f"{where}.{f}"
            for i, (g, w) in enumerate(zip(got, want)):
                _check_view(g, w, f"{where}.{f}[{i}]")
            continue
        assert got == _view_expected(got, want, f), f"{where}.{f}"


@pytest.mark.parametrize("vector", ACCOUNTS, ids=lambda v: v["name"])
def test_account_views_match(codec, vector):
    address = Pubkey.from_bytes(bytes(range(32)))
    view = accounts.decode_account(bytes.fromhex(vector["hex"]), address, codec)
    assert view.address == address
    _check_view(view, vector["fields"], vector["name"])
