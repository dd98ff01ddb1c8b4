"""The validator-network calls (gpu_market.committee) against the fake RPC.

For each call: the instruction(s) it builds, checked against the committed IDL (account order,
signer/writable flags) and by hand (exact data bytes), that one signed transaction was sent, and
the client-side checks that refuse, before sending, what the program would refuse.
"""

from __future__ import annotations

import struct

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from gpu_market import pda, tokens
from gpu_market.committee import (
    assemble_transaction,
    decode_slash_downtime_message,
    default_quorum,
    endpoint_healthy,
)
from gpu_market.constants import (
    ASSOCIATED_TOKEN_PROGRAM_ID,
    ED25519_PROGRAM_ID,
    INSTRUCTIONS_SYSVAR_ID,
    PROGRAM_ID,
    SYSTEM_PROGRAM_ID,
    TOKEN_PROGRAM_ID,
)
from gpu_market.errors import TransactionTooLarge
from gpu_market.receipt import (
    attestation_message,
    attestation_signature,
    receipt_message,
    sign_receipt,
)
from gpu_market.settle import Attestation, SettleItem, parse_ed25519_signatures
from sdktestkit import JOB_STARTED_AT
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from test_client_writes import World, disc, metas, signers_of
from test_lifecycle_admin import idl_metas, token_account_bytes

ENDPOINT = "https://validator.example:8443"


@pytest.fixture
def world(fake, codec, job_bytes):
    rpc, client = fake
    return World(rpc, client, codec, job_bytes, members=3, quorum=2)


@pytest.fixture
def fake(idl_path):
    from test_client import fake_client

    return fake_client(idl_path)


def borsh_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<I", len(raw)) + raw


# ----------------------------------------------------------------------------- validator upkeep


def test_register_validator_carries_the_endpoint(world, new_idl):
    v = Keypair()
    sig = world.client.register_validator(v, world.market, 750, ENDPOINT)
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {v.pubkey()}
    keys = {"authority": v.pubkey(), "market": world.market,
            "validator": pda.validator_pda(world.market, v.pubkey()), "stake_mint": world.stake_mint,
            "authority_stake_account": tokens.ata(v.pubkey(), world.stake_mint),
            "stake_vault": world.view.stake_vault, "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID}  # fmt: skip
    assert metas(ix) == idl_metas(new_idl, "register_validator", keys)
    assert bytes(ix.data) == disc("register_validator") + struct.pack("<Q", 750) + borsh_string(ENDPOINT)


@pytest.mark.parametrize("url", ["ftp://x.example", "http://a", "http://a b", "http://" + "x" * 90])
def test_bad_endpoints_are_refused_before_sending(world, url):
    with pytest.raises(ValueError, match="endpoint"):
        world.client.register_validator(Keypair(), world.market, 1, url)
    with pytest.raises(ValueError, match="endpoint"):
        world.client.update_validator(Keypair(), world.market, url)
    assert world.rpc.sent == []


def test_update_validator(world, new_idl):
    v = world.members[0]
    world.client.update_validator(v, world.market, ENDPOINT)
    (ix,), tx = world.last()
    assert signers_of(tx) == {v.pubkey()}
    keys = {"authority": v.pubkey(), "validator": pda.validator_pda(world.market, v.pubkey())}
    assert metas(ix) == idl_metas(new_idl, "update_validator", keys)
    assert metas(ix) == [(v.pubkey(), True, False), (keys["validator"], False, True)]
    assert bytes(ix.data) == disc("update_validator") + borsh_string(ENDPOINT)


def test_claim_validator_rewards_to_the_payment_ata(world, new_idl):
    v = world.members[1]
    sig = world.client.claim_validator_rewards(v, world.market)
    (ata_ix, ix), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {v.pubkey()}
    destination = tokens.ata(v.pubkey(), world.pay_mint)
    assert ata_ix.program_id == ASSOCIATED_TOKEN_PROGRAM_ID and ata_ix.accounts[1].pubkey == destination
    keys = {"authority": v.pubkey(), "market": world.market,
            "validator": pda.validator_pda(world.market, v.pubkey()), "payment_mint": world.pay_mint,
            "fee_vault": world.view.fee_vault, "destination": destination,
            "token_program": TOKEN_PROGRAM_ID}  # fmt: skip
    assert metas(ix) == idl_metas(new_idl, "claim_validator_rewards", keys)
    assert [w for _, _, w in metas(ix)] == [False, True, True, False, True, True, False]
    assert bytes(ix.data) == disc("claim_validator_rewards")


def test_fetch_and_list_validators(world):
    v = world.members[0]
    view = world.client.fetch_validator_by_authority(world.market, v.pubkey())
    assert (view.authority, view.endpoint, view.status) == (v.pubkey(), "http://127.0.0.1:8080", "active")
    assert world.client.fetch_validator_by_authority(world.market, Pubkey.new_unique()) is None
    exiting = Keypair()
    world.add_validator(exiting, bond=5_000, status=1)
    listed = world.client.list_validators(world.market)
    assert [x.authority for x in listed] == [exiting.pubkey()] + [m.pubkey() for m in world.members]
    active = world.client.list_validators(world.market, ["active"])
    assert [x.authority for x in active] == [m.pubkey() for m in world.members]  # by bond
    filters = world.rpc.gpa_params[1]["filters"]
    assert {"dataSize": world.codec.account_size("Validator")} in filters
    assert any(f.get("memcmp", {}).get("offset") == 8 and f["memcmp"]["bytes"] == str(world.market)
               for f in filters)  # fmt: skip


def _health(status_by_port: dict[int, int | None]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/health"
        status = status_by_port[request.url.port]
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_default_committee_by_bond_among_healthy_endpoints(world):
    a, b, c, d = (Keypair() for _ in range(4))
    world.add_validator(a, bond=9_000, endpoint="http://10.0.0.1:1/")  # trailing slash is fine
    world.add_validator(b, bond=8_000, endpoint="http://10.0.0.2:2")
    world.add_validator(c, bond=7_000, endpoint="http://10.0.0.3:3")
    world.add_validator(d, bond=9_500, endpoint="http://10.0.0.4:4", status=1)  # exiting
    http = _health({1: 200, 2: 500, 3: None, 4: 200, 8080: 200})  # members: 127.0.0.1:8080
    got = world.client.default_committee(world.market, http=http)
    assert got == [a.pubkey(), world.members[0].pubkey(), world.members[1].pubkey()]
    assert world.client.default_committee(world.market, size=1, http=http) == [a.pubkey()]
    skip = world.client.default_committee(world.market, exclude=[a.pubkey()], http=http)
    assert skip == [m.pubkey() for m in world.members]
    assert world.client.default_committee(world.market, http=_health({1: 503, 2: 500, 3: None, 8080: 404})) == []


def test_endpoint_healthy_never_raises():
    assert not endpoint_healthy("", 0.1)
    assert not endpoint_healthy("http://127.0.0.1:9", 0.5)
    assert not endpoint_healthy("http://[bad", 0.5)
    assert endpoint_healthy("http://h:7", 1, _health({7: 200}))


def test_default_quorum():
    assert [default_quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert default_quorum(1, 1) == 1 and default_quorum(3, 3) == 3 and default_quorum(2, 2) == 2
    with pytest.raises(ValueError, match="min_quorum is 2"):
        default_quorum(1, 2)
    with pytest.raises(ValueError, match="1..5"):
        default_quorum(6)


# ----------------------------------------------------------------------------- create_job


@pytest.mark.parametrize("case, match", [
    ("unknown", "not a validator of market"), ("exiting", "exiting, not active"),
    ("owner", "the provider's owner"), ("worker", "the provider's worker key"),
    ("twice", "twice"), ("empty", "1..5"), ("six", "1..5"),
    ("quorum0", "quorum 0 is out of range"), ("quorum4", "quorum 4 is out of range"),
    ("quorum_over_size", "quorum 3 is out of range for a committee of 2"),
])  # fmt: skip
def test_create_job_refuses_a_bad_committee_before_sending(world, case, match):
    members = [m.pubkey() for m in world.members]
    quorum = 2
    if case == "unknown":
        members[1] = Pubkey.new_unique()
    elif case == "exiting":
        world.add_validator(world.members[2], status=1)
    elif case in ("owner", "worker"):
        key = world.owner if case == "owner" else world.worker
        world.add_validator(key)
        members[0] = key.pubkey()
    elif case == "twice":
        members[2] = members[0]
    elif case == "empty":
        members = []
    elif case == "six":
        extra = [Keypair() for _ in range(3)]
        for k in extra:
            world.add_validator(k)
        members += [k.pubkey() for k in extra]
    elif case.startswith("quorum"):
        quorum = {"quorum0": 0, "quorum4": 4, "quorum_over_size": 3}[case]
        members = members[:2] if case == "quorum_over_size" else members
    with pytest.raises(ValueError, match=match):
        world.client.create_job(Keypair(), world.market, world.provider, 1, 1, 10**9,
                                committee=members, quorum=quorum)  # fmt: skip
    assert world.rpc.sent == []


def test_create_job_quorum_below_the_markets_min_quorum(fake, codec, job_bytes):
    from test_client import market_bytes

    rpc, client = fake
    world = World(rpc, client, codec, job_bytes, members=3)
    raw = market_bytes(codec, world.pay_mint, world.stake_mint, world.treasury, pending={"min_quorum": 2},
                       effective_at=1)  # in force: min_quorum 2  # fmt: skip
    rpc.accounts[str(world.market)] = (str(PROGRAM_ID), raw)
    with pytest.raises(ValueError, match="min_quorum 2"):
        client.create_job(Keypair(), world.market, world.provider, 1, 1, 10**9, **world.committee(1))
    client.create_job(Keypair(), world.market, world.provider, 1, 1, 10**9, **world.committee(2))
    assert len(rpc.sent) == 1


# ----------------------------------------------------------------------------- settle


def _attested_item(world, approved: int, attesters) -> SettleItem:
    proof = bytes([9]) * 32
    msg = receipt_message(bytes(PROGRAM_ID), bytes(world.market), bytes(world.job), 8, 480,
                          1_700_000_480, proof)  # fmt: skip
    atts = [Attestation(k.pubkey(), attestation_signature(k, msg, approved)) for k in attesters]
    return SettleItem(world.job, 8, 480, 1_700_000_480, proof, world.worker.pubkey(),
                      sign_receipt(world.worker, msg), approved, atts)  # fmt: skip


def test_quorum_settle_is_one_packet_with_writable_attesters(world, new_idl):
    leader, other = world.members[0], world.members[2]
    item = _attested_item(world, 470, [other])
    sig = world.client.settle(leader, [item])
    (ed, ix), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {leader.pubkey()} and len(bytes(tx)) <= 1232
    entries = parse_ed25519_signatures(ed.data)
    assert [pk for pk, _, _ in entries] == [bytes(world.worker.pubkey()), bytes(other.pubkey())]
    for pk, s, m in entries:
        Ed25519PublicKey.from_public_bytes(pk).verify(s, m)
    # the worker signed the 32-byte receipt digest, the attester that digest || approved
    assert len(entries[0][2]) == 32 and entries[1][2] == entries[0][2] + struct.pack("<Q", 470)
    assert metas(ix)[-1] == (pda.validator_pda(world.market, other.pubkey()), False, True)
    assert bytes(ix.data)[-8:] == struct.pack("<Q", 470)


@pytest.mark.parametrize("case, match", [
    ("outsider", "not on the committee"), ("attester_outsider", "not on the committee"),
    ("missing", "needs 1 attestation"), ("self", "twice or is the submitter"),
    ("too_many", "needs 1 attestation"),
])  # fmt: skip
def test_settle_refuses_signers_the_program_would(world, case, match):
    leader, a, b = world.members
    submitter, attesters = leader, [a]
    if case == "outsider":
        submitter = Keypair()
    elif case == "attester_outsider":
        attesters = [Keypair()]
    elif case == "missing":
        attesters = []
    elif case == "self":
        attesters = [leader]
    elif case == "too_many":
        attesters = [a, b]
    with pytest.raises(ValueError, match=match):
        world.client.settle(submitter, [_attested_item(world, 470, attesters)])
    assert world.rpc.sent == []


# ----------------------------------------------------------------------------- replace member


def test_replace_committee_member(world, new_idl):
    gone, new = world.members[1], Keypair()
    world.add_validator(gone, status=1)  # exiting
    world.add_validator(new)
    sig = world.client.replace_committee_member(world.user, world.job, 1, new.pubkey())
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {world.user.pubkey()}
    keys = {"user": world.user.pubkey(), "market": world.market, "provider": world.provider,
            "job": world.job, "previous_validator": pda.validator_pda(world.market, gone.pubkey()),
            "new_validator": pda.validator_pda(world.market, new.pubkey())}  # fmt: skip
    assert metas(ix) == idl_metas(new_idl, "replace_committee_member", keys)
    assert [w for _, _, w in metas(ix)] == [False, False, False, True, False, False]
    assert bytes(ix.data) == disc("replace_committee_member") + bytes([1])
    # a closed Validator account may be replaced too
    del world.rpc.accounts[str(pda.validator_pda(world.market, gone.pubkey()))]
    world.client.replace_committee_member(world.user, world.job, 1, new.pubkey())


@pytest.mark.parametrize("case, match", [
    ("active", "still active"), ("index", "not a committee position"),
    ("member", "already on the committee"), ("unknown", "not a validator of market"),
    ("exiting", "exiting, not active"), ("owner", "the provider's owner"),
])  # fmt: skip
def test_replace_committee_member_refusals(world, case, match):
    gone, new = world.members[1], Keypair()
    world.add_validator(new)
    if case != "active":
        world.add_validator(gone, status=1)
    index, target = 1, new.pubkey()
    if case == "index":
        index = 3
    elif case == "member":
        target = world.members[2].pubkey()
    elif case == "unknown":
        target = Pubkey.new_unique()
    elif case == "exiting":
        world.add_validator(new, status=1)
    elif case == "owner":
        world.add_validator(world.owner)
        target = world.owner.pubkey()
    with pytest.raises(ValueError, match=match):
        world.client.replace_committee_member(world.user, world.job, index, target)
    assert world.rpc.sent == []


# ----------------------------------------------------------------------------- downtime


def _targets(world, reporter_stake: Pubkey) -> list[tuple[Pubkey, bool, bool]]:
    return [(world.market, False, True), (world.provider, False, True), (world.job, False, True),
            (world.stake_mint, False, True), (world.view.stake_vault, False, True),
            (reporter_stake, False, True), (TOKEN_PROGRAM_ID, False, False)]  # fmt: skip


def test_slash_downtime_quorum_signs(world, new_idl):
    leader, other = world.members[0], world.members[2]
    world.client.slash_downtime(leader, world.job, None, [other], 1_700_000_300)
    (ix,), tx = world.last()
    assert signers_of(tx) == {leader.pubkey(), other.pubkey()}
    reporter_stake = tokens.ata(leader.pubkey(), world.stake_mint)
    fixed = metas(ix)[:9]
    names = {"validator_authority": leader.pubkey(), "validator": pda.validator_pda(world.market, leader.pubkey()),
             "targets.market": world.market, "targets.provider": world.provider, "targets.job": world.job,
             "targets.stake_mint": world.stake_mint, "targets.stake_vault": world.view.stake_vault,
             "targets.reporter_stake_account": reporter_stake, "targets.token_program": TOKEN_PROGRAM_ID}  # fmt: skip
    assert fixed == [(names[n], s, w) for n, s, w in _flat_idl_metas(new_idl, "slash_downtime")]
    assert metas(ix) == [(leader.pubkey(), True, False),
                         (pda.validator_pda(world.market, leader.pubkey()), False, False),
                         *_targets(world, reporter_stake),
                         (pda.validator_pda(world.market, other.pubkey()), False, False),
                         (other.pubkey(), True, False)]  # fmt: skip
    assert bytes(ix.data) == disc("slash_downtime") + struct.pack("<q", 1_700_000_300)


def _flat_idl_metas(new_idl, name):
    ix = next(i for i in new_idl["instructions"] if i["name"] == name)
    out = []
    for a in ix["accounts"]:
        for b in a.get("accounts", [a]):
            prefix = f"{a['name']}." if "accounts" in a else ""
            out.append((prefix + b["name"], bool(b.get("signer")), bool(b.get("writable"))))
    return out


@pytest.mark.parametrize("case, match", [
    ("few", "exactly 2 committee member"), ("many", "exactly 2 committee member"),
    ("outsider", "not on the committee"), ("twice", "appears twice"), ("open", "only a running or finishing job"),
])  # fmt: skip
def test_slash_downtime_refusals(world, job_bytes, case, match):
    leader, a, b = world.members
    others = [a]
    if case == "few":
        others = []
    elif case == "many":
        others = [a, b]
    elif case == "outsider":
        others = [Keypair()]
    elif case == "twice":
        others = [leader]
    elif case == "open":
        world.rpc.accounts[str(world.job)] = (str(PROGRAM_ID), job_bytes(
            world.market, world.user.pubkey(), world.provider, 0,
            committee=[m.pubkey() for m in world.members], quorum=2))  # fmt: skip
    with pytest.raises(ValueError, match=match):
        world.client.slash_downtime(leader, world.job, None, others, 0)
    assert world.rpc.sent == []


def test_slash_downtime_signed_over_http(world):
    """The leader builds the unsigned transaction, a member checks and signs the message bytes,
    the leader joins the signatures and sends the presigned transaction."""
    leader, other = world.members[0], world.members[1]
    dest = Pubkey.new_unique()
    tx = world.client.build_slash_downtime_tx(leader.pubkey(), world.job, [other.pubkey()], 1_700_000_200,
                                              dest)  # fmt: skip
    assert isinstance(tx, Transaction) and tx.message.account_keys[0] == leader.pubkey()
    wire = bytes(tx.message)  # what goes over HTTP (base64)
    request = decode_slash_downtime_message(world.codec, wire)
    assert (request.job, request.market, request.provider) == (world.job, world.market, world.provider)
    assert (request.submitter, request.others) == (leader.pubkey(), [other.pubkey()])
    assert (request.last_proof_window_end, request.reporter_stake_account) == (1_700_000_200, dest)
    member_sig = other.sign_message(wire)
    with pytest.raises(ValueError, match=f"no signature from {leader.pubkey()}"):
        assemble_transaction(tx.message, {other.pubkey(): member_sig})
    with pytest.raises(ValueError, match="does not verify"):
        assemble_transaction(tx.message, {leader.pubkey(): leader.sign_message(b"x"),
                                          other.pubkey(): member_sig})  # fmt: skip
    with pytest.raises(ValueError, match="not fully signed"):
        world.client.send_presigned(tx)
    signed = assemble_transaction(tx.message, {leader.pubkey(): leader.sign_message(wire),
                                               other.pubkey(): bytes(member_sig)})  # fmt: skip
    sig = world.client.send_presigned(signed)
    sent = world.rpc.sent[-1]
    sent.verify()
    assert sent.signatures[0] == sig and bytes(sent.message) == wire


def test_decode_slash_downtime_message_refuses_anything_else(world, codec):
    leader, other = world.members[0], world.members[1]
    ix = world.client.slash_downtime_instruction(leader.pubkey(), world.job, [other.pubkey()], 5)
    extra = world.client.codec.instruction("update_validator", {"endpoint": ENDPOINT},
                                           {"authority": other.pubkey(), "validator": Pubkey.new_unique()})  # fmt: skip
    with pytest.raises(ValueError, match="one instruction"):
        decode_slash_downtime_message(codec, bytes(Message.new_with_blockhash([ix, extra], leader.pubkey(), Hash.default())))
    with pytest.raises(ValueError, match="not a slash_downtime"):
        decode_slash_downtime_message(codec, Message.new_with_blockhash([extra], leader.pubkey(), Hash.default()))
    stranger = Keypair()  # a fee payer outside the committee would need its own signature
    with pytest.raises(ValueError, match="signers other than"):
        decode_slash_downtime_message(codec, Message.new_with_blockhash([ix], stranger.pubkey(), Hash.default()))
    with pytest.raises(ValueError, match="not a transaction message"):
        decode_slash_downtime_message(codec, b"\x01\x02")


# ----------------------------------------------------------------------------- validator equivocation


def _attestation(world, key: Keypair, seq: int, approved: int, tag: int, window_end: int = 1_700_000_600):
    receipt = {"seq": seq, "cumulative_seconds": 60 * seq, "window_end": window_end,
               "proof_hash": bytes([tag]) * 32}  # fmt: skip
    msg = receipt_message(bytes(PROGRAM_ID), bytes(world.market), bytes(world.job), seq, 60 * seq,
                          window_end, receipt["proof_hash"])  # fmt: skip
    return receipt, approved, attestation_signature(key, msg, approved), attestation_message(msg, approved)


def test_slash_validator_equivocation_layout(world, new_idl):
    cheat, reporter = world.members[2], Keypair()
    r1, a1, s1, m1 = _attestation(world, cheat, 9, 500, 1)
    r2, a2, s2, m2 = _attestation(world, cheat, 9, 540, 1)  # same receipt, another approved total
    ixs = world.client.slash_validator_equivocation_instructions(
        reporter.pubkey(), world.job, cheat.pubkey(), r1, a1, s1, r2, a2, s2)
    assert [ix.program_id for ix in ixs] == [ED25519_PROGRAM_ID, PROGRAM_ID]
    assert parse_ed25519_signatures(ixs[0].data) == [(bytes(cheat.pubkey()), s1, m1),
                                                     (bytes(cheat.pubkey()), s2, m2)]  # fmt: skip
    # the one signer's key is stored once: 2 + 2 x 14 offsets + 32 + 2 x (64 + 40)
    assert len(bytes(ixs[0].data)) == 2 + 28 + 32 + 2 * (64 + 40)
    validator = pda.validator_pda(world.market, cheat.pubkey())
    record = pda.validator_equivocation_pda(validator, world.job, JOB_STARTED_AT, 9)
    assert record == Pubkey.find_program_address(
        [b"validator_equivocation", bytes(validator), bytes(world.job), struct.pack("<q", JOB_STARTED_AT),
         struct.pack("<Q", 9)], PROGRAM_ID)[0]  # fmt: skip
    keys = {"reporter": reporter.pubkey(), "market": world.market, "job": world.job, "validator": validator,
            "stake_mint": world.stake_mint, "stake_vault": world.view.stake_vault,
            "reporter_stake_account": tokens.ata(reporter.pubkey(), world.stake_mint), "record": record,
            "instructions": INSTRUCTIONS_SYSVAR_ID, "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID}  # fmt: skip
    assert metas(ixs[1]) == idl_metas(new_idl, "slash_validator_equivocation", keys)

    def receipt_bytes(r):
        return struct.pack("<QQq", r["seq"], r["cumulative_seconds"], r["window_end"]) + r["proof_hash"]

    assert bytes(ixs[1].data) == (disc("slash_validator_equivocation") + receipt_bytes(r1) + struct.pack("<Q", a1)
                                  + receipt_bytes(r2) + struct.pack("<Q", a2))  # fmt: skip
    sig = world.client.slash_validator_equivocation(reporter, world.job, cheat.pubkey(), r1, a1, s1, r2, a2, s2)
    _, tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {reporter.pubkey()} and len(bytes(tx)) <= 1232


def test_slash_validator_equivocation_refusals(world, job_bytes, monkeypatch):
    cheat, reporter = world.members[0], Keypair()
    r1, a1, s1, _ = _attestation(world, cheat, 9, 500, 1)
    r2, a2, s2, _ = _attestation(world, cheat, 9, 500, 2)
    call = world.client.slash_validator_equivocation
    with pytest.raises(ValueError, match="identical"):
        call(reporter, world.job, cheat.pubkey(), r1, a1, s1, r1, a1, s1)
    r3, a3, s3, _ = _attestation(world, cheat, 10, 500, 2)
    with pytest.raises(ValueError, match="different seqs"):
        call(reporter, world.job, cheat.pubkey(), r1, a1, s1, r3, a3, s3)
    with pytest.raises(ValueError, match="second_signature"):
        call(reporter, world.job, cheat.pubkey(), r1, a1, s1, r2, a2 + 1, s2)  # signed another total
    stranger = Keypair()
    r4, a4, s4, _ = _attestation(world, stranger, 9, 500, 3)
    with pytest.raises(ValueError, match="not on the committee"):
        call(reporter, world.job, stranger.pubkey(), r1, a1, s1, r4, a4, s4)
    early, ae, se, _ = _attestation(world, cheat, 9, 500, 4, window_end=JOB_STARTED_AT)
    with pytest.raises(ValueError, match="not after the job started"):
        call(reporter, world.job, cheat.pubkey(), r1, a1, s1, early, ae, se)
    import gpu_market.committee as committee_mod

    monkeypatch.setattr(committee_mod, "PACKET_DATA_SIZE", 500)
    with pytest.raises(TransactionTooLarge, match="500"):
        call(reporter, world.job, cheat.pubkey(), r1, a1, s1, r2, a2, s2)
    world.rpc.accounts[str(world.job)] = (str(PROGRAM_ID), job_bytes(
        world.market, world.user.pubkey(), world.provider, 0, committee=[cheat.pubkey()]))  # fmt: skip
    with pytest.raises(ValueError, match="Open"):
        call(reporter, world.job, cheat.pubkey(), r1, a1, s1, r2, a2, s2)
    assert world.rpc.sent == []


# ----------------------------------------------------------------------------- fee vault


def test_fees_to_withdraw_leaves_the_validators_rewards(fake, codec, job_bytes):
    from test_client import market_bytes

    rpc, client = fake
    world = World(rpc, client, codec, job_bytes)
    rpc.accounts[str(world.market)] = (str(PROGRAM_ID), market_bytes(
        codec, world.pay_mint, world.stake_mint, world.treasury,
        totals={"rewards_unclaimed": 300, "rewards": 500}))  # fmt: skip
    vault = client.fetch_market(world.market).fee_vault
    rpc.accounts[str(vault)] = (str(TOKEN_PROGRAM_ID), token_account_bytes(world.pay_mint, world.market, 1_000))
    assert client.fees_to_withdraw(world.market) == 700
    rpc.accounts[str(vault)] = (str(TOKEN_PROGRAM_ID), token_account_bytes(world.pay_mint, world.market, 300))
    assert client.fees_to_withdraw(world.market) == 0
