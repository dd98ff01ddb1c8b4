"""The managed-job controller's database (real SQLite files): one transaction per change,
u64 amounts, names, reopening after a crash, the one-controller lock across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_market.managed.store import ControllerBusy, ControllerLock, ManagedStore, StoreError

U64_MAX = 2**64 - 1


def new(store: ManagedStore, name: str = "train", url: str = "http://a") -> int:
    return store.create(name=name, url=url, uid=b"u" * 16, market="M", user="U", program_id="P",
                        decimals=6, policy="{}", template={"image": "x", "secrets": ["T"]},
                        now=100, first=slot(0), events=[("info", "created")])  # fmt: skip


def slot(idx: int, deposit: int = 5) -> dict:
    return {"job_id": U64_MAX - idx, "job": f"JOB{idx}", "provider": "P1", "endpoint": "http://w",
            "gpu_model": "H100", "price": U64_MAX, "deposit": deposit, "committee": ["V1"],
            "quorum": 1, "spec": b"{}", "workload_hash": "00" * 32}  # fmt: skip


def test_a_managed_job_and_its_attempts_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    s = ManagedStore(path)
    mid = new(s)
    s.commit(mid, 101, attempt=(0, {"state": "created", "deposited": U64_MAX}),
             managed={"phase": "running"}, events=[("decision", "went", {"k": 1})])
    s.close()
    s = ManagedStore(path)
    m = s.managed(mid)
    (a,) = s.attempts(mid)
    assert m.phase == "running" and m.uid == b"u" * 16 and m.template["secrets"] == ["T"]
    assert a.job_id == U64_MAX and a.price == U64_MAX and a.deposited == U64_MAX
    assert a.state == "created" and a.committee == ["V1"]
    assert [(e.level, e.text, e.data) for e in s.events(mid)] == [
        ("info", "created", None), ("decision", "went", {"k": 1})]
    assert s.by_job("JOB0", "http://a")[1].idx == 0 and s.by_job("JOB0", "http://b") is None


def test_a_failed_transaction_changes_nothing(tmp_path: Path) -> None:
    s = ManagedStore(tmp_path / "m.sqlite")
    mid = new(s)
    with pytest.raises(ValueError, match="not attempt fields"):
        s.commit(mid, 101, managed={"phase": "migrating"}, attempt=(0, {"bogus": 1}),
                 events=[("info", "never")])
    assert s.managed(mid).phase == "starting" and len(s.events(mid)) == 1


def test_a_replanned_slot_replaces_only_a_planned_row(tmp_path: Path) -> None:
    s = ManagedStore(tmp_path / "m.sqlite")
    mid = new(s)
    s.commit(mid, 101, new_attempt=(0, {**slot(0), "provider": "P2", "deposit": 9}))
    (a,) = s.attempts(mid)
    assert (a.provider, a.deposit, a.committed) == ("P2", 9, 9)
    s.commit(mid, 102, attempt=(0, {"state": "closed", "deposited": 9, "refunded": 7}))
    assert s.attempts(mid)[0].committed == 2  # what it paid
    s.commit(mid, 103, new_attempt=(1, slot(1)))
    assert [a.idx for a in s.attempts(mid)] == [0, 1]


def test_a_name_is_held_until_its_managed_job_ends(tmp_path: Path) -> None:
    s = ManagedStore(tmp_path / "m.sqlite")
    first = new(s)
    with pytest.raises(StoreError, match="taken by a managed job"):
        new(s)
    assert new(s, url="http://other")  # another cluster
    s.commit(first, 200, managed={"phase": "done"})
    second = new(s)
    assert s.find("train", "http://a").id == second


def test_one_controller_per_managed_job_across_processes(tmp_path: Path) -> None:
    lock = ControllerLock(tmp_path, 7, "train")
    assert lock.holder() is None
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; "
        "from gpu_market.managed.store import ControllerLock; "
        f"l = ControllerLock(Path({str(tmp_path)!r}), 7, 'train').acquire(); "
        "print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lock.holder() == holder.pid
        with pytest.raises(ControllerBusy, match=f"pid {holder.pid}") as e:
            lock.acquire()
        assert e.value.pid == holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    # A killed controller leaves the lock free.
    with lock:
        assert lock.holder() == os.getpid()
    assert lock.holder() is None
