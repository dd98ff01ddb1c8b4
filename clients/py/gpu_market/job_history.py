"""The local history of your jobs: the human names you gave them and the receipt of each
closed one (the chain keeps only a tombstone once a job is closed).

One JSON file, ``jobs.json`` under ``$GPUM_DATA_DIR``, else ``$XDG_DATA_HOME/gpum``, else
``~/.local/share/gpum``. Each record is keyed by the job's address and names the cluster (RPC
URL) it lives on, so a name on localnet never answers for a job on devnet. Writes are atomic
(a temporary file renamed over the old one) and serialised by an advisory lock next to the
file, so two ``gpum`` processes never lose each other's records.

Amounts are payment-mint base units and times Unix seconds (the CLI formats them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solders.pubkey import Pubkey

__all__ = [
    "HISTORY_FILE",
    "HistoryError",
    "JobHistory",
    "Receipt",
    "check_name",
    "history_path",
    "parse_job_address",
    "receipt_of",
]

HISTORY_FILE = "jobs.json"
VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")


class HistoryError(ValueError):
    """A name that cannot be used or resolved, or an unreadable history file (one line saying
    what to do)."""


def history_path() -> Path:
    """``$GPUM_DATA_DIR/jobs.json``, else ``$XDG_DATA_HOME/gpum/jobs.json``, else
    ``~/.local/share/gpum/jobs.json``."""
    base = os.environ.get("GPUM_DATA_DIR")
    if not base:
        xdg = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        base = os.path.join(xdg, "gpum")
    return Path(base).expanduser() / HISTORY_FILE


def parse_job_address(text: str) -> Pubkey | None:
    """``text`` as a base58 public key, or None when it is not one."""
    try:
        return Pubkey.from_string(text.strip())
    except ValueError:
        return None


def check_name(name: str) -> str:
    """``name`` if it can name a job: 1..32 characters of letters, digits, ``.``, ``_``,
    ``-``, starting with a letter or digit, and not itself a public key; else HistoryError."""
    if not NAME_RE.match(name):
        raise HistoryError(f"job name {name!r} is not valid: use 1..32 letters, digits, '.', '_' "
                           "or '-', starting with a letter or digit")  # fmt: skip
    if parse_job_address(name) is not None:
        raise HistoryError(f"job name {name!r} reads as a public key: pick a shorter name")
    return name


@dataclass(frozen=True)
class Receipt:
    """What a job cost, once closed. ``paid == paid_provider + fees`` and
    ``paid + refunded == deposited + donations`` (money is conserved)."""

    deposited: int
    """Every deposit and top-up the user made."""
    paid_provider: int
    paid_validators: int
    paid_treasury: int
    burned: int
    refunded: int
    """Everything returned to the user: the close's refund and any earlier one (a cancel)."""
    donations: int = 0
    """Tokens sent to the escrow outside the books, returned with the refund."""

    @property
    def fees(self) -> int:
        """The protocol's share: validators, treasury and burn."""
        return self.paid_validators + self.paid_treasury + self.burned

    @property
    def paid(self) -> int:
        """The job's total cost to the user: the provider and the fees."""
        return self.paid_provider + self.fees

    def as_dict(self) -> dict[str, int]:
        return {"deposited": self.deposited, "paid": self.paid, "paid_provider": self.paid_provider,
                "fees": self.fees, "paid_validators": self.paid_validators,
                "paid_treasury": self.paid_treasury, "burned": self.burned,
                "refunded": self.refunded, "donations": self.donations}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Receipt:
        names = ("deposited", "paid_provider", "paid_validators", "paid_treasury", "burned",
                 "refunded", "donations")  # fmt: skip
        return cls(**{n: int(d.get(n, 0)) for n in names})


def receipt_of(job: Any, refunded_now: int) -> Receipt:
    """The receipt of ``job`` (a JobView read after its settlement ended, just before
    ``close_job``) whose close refunded ``refunded_now`` (the escrow's whole balance, donations
    included)."""
    booked = job.booked_escrow
    return Receipt(deposited=job.deposited, paid_provider=job.paid_provider,
                   paid_validators=job.paid_validators, paid_treasury=job.paid_treasury,
                   burned=job.burned, refunded=job.refunded + refunded_now,
                   donations=max(0, refunded_now - booked))  # fmt: skip


@contextlib.contextmanager
def locked_json_update(path: Path, read: Callable[[], dict[str, Any]], what: str,
                       error: type[Exception]) -> Iterator[dict[str, Any]]:
    """``read()`` under an exclusive lock on ``path``'s ``.lock`` file, yielded for a
    read-modify-write and written back atomically (temporary file, ``os.replace``) on exit;
    ``error`` naming ``what`` (e.g. "the job history") when the folder is not writable."""
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - held for the block
    except OSError as e:
        raise error(f"cannot write {what} in {path.parent} ({e.strerror}): set GPUM_DATA_DIR "
                    "to a writable folder") from None  # fmt: skip
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read()
        yield data
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError as e:
            raise error(f"cannot write {what} {path} ({e.strerror}): set GPUM_DATA_DIR to a "
                        "writable folder") from None  # fmt: skip


class JobHistory:
    """The history file at ``path`` (default :func:`history_path`)."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else history_path()

    # ------------------------------------------------------------------ file

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            return {"version": VERSION, "jobs": {}}
        except (OSError, ValueError) as e:
            raise HistoryError(f"cannot read the job history {self.path} ({e}): fix or move it "
                               "away (it holds only names and receipts)") from None  # fmt: skip
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
            raise HistoryError(f"{self.path} is not a gpum job history: move it away")
        return data

    def _update(self) -> contextlib.AbstractContextManager[dict[str, Any]]:
        """The history, locked for a read-modify-write; written back atomically on exit."""
        return locked_json_update(self.path, self._read, "the job history", HistoryError)

    # ------------------------------------------------------------------ reads

    def records(self, url: str | None = None, user: Pubkey | None = None) -> dict[str, dict[str, Any]]:
        """Records by job address, only those of cluster ``url`` and wallet ``user`` when given."""
        jobs = self._read()["jobs"]
        return {a: r for a, r in jobs.items()
                if (url is None or r.get("url") == url) and (user is None or r.get("user") == str(user))}  # fmt: skip

    def name_of(self, address: Pubkey, url: str) -> str | None:
        r = self.records(url).get(str(address))
        return None if r is None else r.get("name")

    def resolve(self, text: str, url: str) -> Pubkey:
        """A job address from ``text``: a public key as is, else the job named ``text`` on
        cluster ``url``; among several, the one not closed yet. HistoryError when no job or
        more than one open job has that name."""
        address = parse_job_address(text)
        if address is not None:
            return address
        named = {a: r for a, r in self.records(url).items() if r.get("name") == text}
        if not named:
            raise HistoryError(f"no job named {text!r} on {url} in {self.path}: pass the job's "
                               "address, or see `gpum job list --all` for your jobs and names")  # fmt: skip
        live = [a for a, r in named.items() if "receipt" not in r and "closed_at" not in r]
        pick = live or list(named)
        if len(pick) > 1:
            raise HistoryError(f"{len(pick)} jobs are named {text!r} on {url} "
                               f"({', '.join(sorted(pick))}): pass the job's address")  # fmt: skip
        return Pubkey.from_string(pick[0])

    def check_name_free(self, name: str, url: str, exists: Callable[[list[Pubkey]], list[bool]]) -> None:
        """HistoryError unless ``name`` is valid and no job of cluster ``url`` that still
        exists on chain (``exists(addresses)``, in order) has it."""
        check_name(name)
        held = [Pubkey.from_string(a) for a, r in self.records(url).items()
                if r.get("name") == name and "closed_at" not in r]  # fmt: skip
        taken = [a for a, alive in zip(held, exists(held)) if alive] if held else []
        if taken:
            raise HistoryError(f"job name {name!r} is taken by job {taken[0]}, still open: pick "
                               "another --name, or close that job first")  # fmt: skip

    # ------------------------------------------------------------------ writes

    def record_created(self, address: Pubkey, *, url: str, market: Pubkey, user: Pubkey,
                       job_id: int, created_at: int, name: str | None = None) -> None:  # fmt: skip
        """Remember a job just created (and its name)."""
        with self._update() as data:
            r = data["jobs"].setdefault(str(address), {})
            r.update({"url": url, "market": str(market), "user": str(user), "job_id": job_id,
                      "created_at": created_at})  # fmt: skip
            if name is not None:
                r["name"] = check_name(name)

    def record_closed(self, job: Any, *, url: str, receipt: Receipt, closed_at: int,
                      signature: str) -> None:  # fmt: skip
        """Keep the receipt of ``job`` (its JobView before the close), closed at ``closed_at``."""
        with self._update() as data:
            r = data["jobs"].setdefault(str(job.address), {})
            r.setdefault("url", url)
            r.update({"market": str(job.market), "user": str(job.user), "job_id": job.job_id,
                      "provider": str(job.provider), "gpu_count": job.gpu_count,
                      "created_at": job.created_at, "started_at": job.started_at,
                      "ended_at": job.ended_at, "status": job.status, "closed_at": closed_at,
                      "close_signature": signature, "receipt": receipt.as_dict()})  # fmt: skip
