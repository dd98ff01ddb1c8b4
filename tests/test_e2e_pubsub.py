"""The local chain's Solana PubSub (RPC port + 1): every subscription method against real
transactions, the notification shapes clients parse, unsubscribes and bad requests."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from gpu_market import tokens
from gpu_market.client import GpuMarketClient
from gpu_market.processes import LocalChain
from solders.keypair import Keypair
from websockets.sync.client import ClientConnection, connect

pytestmark = pytest.mark.e2e

TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"



@pytest.fixture(scope="module")
def chain(localnet: LocalChain) -> Iterator[tuple[GpuMarketClient, str]]:
    client = GpuMarketClient(localnet.url, payer=Keypair())
    try:
        client.airdrop(client.payer.pubkey(), 10**10)
        yield client, localnet.pubsub
    finally:
        client.close()


def _call(ws: ClientConnection, method: str, params: list | None = None, id_: int = 1) -> Any:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                        "params": params if params is not None else []}))
    return json.loads(ws.recv(timeout=10))


def _note(ws: ClientConnection) -> dict[str, Any]:
    return json.loads(ws.recv(timeout=10))


def test_signature_account_program_and_logs_notifications(chain) -> None:
    client, url = chain
    admin = client.payer
    with connect(url) as ws:
        mint = tokens.create_mint(client, admin, 6)
        acct = tokens.create_ata(client, admin, admin.pubkey(), mint)
        sub_acct = _call(ws, "accountSubscribe", [str(acct), {"encoding": "base64"}])["result"]
        sub_prog = _call(ws, "programSubscribe", [TOKEN_PROGRAM, {"encoding": "base64",
                         "filters": [{"dataSize": 165}, {"memcmp": {"offset": 0,
                                                                     "bytes": str(mint)}}]}], 2)["result"]
        sub_logs = _call(ws, "logsSubscribe", [{"mentions": [str(acct)]}], 3)["result"]
        assert len({sub_acct, sub_prog, sub_logs}) == 3
        sig = tokens.mint_to(client, mint, acct, admin, 42)
        got = {}
        for _ in range(3):
            n = _note(ws)
            got[n["method"]] = n["params"]
        acc = got["accountNotification"]
        assert acc["subscription"] == sub_acct and acc["result"]["context"]["slot"] >= 0
        data = base64.b64decode(acc["result"]["value"]["data"][0])
        assert int.from_bytes(data[64:72], "little") == 42  # the token amount after the mint
        assert acc["result"]["value"]["owner"] == TOKEN_PROGRAM
        prog = got["programNotification"]
        assert prog["subscription"] == sub_prog and prog["result"]["value"]["pubkey"] == str(acct)
        logs = got["logsNotification"]["result"]["value"]
        assert logs["signature"] == str(sig) and logs["err"] is None
        assert logs["logs"][0] == f"Program {TOKEN_PROGRAM} invoke [1]"
        # A signature subscription for a landed transaction fires at once, then ends.
        r = _call(ws, "signatureSubscribe", [str(sig), {"commitment": "confirmed"}], 4)
        n = _note(ws)
        assert n["method"] == "signatureNotification" and n["params"]["subscription"] == r["result"]
        assert n["params"]["result"]["value"] == {"err": None}
        assert _call(ws, "signatureUnsubscribe", [r["result"]], 5)["error"]["message"] == \
            "Invalid subscription id."
        for i, (method, sub) in enumerate((("accountUnsubscribe", sub_acct),
                                           ("programUnsubscribe", sub_prog),
                                           ("logsUnsubscribe", sub_logs))):
            assert _call(ws, method, [sub], 10 + i)["result"] is True
        tokens.mint_to(client, mint, acct, admin, 1)
        with pytest.raises(TimeoutError):
            ws.recv(timeout=1.5)  # unsubscribed: nothing more


def test_a_pending_signature_is_notified_when_it_lands_with_its_error(chain) -> None:
    client, url = chain
    admin = client.payer
    mint = tokens.create_mint(client, admin, 6)
    acct = tokens.create_ata(client, admin, admin.pubkey(), mint)
    # A transaction that fails on chain (skip preflight): minting with the wrong authority.
    from solders.instruction import AccountMeta, Instruction
    from solders.pubkey import Pubkey

    stranger = Keypair()
    client.airdrop(stranger.pubkey(), 10**9)
    data = bytes([7]) + (5).to_bytes(8, "little")  # MintTo
    ix = Instruction(Pubkey.from_string(TOKEN_PROGRAM), data, [
        AccountMeta(mint, False, True), AccountMeta(acct, False, True),
        AccountMeta(stranger.pubkey(), True, False)])
    from solana.rpc.types import TxOpts
    from solders.message import Message
    from solders.transaction import Transaction

    blockhash = client.rpc.get_latest_blockhash().value.blockhash
    tx = Transaction([stranger], Message.new_with_blockhash([ix], stranger.pubkey(), blockhash),
                     blockhash)
    with connect(url) as ws:
        sub = _call(ws, "signatureSubscribe", [str(tx.signatures[0])])["result"]
        client.rpc.send_raw_transaction(bytes(tx), TxOpts(skip_preflight=True))
        n = _note(ws)
        assert n["method"] == "signatureNotification" and n["params"]["subscription"] == sub
        assert n["params"]["result"]["value"]["err"] == {"InstructionError": [0, {"Custom": 4}]}


def test_slots_and_bad_requests(chain) -> None:
    _, url = chain
    with connect(url) as ws:
        sub = _call(ws, "slotSubscribe")["result"]
        a = _note(ws)["params"]["result"]
        b = _note(ws)["params"]["result"]
        assert b["slot"] > a["slot"] and b["parent"] == a["slot"]
        assert _call(ws, "slotUnsubscribe", [sub], 2)["result"] is True
        assert _call(ws, "fooSubscribe", [], 3)["error"]["code"] == -32601
        assert _call(ws, "accountSubscribe", ["not-a-key"], 4)["error"]["code"] == -32602
        r = _call(ws, "logsSubscribe", [{"mentions": ["a", "b"]}], 5)
        assert "Only 1 address" in r["error"]["message"]
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=5))["error"]["code"] == -32700
        # A subscription of another connection cannot be cancelled from this one.
        with connect(url) as other:
            theirs = _call(other, "slotSubscribe")["result"]
            assert _call(ws, "slotUnsubscribe", [theirs], 6)["error"]["message"] == \
                "Invalid subscription id."


def test_program_watcher_calls_back_for_matching_accounts_and_survives_a_dead_node(chain) -> None:
    import threading

    from gpu_market.pubsub import ProgramWatcher, pubsub_url
    from solders.pubkey import Pubkey

    client, url = chain
    assert pubsub_url(client.url) == url
    admin = client.payer
    mint = tokens.create_mint(client, admin, 6)
    seen: list[Pubkey] = []
    got = threading.Event()

    def on_change(address: Pubkey, data: bytes) -> None:
        assert data[:32] == bytes(mint)  # the filter's mint
        seen.append(address)
        got.set()

    flt = [{"dataSize": 165}, {"memcmp": {"offset": 0, "bytes": str(mint)}}]
    w = ProgramWatcher(url, Pubkey.from_string(TOKEN_PROGRAM), flt, on_change).start()
    dead = ProgramWatcher("ws://127.0.0.1:9", Pubkey.from_string(TOKEN_PROGRAM), flt,
                          lambda *_: None, name="dead").start()
    try:
        assert w.subscribed.wait(10)
        other = tokens.create_mint(client, admin, 6)
        tokens.create_ata(client, admin, admin.pubkey(), other)  # another mint: filtered out
        acct = tokens.create_ata(client, admin, admin.pubkey(), mint)
        assert got.wait(10) and set(seen) == {acct}
        assert not dead.subscribed.is_set()  # no node there: nothing raised, polling would go on
    finally:
        w.stop()
        dead.stop()


def test_the_validator_keeps_account_reads_while_its_subscriptions_are_live(chain) -> None:
    """``gpum-validator run`` subscribes to the program's Job and Provider accounts and, while
    a subscription is confirmed, keeps the reads it covers for ``SUBSCRIBED_TTL``; when the
    subscription ends, back to the short TTL."""
    from types import SimpleNamespace

    from gpum_validator.chain import SUBSCRIBED_TTL, JobAccounts, ProviderKeys
    from gpum_validator.cli import _watch_accounts

    client, _ = chain
    intake = SimpleNamespace(providers=ProviderKeys(client), jobs=JobAccounts(client))
    watchers = _watch_accounts(client.url, bytes(client.program_id), intake)
    try:
        assert [w.name for w in watchers] == ["provider-watch", "job-watch"]
        assert all(w.subscribed.wait(10) for w in watchers)
        for cache in (intake.providers, intake.jobs):
            assert cache.live_ttl == SUBSCRIBED_TTL
            assert cache._live_since() is not None
    finally:
        for w in watchers:
            w.stop()
    assert intake.jobs._live_since() is None and intake.providers._live_since() is None
