"""The validator network: typed calls mixed into :class:`GpuMarketClient`.

A job names a committee of 1..5 Active validators (their authorities) and a quorum ``q``
(``min_quorum <= q <= min(3, committee size)``) at ``create_job``. Every settlement is submitted
by a member and carries ``q - 1`` other members' attestations; ``validator_reward_bps`` of the
fee is credited to the ``q`` attesting members, who claim it with ``claim_validator_rewards``.

==========================  ==============================  =================================
call                        who                             what
==========================  ==============================  =================================
register_validator          a validator authority           bond + endpoint URL
update_validator            the validator's authority       new endpoint URL
claim_validator_rewards     the validator's authority       rewards to its payment-mint ATA
request_validator_exit      the validator's authority       leave; the bond unbonds
withdraw_validator_bond     the validator's authority       released bond to its stake ATA
replace_committee_member    the job's user                  swap a member that is not Active
slash_downtime              ``q`` committee members         the provider missed windows
slash_validator_equivocation  anyone                        two attestations, one (job, seq)
==========================  ==============================  =================================

``slash_downtime`` needs ``q`` signatures in one transaction. A leader builds the unsigned
transaction (:meth:`ValidatorNetwork.build_slash_downtime_tx`), each other member checks the
message (:func:`decode_slash_downtime_message`) and signs its bytes, and the leader joins the
signatures (:func:`assemble_transaction`) and sends it with ``client.send_presigned(tx)``.

The module-level functions are pure; the instructions are built by the pure builders of
:mod:`gpu_market.instructions` (``validator``, ``job``, ``slash``). This module does not import
``gpu_market.client`` (the client inherits from :class:`ValidatorNetwork`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from . import pda, tokens
from .accounts import JobView, MarketView, ValidatorView, encode_endpoint
from .codec import Codec
from .constants import MAX_COMMITTEE, MAX_QUORUM, PACKET_DATA_SIZE
from .errors import TransactionTooLarge
from .instructions import (
    claim_validator_rewards_ix,
    register_validator_ix,
    replace_committee_member_ix,
    request_validator_exit_ix,
    slash_downtime_ix,
    slash_validator_equivocation_ix,
    update_validator_ix,
    withdraw_validator_bond_ix,
)
from .receipt import attestation_message, receipt_message
from .receipt import verify as verify_signature
from .settle import ed25519_entries_instruction, receipt_args, transaction_size

__all__ = [
    "SlashDowntimeRequest",
    "ValidatorNetwork",
    "assemble_transaction",
    "check_committee",
    "decode_slash_downtime_message",
    "default_quorum",
    "endpoint_healthy",
]


# ----------------------------------------------------------------------------- pure helpers


def default_quorum(committee_size: int, min_quorum: int = 1) -> int:
    """The quorum the CLI proposes: a majority of the committee, at least the market's
    ``min_quorum``, at most ``min(3, committee_size)``. ValueError when no quorum is valid
    (``min_quorum`` above the committee size)."""
    if not 1 <= committee_size <= MAX_COMMITTEE:
        raise ValueError(f"a committee has 1..{MAX_COMMITTEE} members, got {committee_size}")
    top = min(MAX_QUORUM, committee_size)
    if min_quorum > top:
        raise ValueError(
            f"the market's min_quorum is {min_quorum}: a committee of {committee_size} cannot "
            f"reach it; name at least {min_quorum} validators"
        )
    return min(top, max(min_quorum, committee_size // 2 + 1))


def check_committee(
    committee: Sequence[Pubkey],
    quorum: int,
    min_quorum: int,
    validators: Sequence[ValidatorView | None],
    market: Pubkey,
    excluded: Mapping[Pubkey, str] | None = None,
) -> None:
    """ValueError, saying what to change, where ``create_job`` would fail: ``committee`` must be
    1..5 distinct authorities whose Validator accounts (``validators``, same order, None where
    absent) are Active validators of ``market``, none of them in ``excluded`` (key -> why, e.g.
    the provider's owner and worker key); ``min_quorum <= quorum <= min(3, len(committee))``."""
    n = len(committee)
    if not 1 <= n <= MAX_COMMITTEE:
        raise ValueError(f"a committee names 1..{MAX_COMMITTEE} validators, got {n}")
    if len(set(committee)) != n:
        raise ValueError("the committee names a validator twice; name distinct validators")
    top = min(MAX_QUORUM, n)
    if not min_quorum <= quorum <= top:
        raise ValueError(
            f"quorum {quorum} is out of range for a committee of {n}: between the market's "
            f"min_quorum {min_quorum} and {top} (InvalidJobQuorum)"
        )
    for member, view in zip(committee, validators):
        if view is None:
            raise ValueError(f"{member} is not a validator of market {market} (no Validator account)")
        if view.market != market:
            raise ValueError(f"{member} is a validator of another market ({view.market})")
        if view.status != "active":
            raise ValueError(f"validator {member} is {view.status}, not active: choose another")
        why = (excluded or {}).get(member)
        if why:
            raise ValueError(f"{member} is {why}: it cannot be on the job's committee")


def endpoint_healthy(endpoint: str, timeout: float = 2.0, http: Any = None) -> bool:
    """Whether ``GET {endpoint}/health`` answers 200 within ``timeout`` seconds (``http``: an
    ``httpx.Client`` to use, e.g. with a mock transport). Never raises."""
    import httpx

    if not endpoint:
        return False
    url = endpoint.rstrip("/") + "/health"
    try:
        if http is not None:
            return http.get(url, timeout=timeout).status_code == 200
        return httpx.get(url, timeout=timeout).status_code == 200
    except (httpx.HTTPError, httpx.InvalidURL, ValueError):
        return False


def assemble_transaction(message: Message, signatures: Mapping[Pubkey, Signature | bytes]) -> Transaction:
    """The transaction of ``message`` with one signature per required signer, taken from
    ``signatures`` (signer -> signature over ``bytes(message)``). ValueError naming the signer
    whose signature is missing or does not verify."""
    signers = list(message.account_keys[: message.header.num_required_signatures])
    payload = bytes(message)
    ordered = []
    for key in signers:
        raw = signatures.get(key)
        if raw is None:
            raise ValueError(f"no signature from {key}, a required signer of this transaction")
        sig = raw if isinstance(raw, Signature) else Signature.from_bytes(bytes(raw))
        if not sig.verify(key, payload):
            raise ValueError(f"the signature from {key} does not verify over this transaction message")
        ordered.append(sig)
    return Transaction.populate(message, ordered)


@dataclass(frozen=True)
class SlashDowntimeRequest:
    """What a ``slash_downtime`` transaction message asks its signers to attest."""

    job: Pubkey
    market: Pubkey
    provider: Pubkey
    submitter: Pubkey
    others: list[Pubkey]
    last_proof_window_end: int
    reporter_stake_account: Pubkey
    fee_payer: Pubkey


def decode_slash_downtime_message(codec: Codec, message: bytes | Message) -> SlashDowntimeRequest:
    """Decode a leader's ``slash_downtime`` transaction message (its bytes, as a member receives
    them to sign). ValueError unless it holds exactly one instruction, a ``slash_downtime`` of
    this program whose remaining accounts are (Validator PDA, its authority as signer) pairs,
    and every signer of the transaction is the submitter or one of those authorities (so a
    member's signature can only ever authorise this slash)."""
    try:
        msg = message if isinstance(message, Message) else Message.from_bytes(bytes(message))
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a transaction message: {e}") from None
    if len(msg.instructions) != 1:
        raise ValueError(f"expected one instruction, the message has {len(msg.instructions)}")
    cix = msg.instructions[0]
    keys = msg.account_keys
    if keys[cix.program_id_index] != codec.program_id:
        raise ValueError(f"the instruction calls {keys[cix.program_id_index]}, not gpu_market")
    data = bytes(cix.data)
    from .idl import instruction_discriminator

    if data[:8] != instruction_discriminator("slash_downtime") or len(data) != 16:
        raise ValueError("the instruction is not a slash_downtime")
    last_proof_window_end = int.from_bytes(data[8:16], "little", signed=True)
    accounts = [keys[i] for i in bytes(cix.accounts)]
    names = codec.instruction_accounts("slash_downtime")
    rest = accounts[len(names) :]
    if len(accounts) < len(names) or len(rest) % 2:
        raise ValueError("slash_downtime accounts are not the fixed list plus (validator, authority) pairs")
    fixed = dict(zip(names, accounts))
    market = fixed["targets.market"]
    submitter = fixed["validator_authority"]
    if fixed["validator"] != pda.validator_pda(market, submitter, codec.program_id):
        raise ValueError("the submitter's Validator account is not its PDA")
    others = []
    for validator, authority in zip(rest[::2], rest[1::2]):
        if validator != pda.validator_pda(market, authority, codec.program_id):
            raise ValueError(f"{validator} is not the Validator PDA of {authority}")
        others.append(authority)
    signers = set(keys[: msg.header.num_required_signatures])
    if not signers <= {submitter, *others}:
        raise ValueError("the transaction needs signers other than the attesting members")
    return SlashDowntimeRequest(
        job=fixed["targets.job"], market=market, provider=fixed["targets.provider"],
        submitter=submitter, others=others, last_proof_window_end=last_proof_window_end,
        reporter_stake_account=fixed["targets.reporter_stake_account"], fee_payer=keys[0],
    )  # fmt: skip


# ----------------------------------------------------------------------------- client calls


class ValidatorNetwork:
    """Validator and committee calls of :class:`gpu_market.client.GpuMarketClient`."""

    codec: Codec
    program_id: Pubkey
    payer: Keypair | None

    if TYPE_CHECKING:  # provided by GpuMarketClient

        def _require(self, key: Pubkey, kind: str) -> Any: ...

        def _decode_info(self, key: Pubkey, info: tuple[Pubkey, bytes] | None, kind: str) -> Any: ...

        def _account_infos(self, keys: Sequence[Pubkey]) -> list[tuple[Pubkey, bytes] | None]: ...

        def _program_accounts(self, kind: str, memcmp: Mapping[str, bytes]) -> list[Any]: ...

        def _slash_views(self, job: Pubkey) -> tuple[JobView, Any, MarketView]: ...

        def _latest_blockhash(self) -> Hash: ...

        def fetch_validator(self, validator: Pubkey) -> ValidatorView | None: ...

        def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature: ...

    # -------------------------------------------------------------- reads

    def fetch_validator_by_authority(self, market: Pubkey, authority: Pubkey) -> ValidatorView | None:
        """The Validator of ``authority`` in ``market`` (``pda.validator_pda``), or None."""
        return self.fetch_validator(pda.validator_pda(market, authority, self.program_id))

    def list_validators(self, market: Pubkey, statuses: Iterable[str] | None = None) -> list[ValidatorView]:
        """Validators of ``market`` (getProgramAccounts + memcmp), optionally only those whose
        status is in ``statuses`` ({"active", "exiting"}), by bond (largest first), then
        authority."""
        wanted = None if statuses is None else {s.lower() for s in statuses}
        views = self._program_accounts("Validator", {"market": bytes(market)})
        views = [v for v in views if wanted is None or v.status in wanted]
        return sorted(views, key=lambda v: (-v.bond, bytes(v.authority)))

    def default_committee(
        self,
        market: Pubkey,
        size: int = 3,
        health_timeout: float = 2.0,
        *,
        exclude: Iterable[Pubkey] = (),
        http: Any = None,
    ) -> list[Pubkey]:
        """Up to ``size`` authorities of Active validators of ``market``, by bond (largest
        first), whose endpoint answers ``GET {endpoint}/health`` with 200 within
        ``health_timeout`` seconds (checked in parallel); fewer if not enough answer. Authorities
        in ``exclude`` (e.g. the provider's owner and worker key, which may not serve) are
        skipped. ``http``: an ``httpx.Client`` for the health checks (default: a new one)."""
        if size < 1:
            raise ValueError("size must be at least 1")
        skip = set(exclude)
        candidates = [v for v in self.list_validators(market, ["active"]) if v.authority not in skip]
        if not candidates:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(candidates))) as pool:
            healthy = list(pool.map(lambda v: endpoint_healthy(v.endpoint, health_timeout, http), candidates))
        return [v.authority for v, ok in zip(candidates, healthy) if ok][:size]

    # -------------------------------------------------------------- validator upkeep

    def register_validator(self, authority: Keypair, market: Pubkey, bond: int, endpoint: str) -> Signature:
        """Register ``authority`` as a validator of ``market`` reachable at ``endpoint``
        (``http://`` or ``https://``, <= 96 bytes; ValueError before sending otherwise), bonding
        ``bond`` (>= the market's ``validator_min_bond``) from its stake-mint ATA."""
        encode_endpoint(endpoint)
        m = self._require(market, "Market")
        ix = register_validator_ix(self.codec, authority.pubkey(), m, bond, endpoint)
        return self.send([ix], [authority])

    def update_validator(self, authority: Keypair, market: Pubkey, endpoint: str) -> Signature:
        """Point ``authority``'s validator in ``market`` at a new ``endpoint`` (ValueError before
        sending if the program would refuse the URL)."""
        validator = pda.validator_pda(market, authority.pubkey(), self.program_id)
        return self.send([update_validator_ix(self.codec, authority.pubkey(), validator, endpoint)], [authority])

    def claim_validator_rewards(self, authority: Keypair, market: Pubkey) -> Signature:
        """Move ``authority``'s unclaimed validator rewards from the market's fee vault to its
        payment-mint ATA (created in the same transaction if missing). The program fails with
        ``NothingToClaim`` when there is nothing (``ValidatorView.rewards_unclaimed``)."""
        m = self._require(market, "Market")
        owner = authority.pubkey()
        destination = tokens.ata(owner, m.payment_mint)
        ixs = [
            tokens.create_ata_idempotent_ix(owner, owner, m.payment_mint),
            claim_validator_rewards_ix(self.codec, owner, m, destination),
        ]
        return self.send(ixs, [authority])

    def request_validator_exit(self, authority: Keypair, market: Pubkey) -> Signature:
        """Leave: the whole bond unbonds for ``unbonding_seconds`` (still slashable for
        equivocation until ``withdraw_validator_bond``). An exiting validator joins no new
        committee and reports no downtime, and users may replace it in their jobs' committees
        (``replace_committee_member``); until it withdraws it still attests and submits
        ``settle`` for the committees it is in, so its exit stalls no proved second."""
        ix = request_validator_exit_ix(self.codec, authority.pubkey(), market)
        return self.send([ix], [authority])

    def withdraw_validator_bond(self, authority: Keypair, market: Pubkey) -> Signature:
        """Pay an exited validator's released bond to its stake-mint ATA (created in the same
        transaction if missing) and close the Validator account (rent to the authority). The
        program refuses to close it with rewards unclaimed (``RewardsUnclaimed``), so when
        ``ValidatorView.rewards_unclaimed`` is non-zero the same transaction first claims them
        to the authority's payment-mint ATA (created if missing)."""
        m = self._require(market, "Market")
        owner = authority.pubkey()
        v = self._fetch(pda.validator_pda(market, owner, self.program_id), "Validator")
        claim: list[Instruction] = []
        if v is not None and v.rewards_unclaimed > 0:
            claim = [
                tokens.create_ata_idempotent_ix(owner, owner, m.payment_mint),
                claim_validator_rewards_ix(self.codec, owner, m, tokens.ata(owner, m.payment_mint)),
            ]
        ix = withdraw_validator_bond_ix(self.codec, authority.pubkey(), m)
        ata_ix = tokens.create_ata_idempotent_ix(authority.pubkey(), authority.pubkey(), m.stake_mint)
        return self.send([*claim, ata_ix, ix], [authority])

    # -------------------------------------------------------------- committees

    def replace_committee_member(
        self, user: Keypair, job: Pubkey, index: int, new_authority: Pubkey
    ) -> Signature:
        """Replace member ``index`` of ``job``'s committee, which is no longer Active (exiting
        or closed), by ``new_authority``, an Active validator of the market not yet on the
        committee and not the provider's owner or worker key (the job's user only). ValueError,
        before sending, where the program would refuse (``MemberStillActive``,
        ``InvalidCommittee``)."""
        j = self._require(job, "Job")
        ix = replace_committee_member_ix(self.codec, user.pubkey(), j, index, new_authority)
        previous = j.committee[index]
        if new_authority in j.committee:
            raise ValueError(f"{new_authority} is already on the committee of job {job}")
        prev_pda, new_pda = (pda.validator_pda(j.market, a, self.program_id) for a in (previous, new_authority))
        prev_info, new_info, p_info = self._account_infos([prev_pda, new_pda, j.provider])
        prev = self._decode_info(prev_pda, prev_info, "Validator")
        if prev is not None and prev.status == "active":
            raise ValueError(
                f"committee member {index} ({previous}) is still active: only a member that "
                "exited or closed can be replaced (MemberStillActive)"
            )
        p = self._decode_info(j.provider, p_info, "Provider")
        excluded = {} if p is None else {p.owner: "the provider's owner", p.worker_key: "the provider's worker key"}
        check_committee([new_authority], 1, 1, [self._decode_info(new_pda, new_info, "Validator")],
                        j.market, excluded)  # fmt: skip
        return self.send([ix], [user])

    # -------------------------------------------------------------- downtime

    def slash_downtime_instruction(
        self,
        validator_authority: Pubkey,
        job: Pubkey,
        others: Sequence[Pubkey],
        last_proof_window_end: int = 0,
        reporter_stake_account: Pubkey | None = None,
    ) -> Instruction:
        """``slash_downtime`` of ``job``'s provider submitted by member ``validator_authority``
        with ``others`` (exactly ``terms.quorum - 1`` other members, each of which signs) as
        remaining (Validator PDA, authority as signer) pairs. ``last_proof_window_end``: the
        ``window_end`` of the newest proof of the job any of them accepted (the program counts
        missed windows from it or the last settled window, whichever is later, up to now while
        Running and up to ``ended_at`` once Finishing). The reward goes to
        ``reporter_stake_account`` (default: the submitter's stake-mint ATA). ValueError,
        before anything is built, where the program would refuse the signers or the job."""
        j, _, m = self._slash_views(job)
        if j.status not in ("running", "finishing"):
            raise ValueError(f"job {job} is {j.status}: only a running or finishing job can be "
                             "slashed for downtime")  # fmt: skip
        signers = [validator_authority, *others]
        outsiders = [str(a) for a in signers if j.member_index(a) is None]
        if outsiders:
            raise ValueError(f"{', '.join(outsiders)} not on the committee of job {job}")
        if len(set(signers)) != len(signers):
            raise ValueError("a committee member appears twice among the signers")
        if len(signers) != j.terms.quorum:
            raise ValueError(
                f"slash_downtime needs exactly {j.terms.quorum} committee member(s) (the job's "
                f"quorum), got {len(signers)}"
            )
        return slash_downtime_ix(self.codec, validator_authority, j, m, others, last_proof_window_end,
                                 reporter_stake_account)  # fmt: skip

    def slash_downtime_message(
        self,
        validator_authority: Pubkey,
        job: Pubkey,
        others: Sequence[Pubkey],
        last_proof_window_end: int = 0,
        reporter_stake_account: Pubkey | None = None,
        *,
        blockhash: Hash | None = None,
    ) -> Message:
        """The message of a one-instruction ``slash_downtime`` transaction (fee payer: the
        submitter ``validator_authority``; ``blockhash``: the latest by default). Every member
        signs ``bytes(message)``; :func:`assemble_transaction` joins the signatures."""
        ix = self.slash_downtime_instruction(validator_authority, job, others, last_proof_window_end,
                                             reporter_stake_account)  # fmt: skip
        return Message.new_with_blockhash([ix], validator_authority, blockhash or self._latest_blockhash())

    def build_slash_downtime_tx(
        self,
        validator_authority: Pubkey,
        job: Pubkey,
        others: Sequence[Pubkey],
        last_proof_window_end: int = 0,
        reporter_stake_account: Pubkey | None = None,
        *,
        blockhash: Hash | None = None,
    ) -> Transaction:
        """:meth:`slash_downtime_message` as an unsigned Transaction (all signatures empty)."""
        return Transaction.new_unsigned(
            self.slash_downtime_message(validator_authority, job, others, last_proof_window_end,
                                        reporter_stake_account, blockhash=blockhash)
        )  # fmt: skip

    def slash_downtime(
        self,
        validator_authority: Keypair,
        job: Pubkey,
        reporter_stake_account: Pubkey | None = None,
        others: Sequence[Keypair] = (),
        last_proof_window_end: int = 0,
    ) -> Signature:
        """Slash the provider of a Running ``job`` that missed ``max_missed_windows`` windows,
        with every signer's keypair at hand (see :meth:`slash_downtime_instruction`; members on
        other machines: :meth:`build_slash_downtime_tx`)."""
        ix = self.slash_downtime_instruction(
            validator_authority.pubkey(), job, [k.pubkey() for k in others], last_proof_window_end,
            reporter_stake_account,
        )  # fmt: skip
        return self.send([ix], [validator_authority, *others])

    # -------------------------------------------------------------- validator equivocation

    def slash_validator_equivocation_instructions(
        self,
        reporter: Pubkey,
        job: Pubkey,
        validator_authority: Pubkey,
        first: Any,
        first_approved: int,
        first_signature: bytes,
        second: Any,
        second_approved: int,
        second_signature: bytes,
        reporter_stake_account: Pubkey | None = None,
    ) -> list[Instruction]:
        """``[Ed25519(two attestations), slash_validator_equivocation]``. ValueError, before
        anything is built, unless both signatures verify under ``validator_authority`` over
        their attestation messages, the seqs are equal, (receipt, approved) differ, the job is
        not Open, both receipts end after the job started and the validator is on its
        committee."""
        r1, r2 = receipt_args(first), receipt_args(second)
        if r1["seq"] != r2["seq"]:
            raise ValueError(f"the attestations are for different seqs ({r1['seq']} and {r2['seq']})")
        if r1 == r2 and int(first_approved) == int(second_approved):
            raise ValueError("the two attestations are identical: that is not equivocation")
        j = self._require(job, "Job")
        m = self._require(j.market, "Market")
        if j.status == "open":
            raise ValueError(f"job {job} is Open: nothing was attested yet")
        if j.member_index(validator_authority) is None:
            raise ValueError(f"{validator_authority} is not on the committee of job {job}")
        entries = []
        for label, r, approved, sig in (("first", r1, first_approved, first_signature),
                                        ("second", r2, second_approved, second_signature)):  # fmt: skip
            if r["window_end"] <= j.started_at:
                raise ValueError(f"the {label} receipt ends at {r['window_end']}, not after the job "
                                 f"started ({j.started_at}): not evidence about this job")  # fmt: skip
            msg = attestation_message(
                receipt_message(bytes(self.program_id), bytes(j.market), bytes(job), r["seq"],
                                r["cumulative_seconds"], r["window_end"], bytes(r["proof_hash"])),
                int(approved),
            )  # fmt: skip
            if not verify_signature(bytes(validator_authority), bytes(sig), msg):
                raise ValueError(f"{label}_signature is not {validator_authority}'s attestation of "
                                 f"that receipt with {approved} approved seconds")  # fmt: skip
            entries.append((bytes(validator_authority), bytes(sig), msg))
        return [ed25519_entries_instruction(entries),
                slash_validator_equivocation_ix(self.codec, reporter, j, m, validator_authority, r1,
                                                first_approved, r2, second_approved,
                                                reporter_stake_account)]  # fmt: skip

    def slash_validator_equivocation(
        self,
        reporter: Keypair,
        job: Pubkey,
        validator_authority: Pubkey,
        first: Any,
        first_approved: int,
        first_signature: bytes,
        second: Any,
        second_approved: int,
        second_signature: bytes,
        reporter_stake_account: Pubkey | None = None,
    ) -> Signature:
        """Slash committee member ``validator_authority`` of ``job`` for two different
        attestations of one seq (receipt-like ``first``/``second`` as in ``slash_equivocation``,
        each with its approved seconds and the member's signature over its attestation
        message). The reward goes to ``reporter_stake_account`` (default: the reporter's
        stake-mint ATA, which must exist); the validator loses ``equivocation_slash_bps`` of its
        bond and stops serving. Once per (validator, job incarnation, seq): the record is
        ``pda.validator_equivocation_pda(validator PDA, job, job.started_at, seq)``."""
        ixs = self.slash_validator_equivocation_instructions(
            reporter.pubkey(), job, validator_authority, first, first_approved, first_signature,
            second, second_approved, second_signature, reporter_stake_account,
        )  # fmt: skip
        payer = self.payer.pubkey() if self.payer is not None else reporter.pubkey()
        size = transaction_size(ixs, payer)
        if size > PACKET_DATA_SIZE:
            raise TransactionTooLarge(
                f"the slash_validator_equivocation transaction is {size} bytes, over the "
                f"{PACKET_DATA_SIZE}-byte packet limit; nothing was sent"
            )
        return self.send(ixs, [reporter])
