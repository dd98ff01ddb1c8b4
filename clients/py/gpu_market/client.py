"""GpuMarketClient: synchronous reads and writes against any Solana JSON-RPC endpoint.

The client only needs ``url``; it uses the standard RPC methods (getAccountInfo,
getMultipleAccounts, getProgramAccounts, getLatestBlockhash, sendTransaction,
getSignatureStatuses, getTransaction, getMinimumBalanceForRentExemption), so the same code
runs against the local chain and a real cluster. Every write method reads what it needs, checks
what the program would refuse, and builds its instructions with the pure builders of
:mod:`gpu_market.instructions`; encoding, PDAs, the settle layout and error parsing live in
pure modules too (``codec``, ``pda``, ``settle``, ``errors``).

Every write signs with the given signer(s) plus ``payer`` (who pays fees; defaults to the
first signer), sends with preflight, waits for ``commitment`` and returns the signature.
Failures raise ``GpuMarketError`` (program error: ``.code``, ``.name``, ``.message``,
``.logs``), ``ChainError`` (other transaction errors), ``RpcUnavailable`` (transport), or
``TransactionTooLarge`` before anything is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from solana.exceptions import SolanaRpcException
from solana.rpc.api import Client
from solana.rpc.commitment import Commitment
from solana.rpc.core import RPCException, RPCNoResultException
from solana.rpc.types import MemcmpOpts, TxOpts
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import SanitizeError, Transaction, TransactionError, VersionedTransaction

from . import pda, tokens
from .accounts import (
    DEFAULT_MARKET_PARAMS,
    JOB_STATUSES,
    ClosedJobView,
    EquivocationRecordView,
    JobView,
    MarketParams,
    MarketView,
    ProviderView,
    ValidatorView,
    decode_account,
    effective_params,
    encode_optional_endpoint,
    min_deposit,
)
from .admin import MarketAdmin
from .base58 import b58encode
from .codec import Codec, default_codec, plain
from .committee import ValidatorNetwork, check_committee
from .constants import CLOCK_SYSVAR_ID, MAX_SKEW_SECONDS, PACKET_DATA_SIZE, PROGRAM_ID
from .errors import (
    AccountNotFound,
    ChainError,
    ConfirmationTimeout,
    RpcUnavailable,
    SdkError,
    TransactionTooLarge,
    chain_error_from_rpc_error,
    chain_error_from_transaction_err,
    fee_payer_error,
)
from .instructions import (
    accept_job_ix,
    close_job_ix,
    create_job_ix,
    finish_job_ix,
    register_provider_ix,
    request_unstake_ix,
    rotate_worker_key_ix,
    slash_equivocation_ix,
    stake_ix,
    top_up_ix,
    update_provider_ix,
    withdraw_unstaked_ix,
)
from .lifecycle import JobEndings
from .lookup_tables import LookupTables
from .receipt import receipt_digest, receipt_message
from .receipt import verify as verify_signature
from .settle import (
    Attestation,
    SettleAccounts,
    SettleItem,
    ed25519_entries_instruction,
    max_settle_items_per_tx,
    receipt_args,
    settle_instructions,
    transaction_size,
)
from .verdicts import VerdictsAndRatings

if TYPE_CHECKING:
    from .lookup_tables import LookupTable

__all__ = [
    "DEFAULT_MARKET_PARAMS",
    "Attestation",
    "GpuMarketClient",
    "InvalidAccount",
    "SettleItem",
]


_COMMITMENT_RANK = {"processed": 0, "confirmed": 1, "finalized": 2}


def _clock_unix_timestamp(info: tuple[Pubkey, bytes] | None) -> int:
    """``unix_timestamp`` of Clock sysvar account data (slot, epoch_start_timestamp, epoch,
    leader_schedule_epoch, unix_timestamp)."""
    if info is None or len(info[1]) < 40:
        raise SdkError("the node returned no Clock sysvar; is this a Solana JSON-RPC endpoint?")
    return int.from_bytes(info[1][32:40], "little", signed=True)


def _check_attesters(submitter: Pubkey, item: SettleItem, job: JobView) -> None:
    """ValueError where ``settle`` would refuse ``item``'s signers for ``job``."""
    attesters = [a.authority for a in item.attestations]
    for who in (submitter, *attesters):
        if job.member_index(who) is None:
            raise ValueError(f"{who} is not on the committee of job {item.job}")
    if len(set(attesters) | {submitter}) != len(attesters) + 1:
        raise ValueError(f"an attester of job {item.job} appears twice or is the submitter")
    if len(attesters) != job.terms.quorum - 1:
        raise ValueError(
            f"job {item.job} needs {job.terms.quorum - 1} attestation(s) besides the "
            f"submitter's (quorum {job.terms.quorum}), the item carries {len(attesters)}"
        )


class InvalidAccount(SdkError, ValueError):
    """The account exists but is not the gpu_market account type asked for."""


class GpuMarketClient(MarketAdmin, JobEndings, ValidatorNetwork, VerdictsAndRatings):
    """Reads and writes gpu_market state through a Solana JSON-RPC ``url``.

    Market administration (``initialize_market``, ``update_params``, ``set_treasury``,
    ``sweep_vault``, ...) comes from :class:`gpu_market.admin.MarketAdmin`; the job endings
    (``cancel_job``, ``decline_job``, ``expire_job``, ``complete_job``) from
    :class:`gpu_market.lifecycle.JobEndings`; validators, committees and their slashing
    (``register_validator``, ``default_committee``, ``claim_validator_rewards``,
    ``replace_committee_member``, ``slash_downtime``, ...) from
    :class:`gpu_market.committee.ValidatorNetwork`; hardware verdicts, wrong-answer slashes
    and ratings (``attest_hardware``, ``slash_wrong_answer``, ``rate_job``) from
    :class:`gpu_market.verdicts.VerdictsAndRatings`.
    """

    def __init__(
        self,
        url: str,
        payer: Keypair | None = None,
        program_id: Pubkey = PROGRAM_ID,
        commitment: str = "confirmed",
        *,
        idl_path: str | None = None,
        timeout: float = 30.0,
        confirm_timeout: float = 60.0,
        rpc: Client | None = None,
    ) -> None:
        if commitment not in _COMMITMENT_RANK:
            raise ValueError(f"commitment must be one of {sorted(_COMMITMENT_RANK)}")
        self.url = url
        self.payer = payer
        self.program_id = program_id
        self.commitment = commitment
        self.confirm_timeout = confirm_timeout
        self.rpc = rpc or Client(url, commitment=Commitment(commitment), timeout=timeout)
        self.codec: Codec = default_codec(program_id, idl_path)
        self.lookup_tables = LookupTables(self)
        """Address lookup tables and v0 settle transactions that carry several jobs each."""

    def close(self) -> None:
        """Closes the HTTP connection pool (the client is unusable afterwards)."""
        session = getattr(getattr(self.rpc, "_provider", None), "session", None)
        if session is not None:
            session.close()

    # ================================================================== RPC plumbing

    def _call(self, fn, *args, **kwargs):
        """Run one solana-py call, mapping transport failures to RpcUnavailable."""
        try:
            return fn(*args, **kwargs)
        except SolanaRpcException as e:
            cause = e.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause else e.error_msg
            raise RpcUnavailable(
                f"cannot reach the RPC endpoint {self.url} ({detail}); "
                "check --url and that the node is running"
            ) from e
        except RPCException as e:
            raise self._rpc_error(e) from e

    def _rpc_error(self, e: RPCException) -> ChainError:
        raw = e.args[0] if e.args else None
        payload: dict[str, Any]
        if hasattr(raw, "to_json"):
            payload = json.loads(raw.to_json())
        elif isinstance(raw, Mapping):
            payload = dict(raw)
        else:
            payload = {"message": str(raw)}
        return chain_error_from_rpc_error(payload, self.codec.errors, str(self.program_id))

    def _account_infos(self, keys: Sequence[Pubkey]) -> list[tuple[Pubkey, bytes] | None]:
        """``(owner, data)`` per key (None where absent), batched by 100."""
        out: list[tuple[Pubkey, bytes] | None] = []
        for i in range(0, len(keys), 100):
            chunk = list(keys[i : i + 100])
            resp = self._call(self.rpc.get_multiple_accounts, chunk, encoding="base64")
            for acc in resp.value:
                out.append(None if acc is None else (acc.owner, bytes(acc.data)))
        return out

    def account_info(self, key: Pubkey) -> tuple[Pubkey, bytes] | None:
        """``(owner, data)`` of ``key`` or None if it does not exist."""
        return self._account_infos([key])[0]

    def _fetch(self, key: Pubkey, kind: str):
        return self._decode_info(key, self.account_info(key), kind)

    def _decode_info(self, key: Pubkey, info: tuple[Pubkey, bytes] | None, kind: str):
        """The ``kind`` view of ``(owner, data)``, None if absent; InvalidAccount otherwise."""
        if info is None:
            return None
        owner, data = info
        if owner != self.program_id:
            raise InvalidAccount(f"{key} is not a gpu_market account (owner {owner})")
        try:
            view = decode_account(data, key, self.codec)
        except ValueError as e:
            raise InvalidAccount(f"{key}: {e}") from None
        if kind == "Job" and isinstance(view, ClosedJobView):
            return None  # the job was closed: its address holds a tombstone for good
        if type(view).__name__ != f"{kind}View":
            raise InvalidAccount(f"{key} is a {type(view).__name__[:-4]} account, not a {kind}")
        return view

    def _require(self, key: Pubkey, kind: str):
        view = self._fetch(key, kind)
        if view is None:
            raise AccountNotFound(f"{kind} account {key} does not exist (check the address)")
        return view

    # ================================================================== reads

    def fetch_market(self, market: Pubkey) -> MarketView | None:
        """The Market at ``market``, or None if no account exists there."""
        return self._fetch(market, "Market")

    def fetch_provider(self, provider: Pubkey) -> ProviderView | None:
        """The Provider at ``provider`` (the PDA, not the owner), or None."""
        return self._fetch(provider, "Provider")

    def fetch_validator(self, validator: Pubkey) -> ValidatorView | None:
        """The Validator at ``validator`` (the PDA), or None."""
        return self._fetch(validator, "Validator")

    def fetch_job(self, job: Pubkey) -> JobView | None:
        """The Job at ``job``, or None: no job was ever created there, or it was closed (a
        closed job leaves a :class:`~gpu_market.accounts.ClosedJobView` tombstone, so its
        address is never used again; read it with :meth:`fetch_closed_job`)."""
        return self._fetch(job, "Job")

    def fetch_closed_job(self, job: Pubkey) -> ClosedJobView | None:
        """The tombstone ``close_job`` left at ``job``, or None if the job was not closed."""
        return self._fetch(job, "ClosedJob")

    def fetch_jobs(self, jobs: Sequence[Pubkey]) -> list[JobView | None]:
        """The Jobs at ``jobs``, in order (None where no account is or the job was closed),
        100 per RPC call; InvalidAccount when an account there is not a Job."""
        keys = list(jobs)
        return [self._decode_info(k, i, "Job") for k, i in zip(keys, self._account_infos(keys))]

    def fetch_equivocation_record(self, record: Pubkey) -> EquivocationRecordView | None:
        """The EquivocationRecord at ``record`` (``pda.equivocation_pda(job, job.started_at,
        seq)``), or None if that (job incarnation, seq) was never slashed."""
        return self._fetch(record, "EquivocationRecord")

    def list_jobs(
        self,
        provider: Pubkey | None = None,
        user: Pubkey | None = None,
        statuses: Iterable[str] | None = None,
        market: Pubkey | None = None,
    ) -> list[JobView]:
        """Jobs matching every given filter (getProgramAccounts + memcmp), sorted by address."""
        memcmp = {name: bytes(key) for name, key in (("market", market), ("provider", provider),
                                                     ("user", user)) if key is not None}  # fmt: skip
        wanted = None
        if statuses is not None:
            wanted = {s.lower() for s in statuses}
            bad = wanted - set(JOB_STATUSES)
            if bad:
                raise ValueError(f"unknown job status {sorted(bad)}; expected {JOB_STATUSES}")
            if len(wanted) == 1:
                (only,) = wanted
                memcmp["status"] = bytes([self.codec.enum_index("JobStatus", only)])
        jobs = [j for j in self._program_accounts("Job", memcmp) if wanted is None or j.status in wanted]
        return sorted(jobs, key=lambda j: bytes(j.address))

    def _program_accounts(self, kind: str, memcmp: Mapping[str, bytes]) -> list[Any]:
        """Views of every ``kind`` account whose fields named in ``memcmp`` hold those bytes
        (getProgramAccounts with dataSize, discriminator and memcmp filters)."""
        codec = self.codec
        disc = bytes(codec.coder.accounts.acc_name_to_discriminator[kind])
        filters: list[Any] = [codec.account_size(kind), MemcmpOpts(offset=0, bytes=b58encode(disc))]
        for name, raw in memcmp.items():
            filters.append(MemcmpOpts(offset=codec.field_offset(kind, name), bytes=b58encode(raw)))
        resp = self._call(
            self.rpc.get_program_accounts, self.program_id, encoding="base64", filters=filters
        )
        views = [decode_account(bytes(k.account.data), k.pubkey, codec) for k in resp.value]
        return [v for v in views if type(v).__name__ == f"{kind}View"]

    def token_balance(self, account: Pubkey) -> int:
        """Token amount (base units) of a token account; AccountNotFound if it does not exist."""
        info = self.account_info(account)
        if info is None:
            raise AccountNotFound(f"token account {account} does not exist")
        return tokens.parse_token_account(info[1]).amount

    def chain_time(self) -> int:
        """The chain's ``unix_timestamp`` (Clock sysvar): the program's notion of now, which
        decides every deadline (grace, expiry, parameter changes)."""
        return _clock_unix_timestamp(self.account_info(CLOCK_SYSVAR_ID))

    def min_deposit(self, market: Pubkey, provider: Pubkey, gpu_count: int) -> int:
        """The smallest deposit ``create_job`` accepts now for ``gpu_count`` GPUs of
        ``provider``: one window at the job's rate, with the parameters in force at chain time."""
        _, p, params = self._pricing(market, provider)
        return min_deposit(params, p.price_per_gpu_second, gpu_count)

    def _pricing(self, market: Pubkey, provider: Pubkey) -> tuple[MarketView, ProviderView, MarketParams]:
        """Market, provider and the params in force at chain time, in one RPC round trip."""
        m_info, p_info, clock = self._account_infos([market, provider, CLOCK_SYSVAR_ID])
        m = self._decode_info(market, m_info, "Market")
        p = self._decode_info(provider, p_info, "Provider")
        if m is None:
            raise AccountNotFound(f"Market account {market} does not exist (check the address)")
        if p is None:
            raise AccountNotFound(f"Provider account {provider} does not exist (check the address)")
        return m, p, effective_params(m, _clock_unix_timestamp(clock))

    def mint_supply(self, mint: Pubkey) -> int:
        """Current supply (base units) of ``mint``."""
        return self._mint(mint)[0]

    def mint_decimals(self, mint: Pubkey) -> int:
        """Decimals of ``mint``."""
        return self._mint(mint)[1]

    def _mint(self, mint: Pubkey) -> tuple[int, int]:
        info = self.account_info(mint)
        if info is None:
            raise AccountNotFound(f"mint {mint} does not exist")
        try:
            return tokens.parse_mint(info[1])
        except ValueError:
            raise InvalidAccount(f"{mint} is not a token mint") from None

    def transaction_logs(self, signature: Signature | str) -> list[str]:
        """Log lines of a confirmed transaction (empty if the node has none)."""
        sig = Signature.from_string(signature) if isinstance(signature, str) else signature
        resp = self._call(
            self.rpc.get_transaction,
            sig,
            encoding="json",
            commitment=Commitment(self.commitment),
            max_supported_transaction_version=0,
        )
        if resp.value is None or resp.value.transaction.meta is None:
            return []
        return list(resp.value.transaction.meta.log_messages or [])

    def events(self, signature: Signature | str) -> list[tuple[str, dict[str, Any]]]:
        """Events gpu_market emitted in a transaction, as ``(name, fields)`` in order.

        Fields are plain Python: ints, bools, Pubkey, ``bytes`` for ``[u8; N]``, dicts for
        nested structs.
        """
        return [(name, plain(data)) for name, data in self.codec.parse_events(self.transaction_logs(signature))]

    # ================================================================== sending

    def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature:
        """Sign (payer + ``signers``), send with preflight, wait for the commitment.

        Raises TransactionTooLarge before sending if the transaction exceeds 1232 bytes.
        """
        payer = self.payer or (signers[0] if signers else None)
        if payer is None:
            raise ValueError("no fee payer: pass payer= to GpuMarketClient or a signer")
        unique: dict[Pubkey, Keypair] = {payer.pubkey(): payer}
        for s in signers:
            unique.setdefault(s.pubkey(), s)
        size = transaction_size(instructions, payer.pubkey())
        if size > PACKET_DATA_SIZE:
            raise TransactionTooLarge(
                f"transaction is {size} bytes, the limit is {PACKET_DATA_SIZE}; send fewer items"
            )
        blockhash = self._latest_blockhash()
        msg = Message.new_with_blockhash(list(instructions), payer.pubkey(), blockhash)
        needed = set(msg.account_keys[: msg.header.num_required_signatures])
        return self._send_raw(Transaction([k for p, k in unique.items() if p in needed], msg, blockhash))

    def send_presigned(self, tx: Transaction) -> Signature:
        """Send a transaction whose signatures were collected elsewhere (e.g. a
        ``build_slash_downtime_tx`` signed by committee members over HTTP, joined with
        :func:`gpu_market.committee.assemble_transaction`) and wait for the commitment.
        ValueError, before sending, if a signature is missing or invalid; TransactionTooLarge
        over 1232 bytes. Its blockhash must still be recent (about a minute)."""
        try:
            tx.verify()
        except (TransactionError, SanitizeError) as e:
            raise ValueError(f"the transaction is not fully signed: {e}") from None
        size = len(bytes(tx))
        if size > PACKET_DATA_SIZE:
            raise TransactionTooLarge(f"transaction is {size} bytes, the limit is {PACKET_DATA_SIZE}")
        return self._send_raw(tx)

    def _latest_blockhash(self):
        return self._call(self.rpc.get_latest_blockhash).value.blockhash

    def _send_raw(self, tx: Transaction | VersionedTransaction) -> Signature:
        try:
            resp = self._call(
                self.rpc.send_raw_transaction,
                bytes(tx),
                TxOpts(skip_confirmation=True, preflight_commitment=Commitment(self.commitment)),
            )
        except RPCNoResultException as e:
            raise ChainError(f"the node did not accept the transaction: {e}") from e
        except ChainError as e:  # the fee payer is account 0
            raise fee_payer_error(e, tx.message.account_keys[0]) from e.__cause__
        sig = resp.value
        self._confirm(sig)
        return sig

    def _confirm(self, sig: Signature) -> None:
        deadline = time.monotonic() + self.confirm_timeout
        want = _COMMITMENT_RANK[self.commitment]
        delay = 0.05
        while True:
            resp = self._call(self.rpc.get_signature_statuses, [sig])
            raw = json.loads(resp.to_json())["result"]["value"][0]
            if raw is not None:
                if raw.get("err") is not None:
                    logs = []
                    try:
                        logs = self.transaction_logs(sig)
                    except SdkError:
                        pass
                    raise chain_error_from_transaction_err(
                        raw["err"], logs, self.codec.errors, str(self.program_id)
                    )
                status = raw.get("confirmationStatus")
                if status is not None and _COMMITMENT_RANK.get(status, -1) >= want:
                    return
            if time.monotonic() > deadline:
                raise ConfirmationTimeout(
                    f"transaction {sig} not {self.commitment} after {self.confirm_timeout:.0f} s; "
                    "check it with `solana confirm` before retrying"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def airdrop(self, to: Pubkey, lamports: int) -> Signature:
        """Request ``lamports`` SOL lamports for ``to`` (localnet/devnet faucets) and wait for
        the commitment."""
        resp = self._call(self.rpc.request_airdrop, to, lamports)
        self._confirm(resp.value)
        return resp.value

    # ================================================================== writes

    def register_provider(
        self,
        owner: Keypair,
        worker_key: Pubkey,
        spec: Mapping[str, Any],
        price_per_gpu_second: int,
        market: Pubkey,
        worker_key_expires_at: int = 0,
        endpoint: str = "",
    ) -> Signature:
        """Register ``owner`` as a provider of ``market``.

        ``spec``: ``gpu_model`` (str, <= 32 UTF-8 bytes), ``gpu_count``, ``vram_mib``,
        ``region`` (str, <= 16 bytes). ``endpoint``: the worker's public API URL, where users
        deliver workloads and read logs ("" = none: the provider runs no workloads). The same
        transaction creates the owner's payment-mint ATA if missing (settlements pay there).
        """
        encode_optional_endpoint(endpoint)  # ValueError before anything is sent
        m = self._require(market, "Market")
        ix = register_provider_ix(self.codec, owner.pubkey(), market, worker_key, spec,
                                  price_per_gpu_second, worker_key_expires_at, endpoint)  # fmt: skip
        ata_ix = tokens.create_ata_idempotent_ix(owner.pubkey(), owner.pubkey(), m.payment_mint)
        return self.send([ata_ix, ix], [owner])

    def stake(self, owner: Keypair, market: Pubkey, amount: int) -> Signature:
        """Move ``amount`` stake tokens from the owner's stake-mint ATA into the stake vault."""
        m = self._require(market, "Market")
        ix = stake_ix(self.codec, owner.pubkey(), m, amount)
        return self.send([ix], [owner])

    def create_job(
        self,
        user: Keypair,
        market: Pubkey,
        provider: Pubkey,
        job_id: int,
        gpu_count: int,
        deposit: int,
        *,
        committee: Sequence[Pubkey],
        quorum: int,
        max_price_per_gpu_second: int | None = None,
        workload_hash: bytes | None = None,
    ) -> tuple[Signature, Pubkey]:
        """Open job ``job_id`` on ``provider`` (the Provider PDA), escrowing ``deposit`` from
        the user's payment-mint ATA. Returns ``(signature, job address)``.

        ``committee``: 1..5 distinct authorities of Active validators of the market (see
        :meth:`default_committee`), none of them the provider's owner or worker key; their
        Validator PDAs go as read-only remaining accounts, in order. ``quorum``: how many of
        them must agree on each settlement, ``min_quorum <= quorum <= min(3, len(committee))``.
        The job's terms (rate, fee, window, grace, ...) are fixed now from the parameters in
        force at chain time (:func:`gpu_market.accounts.effective_params`) and the provider's
        price. The transaction carries the parameters read here (``expected_params``): if the
        ones in force when it lands differ (an announced change came into force meanwhile), the
        program refuses the job with ``MarketParamsChanged`` and nothing moves; read the market
        again. ``max_price_per_gpu_second`` (base units) is the highest price the user accepts:
        the program refuses the job with ``PriceAboveLimit`` if the provider's price is above
        it when the transaction lands (so a provider cannot front-run the user with a price
        rise); by default it is the price read here, before the transaction is built.
        ValueError, before anything is sent, if ``deposit`` is below one window at the price
        read (:meth:`min_deposit`), that price is already above ``max_price_per_gpu_second``,
        or the committee or quorum would be refused. ``workload_hash``: sha256 of the workload
        spec the provider's worker must run (``gpu_market.workload.spec_hash``), fixed on chain
        for the job's life; None (all zeros) for a job without a workload.
        """
        workload_hash = bytes(32) if workload_hash is None else bytes(workload_hash)
        if len(workload_hash) != 32:
            raise ValueError(f"workload_hash must be 32 bytes, got {len(workload_hash)}")
        committee = list(committee)
        pdas = [pda.validator_pda(market, a, self.program_id) for a in committee]
        m_info, p_info, clock, *v_infos = self._account_infos([market, provider, CLOCK_SYSVAR_ID, *pdas])
        m = self._decode_info(market, m_info, "Market")
        p = self._decode_info(provider, p_info, "Provider")
        if m is None:
            raise AccountNotFound(f"Market account {market} does not exist (check the address)")
        if p is None:
            raise AccountNotFound(f"Provider account {provider} does not exist (check the address)")
        params = effective_params(m, _clock_unix_timestamp(clock))
        check_committee(
            committee, int(quorum), params.min_quorum,
            [self._decode_info(k, info, "Validator") for k, info in zip(pdas, v_infos)], market,
            {p.owner: "the provider's owner", p.worker_key: "the provider's worker key"},
        )  # fmt: skip
        price = p.price_per_gpu_second
        max_price = price if max_price_per_gpu_second is None else int(max_price_per_gpu_second)
        if not 0 <= max_price < 2**64:
            raise ValueError(f"max_price_per_gpu_second must be a u64, got {max_price}")
        if price > max_price:
            raise ValueError(
                f"the provider's price is {price} base units per GPU-second, above your "
                f"max_price_per_gpu_second {max_price} (the program's PriceAboveLimit); nothing "
                "was sent"
            )
        need = min_deposit(params, price, gpu_count)
        if deposit < need:
            raise ValueError(
                f"deposit {deposit} is below one window at the job's rate: at least {need} base "
                f"units ({gpu_count} GPU(s) x {p.price_per_gpu_second} per GPU-second x "
                f"{params.window_seconds} s)"
            )
        job = pda.job_pda(market, user.pubkey(), job_id, self.program_id)
        ix = create_job_ix(
            self.codec, user.pubkey(), m, provider, job_id, gpu_count, deposit, committee=committee,
            quorum=quorum, max_price_per_gpu_second=max_price, workload_hash=workload_hash,
            expected_params=asdict(params),
        )
        return self.send([ix], [user]), job

    def accept_job(self, signer: Keypair, job: Pubkey) -> Signature:
        """Start an Open job; ``signer`` is the provider's worker key or owner."""
        j = self._require(job, "Job")
        ix = accept_job_ix(self.codec, signer.pubkey(), j.provider, job)
        return self.send([ix], [signer])

    def finish_job(self, signer: Keypair, job: Pubkey) -> Signature:
        """Stop billing a Running job; ``signer`` is the job's user, the provider's owner or
        its current worker key (a worker ending a ``finish_on_exit`` workload)."""
        j = self._require(job, "Job")
        ix = finish_job_ix(self.codec, signer.pubkey(), j.provider, job)
        return self.send([ix], [signer])

    def close_job(self, user: Keypair, job: Pubkey) -> Signature:
        """Refund what is left in escrow (donations included) to the user's payment-mint ATA
        and close the job and escrow (user only). Allowed once no settlement is possible:
        Completed, Cancelled, Declined or Failed at once; Finishing only strictly after
        ``JobView.grace_ends_at`` (``ended_at + terms.grace_seconds``; it completes the job
        too); else ``GracePeriodActive`` or ``InvalidJobStatus``."""
        j = self._require(job, "Job")
        m = self._require(j.market, "Market")
        ix = close_job_ix(self.codec, user.pubkey(), j, m)
        return self.send([ix], [user])

    # ================================================================== providers

    def update_provider(
        self,
        owner: Keypair,
        provider: Pubkey,
        price_per_gpu_second: int | None = None,
        spec: Mapping[str, Any] | None = None,
        accepting_jobs: bool | None = None,
        endpoint: str | None = None,
    ) -> Signature:
        """Change price, spec, availability or worker endpoint of ``provider`` (the PDA;
        owner only).

        None leaves a field unchanged. ``spec`` may be partial: missing keys keep the
        provider's current values (one account read). ``accepting_jobs=False`` pauses the
        provider (no new jobs), True makes it Active again. ``endpoint=""`` removes the
        endpoint. ValueError if nothing is given.
        """
        if (price_per_gpu_second is None and spec is None and accepting_jobs is None
                and endpoint is None):
            raise ValueError("update_provider needs price_per_gpu_second, spec, accepting_jobs "
                             "or endpoint")
        if endpoint is not None:
            encode_optional_endpoint(endpoint)
        full = None
        if spec is not None:
            unknown = set(spec) - {"gpu_model", "gpu_count", "vram_mib", "region"}
            if unknown:
                raise ValueError(f"unknown spec keys {sorted(unknown)}")
            current = self._require(provider, "Provider").spec
            full = {**asdict(current), **dict(spec)}
        ix = update_provider_ix(self.codec, owner.pubkey(), provider, price_per_gpu_second, full,
                                accepting_jobs, endpoint)  # fmt: skip
        return self.send([ix], [owner])

    def rotate_worker_key(
        self, owner: Keypair, market: Pubkey, new_worker_key: Pubkey, expires_at: int = 0
    ) -> Signature:
        """Replace the owner's worker key (``expires_at`` unix time, 0 = never). The replaced
        key joins ``ProviderView.retired_keys``: it signs only windows that ended by now, and its
        receipts still settle for ``window_seconds * max_missed_windows`` of each job's terms.
        Four retired keys are kept; a rotation that would drop one retired less than
        ``unbonding_seconds`` ago fails with ``RotationTooSoon``."""
        ix = rotate_worker_key_ix(self.codec, owner.pubkey(), market, new_worker_key, expires_at)
        return self.send([ix], [owner])

    def request_unstake(self, owner: Keypair, market: Pubkey, amount: int) -> Signature:
        """Start unbonding ``amount`` of the owner's stake (released after
        ``unbonding_seconds``; the release time restarts for the whole unbonding amount)."""
        ix = request_unstake_ix(self.codec, owner.pubkey(), market, amount)
        return self.send([ix], [owner])

    def withdraw_unstaked(self, owner: Keypair, market: Pubkey) -> Signature:
        """Pay the released unbonding stake to the owner's stake-mint ATA (created in the
        same transaction if missing)."""
        m = self._require(market, "Market")
        ix = withdraw_unstaked_ix(self.codec, owner.pubkey(), m)
        ata_ix = tokens.create_ata_idempotent_ix(owner.pubkey(), owner.pubkey(), m.stake_mint)
        return self.send([ata_ix, ix], [owner])

    # ================================================================== job lifecycle

    def top_up(self, user: Keypair, job: Pubkey, amount: int) -> Signature:
        """Add ``amount`` to an Open or Running job's escrow from the user's payment-mint ATA."""
        j = self._require(job, "Job")
        m = self._require(j.market, "Market")
        ix = top_up_ix(self.codec, user.pubkey(), j, m, amount)
        return self.send([ix], [user])

    # ================================================================== slashing

    def _slash_views(self, job: Pubkey) -> tuple[JobView, ProviderView, MarketView]:
        """The job a provider slash is about, its provider and its market (AccountNotFound
        where one does not exist)."""
        j = self._require(job, "Job")
        p, m = self._views([j.provider], "Provider")[0], self._require(j.market, "Market")
        return j, p, m

    def slash_equivocation_instructions(
        self,
        reporter: Pubkey,
        job: Pubkey,
        first: Any,
        first_signature: bytes,
        second: Any,
        second_signature: bytes,
        reporter_stake_account: Pubkey | None = None,
    ) -> list[Instruction]:
        """``[Ed25519(first, second), slash_equivocation]``: one Ed25519 instruction with both
        signatures, each with its receipt message (reads job, provider and market). Each
        signature must verify, over its receipt message, under a key that signs that window
        (``ProviderView.key_signs_window``: the current key unexpired, or a retired key for a
        window that ended by its retirement; found by verifying locally); ValueError
        otherwise, or when the receipts have different seqs or are identical, the job is Open
        or never started (``JobNeverStarted``), a receipt ends at or before the job's
        ``started_at``, or it belongs to the incident the provider was already slashed for at
        this job's rate or a higher one (evidence under a higher rate tops the slash up). The
        reporter reward is paid only when ``reporter`` is the job's user or a committee member
        and neither the provider's owner nor a key that signed the evidence; anyone else's
        report burns the whole slash."""
        r1, r2 = receipt_args(first), receipt_args(second)
        if r1["seq"] != r2["seq"]:
            raise ValueError(f"receipts have different seqs ({r1['seq']} and {r2['seq']})")
        if r1 == r2:
            raise ValueError("the two receipts are identical: that is not equivocation")
        j, p, m = self._slash_views(job)
        if j.status == "open":
            raise ValueError(f"job {job} is Open: it has no receipts to equivocate on")
        if j.started_at == 0:
            raise ValueError(f"job {job} never started: it cannot be the subject of a slash "
                             "(the program's JobNeverStarted)")  # fmt: skip
        for label, r in (("first", r1), ("second", r2)):
            if r["window_end"] <= j.started_at:
                raise ValueError(
                    f"the {label} receipt ends at {r['window_end']}, not after this job started "
                    f"({j.started_at}): it is not evidence about this job"
                )
        if p.last_equivocation_slash_at != 0:
            incident_over = p.last_equivocation_slash_at + MAX_SKEW_SECONDS
            rate = j.terms.equivocation_slash_bps
            if (min(r1["window_end"], r2["window_end"]) <= incident_over
                    and rate <= p.last_equivocation_slash_bps):  # fmt: skip
                raise ValueError(
                    f"the provider was slashed for equivocation at {p.last_equivocation_slash_at} "
                    f"at {p.last_equivocation_slash_bps} bps; receipts for windows ending by "
                    f"{incident_over} belong to that incident and count only under a higher "
                    f"rate than this job's {rate} bps (the program's EquivocationAlreadyPunished)"
                )
        candidates = [p.worker_key, *(r.key for r in p.retired_worker_keys)]
        entries = []
        for label, r, sig in (("first", r1, first_signature), ("second", r2, second_signature)):
            msg = receipt_digest(receipt_message(
                bytes(self.program_id), bytes(j.market), bytes(job), r["seq"],
                r["cumulative_seconds"], r["window_end"], bytes(r["proof_hash"]),
            ))  # fmt: skip
            signer = next((k for k in candidates if verify_signature(bytes(k), bytes(sig), msg)), None)
            if signer is None:
                raise ValueError(
                    f"{label}_signature is not a signature of that receipt by the provider's "
                    "current worker key or one of its retired keys"
                )
            if not p.key_signs_window(signer, r["window_end"]):
                raise ValueError(
                    f"the {label} receipt's key {signer} does not sign a window ending at "
                    f"{r['window_end']} (expired, or retired before that window ended): "
                    "not evidence against this provider"
                )
            entries.append((bytes(signer), bytes(sig), msg))
        return [ed25519_entries_instruction(entries),
                slash_equivocation_ix(self.codec, reporter, j, m, r1, r2, reporter_stake_account)]

    def slash_equivocation(
        self,
        reporter: Keypair,
        job: Pubkey,
        first: Any,
        first_signature: bytes,
        second: Any,
        second_signature: bytes,
        reporter_stake_account: Pubkey | None = None,
    ) -> Signature:
        """Slash the provider of ``job`` for signing two different receipts with one seq.

        ``first``/``second``: receipts (objects or mappings with ``seq``,
        ``cumulative_seconds``, ``window_end``, ``proof_hash``, e.g. a SettleItem) and their
        worker-key signatures. The reward goes to ``reporter_stake_account`` (default: the
        reporter's stake-mint ATA, which must exist). The job fails; its user's ``close_job``
        refunds the escrow. One transaction ``[Ed25519(first, second), slash_equivocation]``;
        TransactionTooLarge (nothing sent) if it exceeds 1232 bytes.
        The record PDA is ``pda.equivocation_pda(job, job.started_at, seq)``; a repeat for the
        same (job incarnation, seq) fails with the System program's ``AccountAlreadyInUse``.
        """
        ixs = self.slash_equivocation_instructions(
            reporter.pubkey(), job, first, first_signature, second, second_signature,
            reporter_stake_account,
        )  # fmt: skip
        payer = self.payer.pubkey() if self.payer is not None else reporter.pubkey()
        size = transaction_size(ixs, payer)
        if size > PACKET_DATA_SIZE:
            raise TransactionTooLarge(
                f"the slash_equivocation transaction is {size} bytes, over the "
                f"{PACKET_DATA_SIZE}-byte packet limit (two Ed25519 signatures over a "
                "32-byte receipt digest each plus 16 accounts); nothing was sent"
            )
        return self.send(ixs, [reporter])

    # ================================================================== settle

    def settle_instructions(
        self, validator_authority: Pubkey, items: Sequence[SettleItem]
    ) -> list[Instruction]:
        """The instructions of one settle transaction for ``items`` (reads jobs, providers
        and markets from chain; builds nothing it cannot resolve). ValueError, before anything
        is built, when ``validator_authority`` or an attester is not on the job's committee,
        an attester appears twice or is the submitter, or an item does not carry exactly
        ``terms.quorum - 1`` attestations (the program's NotCommitteeMember,
        DuplicateValidator, QuorumNotMet)."""
        jobs = self._views([i.job for i in items], "Job")
        providers = self._views(list({j.provider: None for j in jobs}), "Provider")
        by_provider = {p.address: p for p in providers}
        markets = self._views(list({j.market: None for j in jobs}), "Market")
        by_market = {m.address: m for m in markets}
        ixs: list[Instruction] = []
        for item, job in zip(items, jobs):
            _check_attesters(validator_authority, item, job)
            market = by_market[job.market]
            provider = by_provider[job.provider]
            accounts = SettleAccounts(
                market=job.market,
                validator=pda.validator_pda(job.market, validator_authority, self.program_id),
                provider=job.provider,
                escrow=pda.escrow_pda(item.job, self.program_id),
                provider_payment_account=tokens.ata(provider.owner, market.payment_mint),
                fee_vault=market.fee_vault,
                payment_mint=market.payment_mint,
                extra_validators=tuple(
                    pda.validator_pda(job.market, a.authority, self.program_id)
                    for a in item.attestations
                ),
            )
            ixs.extend(settle_instructions(self.codec, validator_authority, item, accounts))
        return ixs

    def _views(self, keys: list[Pubkey], kind: str) -> list[Any]:
        infos = self._account_infos(keys)
        out = []
        for key, info in zip(keys, infos):
            if info is None:
                raise AccountNotFound(f"{kind} account {key} does not exist (closed?)")
            if info[0] != self.program_id:
                raise InvalidAccount(f"{key} is not a gpu_market account")
            view = decode_account(info[1], key, self.codec)
            if type(view).__name__ != f"{kind}View":
                raise InvalidAccount(f"{key} is not a {kind} account")
            out.append(view)
        return out

    def settle(self, validator_authority: Keypair, items: Sequence[SettleItem]) -> Signature:
        """Settle ``items`` in one transaction: per item ``[Ed25519(worker, attesters...),
        settle]``, in order.

        Raises TransactionTooLarge (nothing sent) if they do not fit; see
        :meth:`max_settle_items_per_tx`.
        """
        if not items:
            raise ValueError("settle needs at least one SettleItem")
        ixs = self.settle_instructions(validator_authority.pubkey(), items)
        return self.send(ixs, [validator_authority])

    def settle_v0(
        self, validator_authority: Keypair, items: Sequence[SettleItem], tables: Sequence[LookupTable]
    ) -> Signature:
        """Settle ``items`` (of distinct jobs) in one v0 transaction whose accounts are loaded
        from ``tables`` where they hold them (``lookup_tables.LookupTables.settle``); the same
        checks and errors as :meth:`settle`."""
        if not items:
            raise ValueError("settle needs at least one SettleItem")
        return self.lookup_tables.settle(validator_authority, items, tables)

    def max_settle_items_per_tx(self, quorum: int = 1) -> int:
        """How many SettleItems of one market for jobs of this ``quorum`` always fit in one
        legacy transaction.

        Each item is one Ed25519 instruction (one 40-byte attestation-message copy, 110 bytes
        per signature) plus ``settle`` with ``quorum - 1`` writable remaining accounts (the
        validator README's *Settlement cost* has the figures).
        """
        return max_settle_items_per_tx(self.codec, quorum)
