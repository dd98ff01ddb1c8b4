"""The hardening-era SDK calls against the real program on the local chain (gpum-localnet).

decline, complete and expire (no tokens move; the user's close refunds, donations included),
set_treasury, sweep_vault, parameter announcements that take effect unbonding_seconds later,
create_job's price limit (a provider's price rise after the user read it), and the fee vault:
settles pay it even while the treasury account is closed, and withdraw_fees pays a replacement
treasury. Deadlines are reached with the localnet's dev-only clock warp
(gpu_market.localchain.warp_time), so the module takes seconds, not the hours it simulates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from gpu_market import pda, tokens
from gpu_market.accounts import effective_params
from gpu_market.client import GpuMarketClient
from gpu_market.constants import TOKEN_PROGRAM_ID
from gpu_market.errors import AccountNotFound, GpuMarketError
from gpu_market.instructions import withdraw_fees_ix
from gpu_market.localchain import warp_time
from gpu_market.receipt import receipt_message, sign_receipt
from gpu_market.settle import SettleItem
from harness import Market
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e
OWN_LOCALNET = "deadlines are reached by warping the clock, which never goes back (see conftest)"

PRICE = 2  # base units per GPU-second
WINDOW = 60
DEPOSIT = 100_000


@dataclass
class Chain:
    url: str
    client: GpuMarketClient
    admin: Keypair
    owner: Keypair
    worker: Keypair
    user: Keypair
    stake_mint: Pubkey
    payment_mint: Pubkey
    market: Pubkey
    provider: Pubkey
    validator: Keypair
    next_job_id: int = 1

    def create_job(self, market: Pubkey | None = None, provider: Pubkey | None = None,
                   max_price: int | None = None) -> Pubkey:  # fmt: skip
        """A 1-GPU job whose committee is ``validator`` alone (quorum 1)."""
        job_id, self.next_job_id = self.next_job_id, self.next_job_id + 1
        _, job = self.client.create_job(self.user, market or self.market, provider or self.provider,
                                        job_id, 1, DEPOSIT, committee=[self.validator.pubkey()],
                                        quorum=1, max_price_per_gpu_second=max_price)  # fmt: skip
        return job

    def register_validator(self, market: Pubkey) -> None:
        """``validator`` bonds 1,000 stake units in ``market`` (its endpoint is never called)."""
        bond = tokens.ata(self.validator.pubkey(), self.stake_mint)
        if self.client.account_info(bond) is None:
            tokens.create_ata(self.client, self.admin, self.validator.pubkey(), self.stake_mint)
        tokens.mint_to(self.client, self.stake_mint, bond, self.admin, 1_000)
        self.client.register_validator(self.validator, market, 1_000, "http://127.0.0.1:9")

    def user_balance(self) -> int:
        return self.client.token_balance(tokens.ata(self.user.pubkey(), self.payment_mint))


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Chain:
    m = market_factory(tmp_path_factory.mktemp("hardening"),
                       ["owner", "worker", "user", "validator"],
                       {"unbonding_seconds": 0, "window_seconds": WINDOW},
                       payment={"user": 100 * DEPOSIT})
    client, admin, market = m.client, m.admin, m.address
    owner, worker, user, validator = (m.kps[n] for n in ("owner", "worker", "user", "validator"))
    spec = {"gpu_model": "Simulated H100", "gpu_count": 4, "vram_mib": 81920, "region": "local"}
    client.register_provider(owner, worker.pubkey(), spec, PRICE, market)
    chain = Chain(m.url, client, admin, owner, worker, user, m.stake_mint, m.payment_mint, market,
                  pda.provider_pda(market, owner.pubkey()), validator)  # fmt: skip
    chain.register_validator(market)
    return chain


def _error(fn, *args) -> str:
    with pytest.raises(GpuMarketError) as info:
        fn(*args)
    return info.value.name


def test_decline_then_close_refunds_the_deposit_and_a_donation(chain: Chain) -> None:
    c = chain.client
    before = chain.user_balance()
    job = chain.create_job()
    assert c.fetch_provider(chain.provider).gpus_in_use == 1
    tokens.mint_to(c, chain.payment_mint, pda.escrow_pda(job), chain.admin, 5)  # a donation
    assert _error(c.decline_job, Keypair(), job) == "NotProviderSigner"
    sig = c.decline_job(chain.worker, job)
    assert c.fetch_job(job).status == "declined"
    assert c.fetch_provider(chain.provider).gpus_in_use == 0
    assert ("JobDeclined", {"job": job, "provider": chain.provider, "by": chain.worker.pubkey()}) in c.events(sig)
    sig = c.close_job(chain.user, job)
    assert c.fetch_job(job) is None
    assert chain.user_balance() == before + 5
    closed = dict(c.events(sig))["JobClosed"]
    assert (closed["refunded"], closed["surplus_returned"]) == (DEPOSIT, 5)


def test_finish_then_complete_after_the_grace_then_close(chain: Chain) -> None:
    c = chain.client
    before = chain.user_balance()
    job = chain.create_job()
    c.accept_job(chain.owner, job)
    c.finish_job(chain.user, job)
    j = c.fetch_job(job)
    assert j.status == "finishing" and j.terms.grace_seconds == WINDOW * 12
    assert not j.settlement_over(c.chain_time())
    stranger = Keypair()
    c.airdrop(stranger.pubkey(), 10**9)
    assert _error(c.complete_job, stranger, job) == "GracePeriodActive"
    assert _error(c.close_job, chain.user, job) == "GracePeriodActive"
    warp_time(chain.url, j.grace_ends_at - c.chain_time() + 1)
    assert c.fetch_job(job).settlement_over(c.chain_time())
    sig = c.complete_job(stranger, job)  # anyone
    assert c.fetch_job(job).status == "completed"
    assert c.fetch_provider(chain.provider).gpus_in_use == 0
    assert dict(c.events(sig))["JobCompleted"]["by"] == stranger.pubkey()
    c.close_job(chain.user, job)
    assert chain.user_balance() == before  # nothing was settled: all refunded


def test_expire_moves_no_tokens_and_close_refunds(chain: Chain) -> None:
    c = chain.client
    before = chain.user_balance()
    job = chain.create_job()
    c.accept_job(chain.worker, job)
    caller = Keypair()
    c.airdrop(caller.pubkey(), 10**9)
    assert _error(c.expire_job, caller, job) == "JobNotExpired"
    j = c.fetch_job(job)
    warp_time(chain.url, j.expirable_after - c.chain_time() + 1)
    sig = c.expire_job(caller, job)
    assert c.fetch_job(job).status == "failed"
    assert c.token_balance(pda.escrow_pda(job)) == DEPOSIT  # untouched
    expired = dict(c.events(sig))["JobExpired"]
    assert expired["by"] == caller.pubkey() and "refunded" not in expired
    assert c.fetch_provider(chain.provider).reputation.jobs_failed >= 1
    c.close_job(chain.user, job)
    assert chain.user_balance() == before


def test_set_treasury_and_sweep_vault(chain: Chain) -> None:
    c = chain.client
    new_owner = Keypair().pubkey()
    new_treasury = tokens.create_ata(c, chain.admin, new_owner, chain.payment_mint)
    wrong_mint = tokens.create_ata(c, chain.admin, new_owner, chain.stake_mint)
    assert _error(c.set_treasury, chain.admin, chain.market, wrong_mint) == "InvalidTreasury"
    assert _error(c.set_treasury, chain.owner, chain.market, new_treasury) == "NotMarketAuthority"
    sig = c.set_treasury(chain.admin, chain.market, new_treasury)
    assert c.fetch_market(chain.market).treasury == new_treasury
    assert dict(c.events(sig))["TreasurySet"]["treasury"] == new_treasury

    m = c.fetch_market(chain.market)
    assert c.vault_surplus(chain.market) == 0
    assert _error(c.sweep_vault, chain.user, chain.market) == "NothingToSweep"
    tokens.mint_to(c, chain.stake_mint, m.stake_vault, chain.admin, 7)  # a donation
    assert c.vault_surplus(chain.market) == 7
    sig = c.sweep_vault(chain.user, chain.market)  # anyone; the treasury owner's ATA is created
    destination = tokens.ata(new_owner, chain.stake_mint)
    assert c.token_balance(destination) == 7 and c.vault_surplus(chain.market) == 0
    assert dict(c.events(sig))["VaultSwept"] == {"market": chain.market, "amount": 7,
                                                 "destination": destination}  # fmt: skip


def test_params_are_announced_and_apply_to_new_jobs_only(chain: Chain) -> None:
    c = chain.client
    treasury = tokens.ata(chain.admin.pubkey(), chain.payment_mint)
    c.initialize_market(chain.admin, 1, chain.stake_mint, chain.payment_mint, treasury,
                        {"unbonding_seconds": 3600, "window_seconds": WINDOW})  # fmt: skip
    market = pda.market_pda(chain.admin.pubkey(), 1)
    spec = {"gpu_model": "Simulated H100", "gpu_count": 4, "vram_mib": 81920, "region": "local"}
    c.register_provider(chain.owner, chain.worker.pubkey(), spec, PRICE, market)
    chain.register_validator(market)
    provider = pda.provider_pda(market, chain.owner.pubkey())
    old_job = chain.create_job(market, provider)

    sig = c.update_params(chain.admin, market, {"fee_bps": 700, "window_seconds": 30})
    now = c.chain_time()
    m = c.fetch_market(market)
    assert m.params.fee_bps == 500 and m.pending_params.fee_bps == 700
    assert now <= m.params_effective_at <= now + 3600
    assert effective_params(m, now).window_seconds == WINDOW
    assert c.min_deposit(market, provider, 1) == PRICE * WINDOW
    announced = dict(c.events(sig))["ParamsAnnounced"]
    assert announced["effective_at"] == m.params_effective_at
    assert announced["pending"]["window_seconds"] == 30

    warp_time(chain.url, m.params_effective_at - now)
    assert effective_params(c.fetch_market(market), c.chain_time()).fee_bps == 700
    assert c.min_deposit(market, provider, 1) == PRICE * 30
    new_job = chain.create_job(market, provider)
    assert (c.fetch_job(new_job).terms.fee_bps, c.fetch_job(new_job).terms.window_seconds) == (700, 30)
    assert c.fetch_job(new_job).terms.grace_seconds == 30 * 12
    old = c.fetch_job(old_job).terms  # terms fixed at creation
    assert (old.fee_bps, old.window_seconds, old.grace_seconds) == (500, WINDOW, WINDOW * 12)


def test_create_job_refuses_a_price_raised_after_the_user_read_it(chain: Chain,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    c = chain.client
    with pytest.raises(ValueError, match="PriceAboveLimit"):  # already above: nothing is sent
        chain.create_job(max_price=PRICE - 1)
    # What the user's client read: the Provider account before the front-run.
    provider_before = c.account_info(chain.provider)
    c.update_provider(chain.owner, chain.provider, price_per_gpu_second=PRICE + 1)  # front-run
    try:
        read = c._account_infos

        def stale_provider(keys):  # create_job reads [market, provider, clock, *committee]
            infos = read(keys)
            return [provider_before if k == chain.provider else i for k, i in zip(keys, infos)]

        monkeypatch.setattr(c, "_account_infos", stale_provider)
        before = chain.user_balance()
        assert _error(chain.create_job) == "PriceAboveLimit"  # the limit defaulted to PRICE
        assert chain.user_balance() == before
        monkeypatch.undo()
        job = chain.create_job(max_price=PRICE + 1)  # the user accepts the new price
        assert c.fetch_job(job).terms.rate_per_second == PRICE + 1
        c.cancel_job(chain.user, job)
        c.close_job(chain.user, job)
        assert chain.user_balance() == before
    finally:
        c.update_provider(chain.owner, chain.provider, price_per_gpu_second=PRICE)


def _close_token_account_ix(account: Pubkey, owner: Pubkey) -> Instruction:
    """SPL Token CloseAccount (9): the rent goes to the owner."""
    return Instruction(TOKEN_PROGRAM_ID, bytes([9]), [
        AccountMeta(account, False, True), AccountMeta(owner, False, True), AccountMeta(owner, True, False)])


def _settle_one_window(chain: Chain, validator: Keypair, job: Pubkey, seq: int) -> str:
    """The worker's receipt for window ``seq`` (WINDOW seconds each, billed in full), settled by
    ``validator`` once the chain's clock has passed the window's end."""
    c = chain.client
    j = c.fetch_job(job)
    window_end = j.started_at + seq * WINDOW
    if c.chain_time() < window_end:
        warp_time(chain.url, window_end - c.chain_time())
    proof_hash = bytes([seq]) * 32
    msg = receipt_message(bytes(c.program_id), bytes(chain.market), bytes(job), seq, seq * WINDOW,
                          window_end, proof_hash)  # fmt: skip
    item = SettleItem(job, seq, seq * WINDOW, window_end, proof_hash, chain.worker.pubkey(),
                      sign_receipt(chain.worker, msg), approved_seconds=seq * WINDOW)  # fmt: skip
    return str(c.settle(validator, [item]))


def test_settles_pay_the_fee_vault_while_the_treasury_is_closed(chain: Chain) -> None:
    c = chain.client
    m = c.fetch_market(chain.market)
    assert m.fee_vault == pda.fee_vault_pda(chain.market)
    assert c.token_balance(m.fee_vault) == c.fees_to_withdraw(chain.market)

    # The authority's treasury account is closed by its owner (a mistake, or on purpose).
    holder = Keypair()
    closing = tokens.create_ata(c, chain.admin, holder.pubkey(), chain.payment_mint)
    c.set_treasury(chain.admin, chain.market, closing)
    c.send([_close_token_account_ix(closing, holder.pubkey())], [holder])
    assert c.account_info(closing) is None

    # Settlement does not touch the treasury: the treasury share goes to the fee vault.
    validator = chain.validator  # the job's committee of one
    waiting = c.fees_to_withdraw(chain.market)
    job = chain.create_job()
    c.accept_job(chain.worker, job)
    for seq in (1, 2):
        _settle_one_window(chain, validator, job, seq)
    j = c.fetch_job(job)
    assert j.paid_seconds == 2 * WINDOW and j.paid_treasury > 0
    assert c.fees_to_withdraw(chain.market) == waiting + j.paid_treasury
    assert c.fetch_validator(pda.validator_pda(chain.market, validator.pubkey())).settlements == 2

    # withdraw_fees waits for a treasury: the SDK says so before sending; the program refuses.
    with pytest.raises(AccountNotFound, match="set-treasury"):
        c.withdraw_fees(chain.user, chain.market)
    raw = withdraw_fees_ix(c.codec, c.fetch_market(chain.market))
    assert _error(c.send, [raw], [chain.user]) == "AccountNotInitialized"

    # A replacement treasury named with set_treasury receives everything waiting (anyone calls).
    replacement = tokens.create_ata(c, chain.admin, Keypair().pubkey(), chain.payment_mint)
    c.set_treasury(chain.admin, chain.market, replacement)
    total = c.fees_to_withdraw(chain.market)
    assert total == waiting + j.paid_treasury
    sig = c.withdraw_fees(chain.user, chain.market)
    assert c.token_balance(replacement) == total and c.fees_to_withdraw(chain.market) == 0
    assert dict(c.events(sig))["FeesWithdrawn"] == {"market": chain.market, "treasury": replacement,
                                                    "amount": total}  # fmt: skip
    # Anyone, paying for it themselves (a client without a payer: the caller pays the fee).
    own = GpuMarketClient(chain.url)
    try:
        assert _error(own.withdraw_fees, chain.owner, chain.market) == "NothingToWithdrawFees"
    finally:
        own.close()

    # Settles go on; the next withdrawal pays the replacement again.
    _settle_one_window(chain, validator, job, 3)
    later = c.fetch_job(job).paid_treasury - j.paid_treasury
    assert later > 0 and c.fees_to_withdraw(chain.market) == later
    c.withdraw_fees(chain.admin, chain.market)
    assert c.token_balance(replacement) == total + later
    c.finish_job(chain.user, job)
    warp_time(chain.url, c.fetch_job(job).grace_ends_at - c.chain_time() + 1)
    c.close_job(chain.user, job)
