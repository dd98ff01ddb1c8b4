"""The committed IDL carries the seeds of every PDA a client can derive, and they derive the
same addresses as the SDK's ``gpu_market.pda`` (which mirrors ``seeds.rs``).

A PDA account of an instruction has a ``pda`` exactly when the instruction's other accounts and
arguments supply its seeds (a provider from ``market`` and ``owner``, a validator from
``market`` and its authority, a job from ``market``, ``user`` and a ``job_id`` argument, a vault
from ``market``, ...); an account whose address derives from its own data (the market, a job
after creation) has none, since Anchor's resolver would then never read it from ``relations``.
Each ``pda`` is evaluated with symbolic keys (the market ``M`` of creator ``C`` and id 3, the
provider owner ``O``, the user ``U``, the validator authority ``A``, job id 7, ...) and must
give the SDK's address for that account, so a seed in the wrong order, a wrong constant or a
wrong account is caught for each instruction. Program and sysvar accounts carry their
``address``, and the mints and treasury bound with ``address = market.<field>`` carry
``relations`` to the market, so Anchor's client resolves them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from solders.pubkey import Pubkey

ROOT = Path(__file__).resolve().parents[1]
IDL = json.loads((ROOT / "idl" / "gpu_market.json").read_text())
PROGRAM = Pubkey.from_string(IDL["address"])

# Accounts named like a PDA of this program (instruction account name -> which PDA).
PDA_ACCOUNTS = {
    "market": "market", "provider": "provider", "validator": "validator",
    "new_validator": "validator", "previous_validator": "validator", "job": "job",
    "escrow": "escrow", "stake_vault": "stake_vault", "fee_vault": "fee_vault", "record": "record",
}
# The accounts (and arguments) of the same instruction a PDA's seeds need.
SEED_SOURCES: dict[str, list[set[str]]] = {
    "market": [{"authority", "arg:id"}],  # initialize_market: the creator signs
    "provider": [{"market", "owner"}],
    "validator": [{"market", "authority"}, {"market", "validator_authority"}],
    "job": [{"market", "user", "arg:job_id"}],
    "escrow": [{"job"}],
    "stake_vault": [{"market"}],
    "fee_vault": [{"market"}],
}


def derivable(ix: dict[str, Any], prefix: str, name: str) -> bool:
    """Whether the accounts beside ``name`` (in its group: ``prefix``) and ``ix``'s arguments
    supply the seeds of that account."""
    kind = PDA_ACCOUNTS[name]
    if kind == "record" or name != kind and kind == "validator":
        # Records are created with their seeds; a committee member's Validator PDA derives from
        # an authority the instruction does not name.
        return kind == "record"
    have = {a["name"] for p, a in accounts(ix["accounts"]) if p == prefix}
    have |= {f"arg:{a['name']}" for a in ix["args"]}
    return any(need <= have for need in SEED_SOURCES[kind])


# Symbolic world: every key and number a seed can name.
KEYS = {n: Pubkey.new_unique() for n in ("M", "C", "O", "U", "A", "P", "V", "J")}
M, C, O, U, A, P, V, J = (KEYS[n] for n in ("M", "C", "O", "U", "A", "P", "V", "J"))
MARKET_ID, JOB_ID, STARTED_AT, SEQ = 3, 7, 1_700_000_000, 5
DIGEST = bytes(range(32))
# What each account-path seed stands for. `authority` is the validator's, except in
# initialize_market where it is the market's creator.
ACCOUNT_VALUES: dict[str, Any] = {
    "market": M, "market.creator": C, "market.id": MARKET_ID,
    "provider": P, "provider.market": M, "provider.owner": O, "owner": O,
    "user": U, "job": J, "job.market": M, "job.user": U, "job.job_id": JOB_ID,
    "job.started_at": STARTED_AT, "targets.job": J, "targets.job.started_at": STARTED_AT,
    "validator": V, "validator.market": M, "validator.authority": A,
    "new_validator.authority": A, "validator_authority": A, "authority": A,
}
ARG_VALUES: dict[str, Any] = {
    "job_id": JOB_ID, "id": MARKET_ID, "first.seq": SEQ, "evidence.challenge_digest": DIGEST,
}
INT_LE = {"market.id": 8, "job.job_id": 8, "job_id": 8, "id": 8, "first.seq": 8,
          "job.started_at": -8, "targets.job.started_at": -8}


def expected(kind: str, ix: str) -> Pubkey:
    if kind == "market":
        return pda.market_pda(C, MARKET_ID, PROGRAM)
    if kind == "record":
        return {
            "slash_equivocation": lambda: pda.equivocation_pda(J, STARTED_AT, SEQ, PROGRAM),
            "slash_validator_equivocation":
                lambda: pda.validator_equivocation_pda(V, J, STARTED_AT, SEQ, PROGRAM),
            "slash_wrong_answer": lambda: pda.wrong_answer_pda(P, DIGEST, PROGRAM),
        }[ix]()
    return {
        "provider": lambda: pda.provider_pda(M, O, PROGRAM),
        "validator": lambda: pda.validator_pda(M, A, PROGRAM),
        "job": lambda: pda.job_pda(M, U, JOB_ID, PROGRAM),
        "escrow": lambda: pda.escrow_pda(J, PROGRAM),
        "stake_vault": lambda: pda.stake_vault_pda(M, PROGRAM),
        "fee_vault": lambda: pda.fee_vault_pda(M, PROGRAM),
    }[kind]()


def seed_bytes(seed: dict[str, Any], ix: str) -> bytes:
    if seed["kind"] == "const":
        return bytes(seed["value"])
    path = seed["path"]
    if seed["kind"] == "arg":
        value = ARG_VALUES[path]
    elif ix == "initialize_market" and path == "authority":
        value = C
    else:
        value = ACCOUNT_VALUES[path]
    if isinstance(value, int):
        width = INT_LE[path]
        return value.to_bytes(abs(width), "little", signed=width < 0)
    return bytes(value)


def accounts(items: list[dict[str, Any]], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for item in items:
        if "accounts" in item:
            yield from accounts(item["accounts"], f"{prefix}{item['name']}.")
        else:
            yield prefix, item


def pda_accounts() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for ix in IDL["instructions"]:
        for prefix, acc in accounts(ix["accounts"]):
            if acc["name"] in PDA_ACCOUNTS:
                yield ix["name"], prefix + acc["name"], acc


def test_every_derivable_pda_carries_its_seeds_and_no_other_does() -> None:
    by_ix = {ix["name"]: ix for ix in IDL["instructions"]}
    wrong = [(ix, path, "pda" in acc) for ix, path, acc in pda_accounts()
             if ("pda" in acc) != derivable(by_ix[ix], path[: -len(acc["name"])], acc["name"])]
    assert wrong == []
    # No seed reads the account's own data (Anchor could never compute it).
    for ix, name, acc in pda_accounts():
        for seed in acc.get("pda", {}).get("seeds", []):
            assert not seed.get("path", "").startswith(f"{acc['name']}."), (ix, name, seed)
    # The instructions a user drives with chosen accounts only get their PDAs filled in.
    for ix, name in [("create_job", "job"), ("create_job", "escrow"), ("settle", "validator"),
                     ("settle", "fee_vault"), ("stake", "provider"), ("stake", "stake_vault"),
                     ("register_provider", "provider"), ("withdraw_fees", "fee_vault")]:
        assert any(i == ix and n == name and "pda" in a for i, n, a in pda_accounts()), (ix, name)


@pytest.mark.parametrize("ix,name,acc", [p for p in pda_accounts() if "pda" in p[2]],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_the_seeds_derive_the_sdk_address(ix: str, name: str, acc: dict[str, Any]) -> None:
    assert "program" not in acc["pda"], "this program's own PDA"
    seeds = [seed_bytes(s, ix) for s in acc["pda"]["seeds"]]
    address, _ = Pubkey.find_program_address(seeds, PROGRAM)
    assert address == expected(PDA_ACCOUNTS[acc["name"]], ix), acc["pda"]


def test_the_const_seeds_are_the_constants_of_seeds_rs() -> None:
    source = (ROOT / "programs" / "gpu_market" / "src" / "seeds.rs").read_text()
    constants = {m.encode() for m in re.findall(r'pub const [A-Z_]+: &\[u8\] = b"([a-z_]+)";', source)}
    assert len(constants) == 10
    used = {bytes(s["value"]) for _, _, acc in pda_accounts() if "pda" in acc
            for s in acc["pda"]["seeds"] if s["kind"] == "const"}
    assert used == constants


def test_programs_sysvars_mints_and_treasuries_resolve() -> None:
    addresses = {
        "token_program": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
        "system_program": "11111111111111111111111111111111",
        "instructions": "Sysvar1nstructions1111111111111111111111111",
    }
    seen = set()
    for ix in IDL["instructions"]:
        for _, acc in accounts(ix["accounts"]):
            if acc["name"] in addresses:
                assert acc.get("address") == addresses[acc["name"]], (ix["name"], acc)
                seen.add(acc["name"])
            # Bound with `address = market.<field>`: Anchor resolves them from the market.
            if acc["name"] in ("payment_mint", "stake_mint") and ix["name"] != "initialize_market":
                assert acc.get("relations") == ["market"], (ix["name"], acc)
                seen.add(acc["name"])
            if acc["name"] == "treasury" and ix["name"] in ("sweep_vault", "withdraw_fees"):
                assert acc.get("relations") == ["market"], (ix["name"], acc)
    assert seen == {*addresses, "payment_mint", "stake_mint"}
