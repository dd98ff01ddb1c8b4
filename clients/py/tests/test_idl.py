"""IDL conversion (new spec -> legacy for anchorpy 0.21) and anchorpy coder consistency."""

from __future__ import annotations

import copy
import hashlib
import json
import random
import struct
from typing import Any, ClassVar

import pytest
from anchorpy import Idl
from gpu_market import idl as idl_mod
from gpu_market.codec import Codec
from gpu_market.constants import PROGRAM_ID
from gpu_market.idl import IdlConversionError, IdlDiscriminatorMismatch, IdlNotFound, to_legacy
from solders.pubkey import Pubkey

# ----------------------------------------------------------------------------- helpers


def back(ty: Any) -> Any:
    """Legacy type -> new-spec type (the inverse of the converter, written independently)."""
    if isinstance(ty, str):
        return "pubkey" if ty == "publicKey" else ty
    ((kind, inner),) = ty.items()
    if kind == "defined":
        return {"defined": {"name": inner}}
    if kind == "array":
        return {"array": [back(inner[0]), inner[1]]}
    return {kind: back(inner)}


def norm_new(ty: Any) -> Any:
    """New-spec type with empty ``generics`` dropped (they are optional in the spec)."""
    if isinstance(ty, str):
        return ty
    ((kind, inner),) = ty.items()
    if kind == "defined":
        return {"defined": {"name": inner["name"]}}
    if kind == "array":
        return {"array": [norm_new(inner[0]), inner[1]]}
    return {kind: norm_new(inner)}


def fields_of(fields: list[dict]) -> list[tuple[str, Any]]:
    return [(f["name"], norm_new(f["type"])) for f in fields]


def legacy_fields(fields: list[dict]) -> list[tuple[str, Any]]:
    return [(f["name"], back(f["type"])) for f in fields]


class Borsh:
    """A tiny borsh encoder driven by the *new-spec* IDL (independent of anchorpy)."""

    INT: ClassVar[dict[str, str]] = {"u8": "<B", "i8": "<b", "u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i",
           "u64": "<Q", "i64": "<q", "f32": "<f", "f64": "<d"}  # fmt: skip

    def __init__(self, new_idl: dict, seed: int = 7) -> None:
        self.types = {t["name"]: t for t in new_idl["types"]}
        self.rng = random.Random(seed)

    def sample(self, ty: Any) -> bytes:
        r = self.rng
        if isinstance(ty, str):
            if ty in self.INT:
                fmt = self.INT[ty]
                if fmt[-1] in "fd":
                    return struct.pack(fmt, 1.5)
                bits = struct.calcsize(fmt) * 8
                lo, hi = (0, 2**bits - 1) if fmt[-1].isupper() else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
                return struct.pack(fmt, r.choice([lo, hi, r.randint(lo, hi)]))
            if ty == "bool":
                return bytes([r.randint(0, 1)])
            if ty == "pubkey":
                return r.randbytes(32)
            if ty in ("u128", "i128"):
                return r.randbytes(16)
            if ty in ("string", "bytes"):
                raw = b"gpu" * r.randint(0, 3)
                return struct.pack("<I", len(raw)) + raw
            raise AssertionError(ty)
        ((kind, inner),) = ty.items()
        if kind == "array":
            return b"".join(self.sample(inner[0]) for _ in range(inner[1]))
        if kind == "vec":
            n = r.randint(0, 3)
            return struct.pack("<I", n) + b"".join(self.sample(inner) for _ in range(n))
        if kind == "option":
            return b"\x00" if r.random() < 0.3 else b"\x01" + self.sample(inner)
        if kind == "defined":
            return self.sample_typedef(inner["name"])
        raise AssertionError(kind)

    def sample_typedef(self, name: str, variant: int | None = None) -> bytes:
        td = self.types[name]["type"]
        if td["kind"] == "struct":
            return b"".join(self.sample(f["type"]) for f in td.get("fields") or [])
        variants = td["variants"]
        i = self.rng.randrange(len(variants)) if variant is None else variant
        fields = variants[i].get("fields") or []
        body = b"".join(self.sample(f["type"] if isinstance(f, dict) and "name" in f else f) for f in fields)
        return bytes([i]) + body


# ----------------------------------------------------------------------------- conversion


def flat_accounts(accounts: list, prefix: str = "") -> list:
    """(dotted name, account) of every leaf account; composite groups are flattened in order."""
    out = []
    for a in accounts:
        if "accounts" in a:
            out += flat_accounts(a["accounts"], f"{prefix}{a['name']}.")
        else:
            out.append((prefix + a["name"], a))
    return out


def test_every_item_survives_conversion(new_idl):
    legacy = to_legacy(new_idl)
    Idl.from_json(json.dumps(legacy))  # anchorpy parses it

    assert legacy["name"] == new_idl["metadata"]["name"]
    assert legacy["metadata"]["address"] == new_idl["address"]

    # instructions: names, account order and flags, args
    assert [ix["name"] for ix in legacy["instructions"]] == [
        ix["name"] for ix in new_idl["instructions"]
    ]
    for new_ix, old_ix in zip(new_idl["instructions"], legacy["instructions"]):
        new_accounts, old_accounts = flat_accounts(new_ix["accounts"]), flat_accounts(old_ix["accounts"])
        assert [name for name, _ in old_accounts] == [name for name, _ in new_accounts]
        for (_, a_new), (_, a_old) in zip(new_accounts, old_accounts):
            assert a_old["isMut"] == a_new.get("writable", False)
            assert a_old["isSigner"] == a_new.get("signer", False)
        assert legacy_fields(old_ix["args"]) == fields_of(new_ix["args"])

    types = {t["name"]: t for t in new_idl["types"]}
    by_name = {t["name"]: t for t in legacy["accounts"] + legacy["types"]}

    # accounts: every account has its struct, fields in order
    assert [a["name"] for a in legacy["accounts"]] == [a["name"] for a in new_idl["accounts"]]
    # types: every non-account, non-event type is kept, structs and enums alike
    special = {a["name"] for a in new_idl["accounts"]} | {e["name"] for e in new_idl["events"]}
    assert {t["name"] for t in legacy["types"]} >= set(types) - special
    for name, td in types.items():
        if name in {e["name"] for e in new_idl["events"]} and name not in by_name:
            continue
        old = by_name[name]["type"]
        if td["type"]["kind"] == "struct":
            assert legacy_fields(old["fields"]) == fields_of(td["type"]["fields"])
        else:
            assert [v["name"] for v in old["variants"]] == [v["name"] for v in td["type"]["variants"]]
            for v_new, v_old in zip(td["type"]["variants"], old["variants"]):
                if v_new.get("fields"):
                    assert legacy_fields(v_old["fields"]) == fields_of(v_new["fields"])
                else:
                    assert "fields" not in v_old

    # events: fields inline, in order
    assert [e["name"] for e in legacy["events"]] == [e["name"] for e in new_idl["events"]]
    for ev in legacy["events"]:
        assert legacy_fields(ev["fields"]) == fields_of(types[ev["name"]]["type"]["fields"])
        assert all(f["index"] is False for f in ev["fields"])

    # errors: code, name and message
    assert [(e["code"], e["name"], e.get("msg")) for e in legacy["errors"]] == [
        (e["code"], e["name"], e.get("msg")) for e in new_idl["errors"]
    ]


def test_conversion_is_pure(new_idl):
    before = copy.deepcopy(new_idl)
    to_legacy(new_idl)
    assert new_idl == before


def test_program_shape(new_idl):
    """The IDL describes the program the SDK is written against."""
    names = {ix["name"] for ix in new_idl["instructions"]}
    # Every instruction of docs/protocol.md, "Instructions".
    assert names == {
        "initialize_market", "update_params", "set_paused", "propose_authority",
        "accept_authority", "register_provider", "update_provider", "rotate_worker_key", "stake",
        "request_unstake", "withdraw_unstaked", "register_validator", "request_validator_exit",
        "withdraw_validator_bond", "create_job", "accept_job", "top_up", "settle", "finish_job",
        "cancel_job", "expire_job", "close_job", "slash_equivocation", "slash_downtime",
        "decline_job", "complete_job", "set_treasury", "sweep_vault", "withdraw_fees",
        "update_validator", "claim_validator_rewards", "replace_committee_member",
        "slash_validator_equivocation", "attest_hardware", "slash_wrong_answer", "rate_job",
    }  # fmt: skip
    assert {a["name"] for a in new_idl["accounts"]} == {
        "Market", "Provider", "Validator", "Job", "EquivocationRecord", "WrongAnswerRecord"
    }  # fmt: skip
    assert new_idl["address"] == str(PROGRAM_ID)
    assert new_idl["errors"][0] == {
        "code": 6000, "name": "FeeTooHigh", "msg": "fee_bps must be at most 2500"
    }  # fmt: skip


def test_discriminators_match_anchor_defaults(new_idl):
    for ix in new_idl["instructions"]:
        assert bytes(ix["discriminator"]) == hashlib.sha256(f"global:{ix['name']}".encode()).digest()[:8]
    for a in new_idl["accounts"]:
        assert bytes(a["discriminator"]) == hashlib.sha256(f"account:{a['name']}".encode()).digest()[:8]
    for e in new_idl["events"]:
        assert bytes(e["discriminator"]) == hashlib.sha256(f"event:{e['name']}".encode()).digest()[:8]
    idl_mod.verify_discriminators(new_idl)


@pytest.mark.parametrize("section", ["instructions", "accounts", "events"])
def test_wrong_discriminator_fails_loudly(new_idl, section):
    bad = copy.deepcopy(new_idl)
    bad[section][0]["discriminator"] = [1, 2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(IdlDiscriminatorMismatch, match=bad[section][0]["name"]):
        to_legacy(bad)


def test_coders_use_the_listed_discriminators(new_idl, codec):
    for ix in new_idl["instructions"]:
        assert codec.coder.instruction.sighashes[ix["name"]] == bytes(ix["discriminator"])
    for a in new_idl["accounts"]:
        assert codec.coder.accounts.acc_name_to_discriminator[a["name"]] == bytes(a["discriminator"])
    for e in new_idl["events"]:
        assert codec.decode_event(bytes(e["discriminator"]) + bytes(2000))[0] == e["name"]


# ----------------------------------------------------------------------------- edge cases


def synthetic_idl() -> dict:
    def d(p: str) -> list[int]:
        return list(hashlib.sha256(p.encode()).digest()[:8])

    return {
        "address": str(PROGRAM_ID),
        "metadata": {"name": "edge", "version": "0.0.1", "spec": "0.1.0"},
        "instructions": [
            {
                "name": "do_thing",
                "discriminator": d("global:do_thing"),
                "accounts": [
                    {"name": "payer", "writable": True, "signer": True},
                    {"name": "group", "accounts": [
                        {"name": "inner", "writable": True},
                        {"name": "deeper", "accounts": [{"name": "leaf"}]},
                    ]},
                    {"name": "maybe", "optional": True, "docs": ["optional one"]},
                    {"name": "sysvar", "address": "Sysvar1nstructions1111111111111111111111111"},
                ],
                "args": [
                    {"name": "a", "type": {"option": {"vec": "pubkey"}}},
                    {"name": "b", "type": {"array": [{"defined": {"name": "Shape"}}, 2]}},
                    {"name": "c", "type": "string"},
                    {"name": "d", "type": "bytes"},
                    {"name": "e", "type": {"defined": {"name": "Alias"}}},
                ],
            }
        ],
        "accounts": [{"name": "Thing", "discriminator": d("account:Thing")}],
        "events": [{"name": "Happened", "discriminator": d("event:Happened")}],
        "types": [
            {"name": "Alias", "type": {"kind": "type", "alias": "u32"}},
            {"name": "Happened", "type": {"kind": "struct", "fields": [
                {"name": "shape", "type": {"defined": {"name": "Shape"}}}]}},
            {"name": "Shape", "type": {"kind": "enum", "variants": [
                {"name": "Empty"},
                {"name": "Tuple", "fields": ["u8", {"option": "i64"}]},
                {"name": "Named", "fields": [{"name": "w", "type": "u16"}, {"name": "h", "type": "u16"}]},
            ]}},
            {"name": "Thing", "type": {"kind": "struct", "fields": [
                {"name": "owner", "type": "pubkey"},
                {"name": "shapes", "type": {"vec": {"defined": {"name": "Shape"}}}},
                {"name": "label", "type": {"option": "string"}},
            ]}},
        ],
    }  # fmt: skip


def test_edge_cases_convert_and_round_trip():
    new = synthetic_idl()
    legacy = to_legacy(new)
    ix = legacy["instructions"][0]
    assert ix["accounts"][1] == {
        "name": "group",
        "accounts": [
            {"name": "inner", "isMut": True, "isSigner": False},
            {"name": "deeper", "accounts": [{"name": "leaf", "isMut": False, "isSigner": False}]},
        ],
    }
    assert ix["accounts"][2]["isOptional"] is True
    assert "address" not in ix["accounts"][3]
    assert ix["args"][0]["type"] == {"option": {"vec": "publicKey"}}
    shape = next(t for t in legacy["types"] if t["name"] == "Shape")
    assert shape["type"]["variants"][1]["fields"] == ["u8", {"option": "i64"}]
    assert shape["type"]["variants"][2]["fields"][0] == {"name": "w", "type": "u16"}
    alias = next(t for t in legacy["types"] if t["name"] == "Alias")
    assert alias["type"] == {"kind": "alias", "value": "u32"}

    codec = Codec(new)
    assert codec.instruction_accounts("do_thing") == [
        "payer", "group.inner", "group.deeper.leaf", "maybe", "sysvar"
    ]  # fmt: skip
    borsh = Borsh(new, seed=3)
    for _ in range(20):
        data = codec.coder.accounts.acc_name_to_discriminator["Thing"] + borsh.sample_typedef("Thing")
        decoded = codec.coder.accounts.decode(data)
        assert codec.encode_account("Thing", decoded) == data
        ev = bytes(new["events"][0]["discriminator"]) + borsh.sample_typedef("Happened")
        assert codec.decode_event(ev)[0] == "Happened"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda i: i["types"][0].update(generics=[{"kind": "type", "name": "T"}]), "generics"),
        (lambda i: i["types"][0].update(serialization="bytemuck"), "serialization"),
        (lambda i: i["types"][3]["type"].update(fields=["u8"]), "tuple structs"),
        (lambda i: i["types"][3]["type"]["fields"][0].update(type={"array": ["u8", {"generic": "N"}]}),
         "generic array"),
        (lambda i: i["types"][3]["type"]["fields"][0].update(type="u512"), "unknown type"),
        (lambda i: i["types"].pop(3), "no type definition"),
    ],
)
def test_unsupported_constructs_raise(mutate, message):
    new = synthetic_idl()
    mutate(new)
    with pytest.raises(IdlConversionError, match=message):
        to_legacy(new)


def test_load_idl_json_errors(tmp_path):
    with pytest.raises(IdlNotFound, match="make idl"):
        idl_mod.load_idl_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(IdlConversionError, match="not valid JSON"):
        idl_mod.load_idl_json(tmp_path / "bad.json")
    (tmp_path / "legacy.json").write_text(json.dumps({"version": "0.1.0", "name": "x"}))
    with pytest.raises(IdlConversionError, match="new-spec"):
        idl_mod.load_idl_json(tmp_path / "legacy.json")


def test_load_idl_parses(idl_path):
    parsed = idl_mod.load_idl(idl_path)
    assert {a.name for a in parsed.accounts} == {
        "Market", "Provider", "Validator", "Job", "EquivocationRecord", "WrongAnswerRecord"
    }  # fmt: skip


# ----------------------------------------------------------------------------- coders


def test_every_account_type_decodes_and_reencodes(new_idl, codec):
    borsh = Borsh(new_idl)
    for acc in new_idl["accounts"]:
        variants = [None]
        for _ in range(25):
            for v in variants:
                body = borsh.sample_typedef(acc["name"], v)
                data = bytes(acc["discriminator"]) + body
                name, decoded = codec.decode_account(data + bytes(codec.account_size(acc["name"]) - len(data)))
                assert name == acc["name"]
                assert codec.encode_account(name, decoded) == data


def test_every_instruction_decodes_and_reencodes(new_idl, codec):
    borsh = Borsh(new_idl, seed=11)
    for ix in new_idl["instructions"]:
        for _ in range(10):
            data = bytes(ix["discriminator"]) + b"".join(borsh.sample(a["type"]) for a in ix["args"])
            parsed = codec.coder.instruction.parse(data)
            assert parsed.name == ix["name"]
            rebuilt = codec.encode_instruction_data(parsed.name, parsed.data)
            assert rebuilt == data


def test_job_encoding_matches_hand_built_borsh(codec, job_bytes):
    market, user, provider = Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()
    raw = job_bytes(market, user, provider, status=1)
    assert codec.account_size("Job") == len(raw)
    _, decoded = codec.decode_account(raw)
    assert decoded.job_id == 42 and decoded.gpu_count == 2 and decoded.last_seq == 7
    assert type(decoded.status).__name__ == "Running"
    assert codec.encode_account("Job", decoded) == raw


def test_settle_instruction_matches_hand_built_borsh(codec):
    receipt = {"seq": 9, "cumulative_seconds": 540, "window_end": -5, "proof_hash": list(range(32))}
    data = codec.encode_instruction_data("settle", {"receipt": receipt, "approved_seconds": 500})
    expected = (
        hashlib.sha256(b"global:settle").digest()[:8]
        + struct.pack("<QQq", 9, 540, -5)
        + bytes(range(32))
        + struct.pack("<Q", 500)
    )
    assert data == expected


def test_register_provider_args_match_hand_built_borsh(codec):
    worker = Pubkey.new_unique()
    spec = {"gpu_model": list(b"H100".ljust(32, b"\0")), "gpu_count": 8, "vram_mib": 81_920,
            "region": list(b"eu".ljust(16, b"\0"))}  # fmt: skip
    args = {"worker_key": worker, "worker_key_expires_at": 0, "spec": spec, "price_per_gpu_second": 3,
            "endpoint": "http://h:1"}
    data = codec.encode_instruction_data("register_provider", {"args": args})
    expected = (
        hashlib.sha256(b"global:register_provider").digest()[:8]
        + bytes(worker) + struct.pack("<q", 0)
        + b"H100".ljust(32, b"\0") + struct.pack("<HI", 8, 81_920) + b"eu".ljust(16, b"\0")
        + struct.pack("<Q", 3) + struct.pack("<I", 10) + b"http://h:1"
    )  # fmt: skip
    assert data == expected
