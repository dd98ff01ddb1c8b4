"""Workload checkpoints on the provider's side: each job's checkpoint directory, its restore
before the container first starts, and its sync to the user's S3 store (docs/protocol.md,
"Workloads"; the store client is ``gpu_market.checkpoint``).

For a job whose spec has a ``checkpoint`` section, ``Checkpoints`` (a part of
``WorkloadManager``, driven by its hooks) guarantees:

* **The directory.** ``<state_dir>/checkpoints/<job b58>`` is a disk volume of the spec's
  ``max_mib`` (``runtime_disk.ScratchVolumes``: a loop-mounted ext4 image, so the container
  can never fill the provider's disk through it); its ``data`` folder is bind-mounted
  read-write at the spec's ``checkpoint.dir``. The worker's own files there
  (``restored.json``, ``last-manifest.json``) are outside what the container sees.
* **Restore, once, before the first start.** Before the job's container first starts, the
  store's newest complete checkpoint is restored into ``data`` (verified, swapped in whole;
  an empty store: an empty directory) and claimed: a manifest of the same files naming it
  as parent and this job as writer (``CheckpointStore.claim``) is written at once, so from
  then on the store's line is this job's (a newer checkpoint written meanwhile is restored
  instead, up to ``CLAIM_TRIES`` times). ``restored.json`` records that it happened, so a
  container started again (after a host reboot) keeps its local data. A restore that fails
  (store unreachable, keys refused, a checkpoint that does not verify) fails that start: it
  is retried with the start backoff (30 s, 60 s) and, after ``MAX_START_FAILURES`` failed
  starts, the job is finished on chain like any workload that cannot start. The container
  never starts without the newest checkpoint when the store has one: starting from scratch
  silently would throw away the user's progress, and its first sync would then become the
  store's newest checkpoint, hiding the older one. Windows while it fails are not billable
  (the workload is "failed"), so neither side pays for the wait; the error is the workload's
  error and the checkpoint status's ``error``.
* **Sync.** While the container runs, ``data`` is uploaded every ``interval_s`` seconds
  (incrementally, complete or absent: ``CheckpointStore.upload``; nothing is written when
  nothing changed), once more when the container exits, and once more when the job leaves
  Running (its container removed), after which the volume is released. Those last two always
  write a new manifest, even of unchanged files: a checkpoint created after the job left
  Running tells the user's side (a successor job's controller) that the last sync is done. That last sync is retried with backoff for up to
  ``FINAL_SYNC_GIVE_UP_S``, also across a worker restart (a volume whose job is not live is
  found again at the next reconcile), before the data is given up.
* **A stale worker never hides a newer checkpoint.** Every sync writes a manifest whose
  parent is the one this job last wrote or restored, and only while that is still the
  store's newest (``CheckpointStore.upload``). When another job wrote after it (the job moved
  to another provider while this worker was down, and its successor restored and claimed the
  store), nothing is written, ever again, for this job: its status's ``error`` and the log
  say "checkpoint: the store moved on (newer checkpoint by job X); not syncing this job any
  more"; the container keeps running, and a job that left Running has its volume released
  without a last sync.
* **A failing store never fails the job.** A sync that fails (store down, keys revoked,
  bucket gone, the directory over ``max_mib``) is logged as a warning and reported in the
  workload's status (``"checkpoint": {"error", "error_since"}``); the container keeps
  running, billing is unchanged, and the next interval retries.
* **The record in the proofs.** ``record_at(job, t)`` is the last complete checkpoint created
  before ``t`` (seq, manifest digest, size, time): the worker puts it in each window's proof
  (version 3), so the committee holds a record of it the provider cannot rewrite.
* **Secrets.** The store's keys are opened from the sealed spec in memory only, when a
  restore or a sync thread starts; they are never written, logged, nor handed to the
  container.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpu_market.checkpoint import (
    CheckpointError,
    CheckpointStore,
    CheckpointStoreError,
    CheckpointSuperseded,
    Manifest,
    open_checkpoint_credentials,
    operation_deadline_s,
)
from gpu_market.checkpoint_manifest import ManifestError, parse_manifest
from gpu_market.checkpoint_spec import CheckpointSpec
from gpu_market.proof import CheckpointRecord
from gpu_market.workload import WorkloadSpec, WorkloadSpecError, spec_from_json

from .errors import ContainerRuntimeError
from .keys import b58decode, b58encode
from .runtime_disk import ScratchVolumes
from .workload_store import WorkloadStore, WorkloadUnavailable

__all__ = [
    "CLAIM_TRIES",
    "FINAL_SYNC_GIVE_UP_S",
    "CheckpointStartError",
    "Checkpoints",
]

log = logging.getLogger("gpum_worker.checkpoints")

FINAL_SYNC_GIVE_UP_S = 3600.0
"""The last sync of a job that left Running is retried this long before its data is dropped."""
FINAL_RETRY_BASE_S = 30.0
FINAL_RETRY_CAP_S = 600.0
RETRY_LEFTOVER_S = 60.0
"""A volume still there after its last sync and release were tried is tried again then."""
CLAIM_TRIES = 3
"""Restores before the first start when a newer checkpoint keeps arriving before the claim."""
HISTORY = 256
"""Complete checkpoints remembered per job for ``record_at``."""
DATA = "data"
RESTORED = "restored.json"
LAST = "last-manifest.json"
SUBDIR = "checkpoints"


class CheckpointStartError(ContainerRuntimeError):
    """The checkpoint could not be restored before the container's first start (a failed
    start: retried, and counted like one)."""


@dataclass
class _Status:
    spec: CheckpointSpec
    last: CheckpointRecord | None = None
    restored_from: CheckpointRecord | None = None
    error: str | None = None
    error_since: float | None = None
    history: list[CheckpointRecord] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        c = self.spec.config
        last = self.last
        restored = self.restored_from
        return {
            "dir": c.dir, "store": c.store, "interval_s": c.interval_s, "max_mib": c.max_mib,
            "last": None if last is None else {
                "seq": last.seq, "digest": last.manifest_digest.hex(),
                "bytes": last.total_bytes, "created_at": last.created_at},
            "restored_from": None if restored is None else {
                "seq": restored.seq, "digest": restored.manifest_digest.hex()},
            "error": self.error,
            "error_since": None if self.error_since is None else int(self.error_since),
        }


class Checkpoints:
    """The checkpoint side of ``WorkloadManager`` (see the module docstring).

    ``state_dir``: the worker's state directory (None: no checkpoint job can start here);
    ``store``: the workload store the specs are read from; ``seed``: the worker key's seed
    (opens the sealed keys); ``container_gone(job)``: whether the job's container no longer
    exists (a volume is released only then); ``store_factory`` builds the store client.
    """

    def __init__(self, state_dir: str | None, store: WorkloadStore, seed: bytes,
                 clock: Callable[[], float] = time.time, *,
                 container_gone: Callable[[bytes], bool] = lambda job: True,
                 store_factory: Callable[..., CheckpointStore] = CheckpointStore) -> None:
        self.root = None if state_dir is None else os.path.join(state_dir, SUBDIR)
        self.volumes = None if self.root is None else ScratchVolumes(self.root)
        self.store = store
        self._seed = bytes(seed)[:32]
        self.clock = clock
        self.container_gone = container_gone
        self._factory = store_factory
        self._lock = threading.Lock()
        self._specs: dict[bytes, tuple[bytes, CheckpointSpec | None]] = {}
        self._status: dict[bytes, _Status] = {}
        self._syncs: dict[bytes, _Sync] = {}
        self._final_done: set[bytes] = set()
        self._next_try: dict[bytes, float] = {}
        self._superseded: dict[bytes, str] = {}

    # ----------------------------------------------------------------- specs and paths

    def check_sealed(self, spec: WorkloadSpec) -> None:
        """WorkloadSpecError unless the spec's checkpoint keys open with this worker's key
        (checked at delivery; the opened keys are dropped)."""
        if spec.checkpoint is not None:
            open_checkpoint_credentials(self._seed, spec.checkpoint)

    def spec_of(self, job: bytes) -> CheckpointSpec | None:
        """The checkpoint section of ``job``'s stored spec (None: none, or no spec)."""
        try:
            rec = self.store.get(job)
        except WorkloadUnavailable:
            rec = None
        if rec is None:
            with self._lock:
                cached = self._specs.get(job)
            return None if cached is None else cached[1]
        with self._lock:
            cached = self._specs.get(job)
        if cached is not None and cached[0] == rec.workload_hash:
            return cached[1]
        try:
            spec = spec_from_json(rec.spec).checkpoint
        except WorkloadSpecError:
            spec = None
        with self._lock:
            self._specs[job] = (rec.workload_hash, spec)
        return spec

    def _volume(self, job: bytes) -> str:
        assert self.root is not None
        return os.path.join(self.root, b58encode(job))

    def data_dir(self, job: bytes) -> str:
        return os.path.join(self._volume(job), DATA)

    def mount(self, job: bytes, spec: WorkloadSpec) -> tuple[str, str] | None:
        """The ``ContainerSpec.checkpoint_mount`` of ``job``'s container (None: no
        checkpoint, or no state directory, in which case ``before_start`` refuses)."""
        if spec.checkpoint is None or self.root is None:
            return None
        return self.data_dir(job), spec.checkpoint.config.dir

    # ----------------------------------------------------------------- status

    def _status_for(self, job: bytes, spec: CheckpointSpec) -> _Status:
        with self._lock:
            st = self._status.get(job)
            if st is None or st.spec != spec:
                st = self._status[job] = _Status(spec)
        if st.last is None and st.restored_from is None and self.root is not None:
            self._load_local(job, st)
        return st

    def _load_local(self, job: bytes, st: _Status) -> None:
        """What an earlier worker process recorded in the volume (after a restart)."""
        vol = self._volume(job)
        try:
            with open(os.path.join(vol, RESTORED), "rb") as f:
                restored = json.loads(f.read(4096))
            if restored.get("seq"):
                st.restored_from = CheckpointRecord(
                    int(restored["seq"]), bytes.fromhex(restored["digest"]),
                    int(restored["bytes"]), int(restored["created_at"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        m = self._last_manifest(job)
        if m is not None:
            st.last = m.record()
            st.history = [st.last]
        elif st.restored_from is not None:
            st.last = st.restored_from

    def _last_manifest(self, job: bytes) -> Manifest | None:
        try:
            with open(os.path.join(self._volume(job), LAST), "rb") as f:
                return parse_manifest(f.read())
        except (OSError, ManifestError):
            return None

    def status(self, job: bytes) -> dict[str, Any] | None:
        """The ``checkpoint`` part of the workload status (None: the spec has none)."""
        spec = self.spec_of(job)
        if spec is None:
            return None
        return self._status_for(job, spec).view()

    def record_at(self, job: bytes, t: float) -> CheckpointRecord | None:
        """The last complete checkpoint created before ``t`` (for the proof of a window that
        ends at ``t``); None when there is none or the job has no checkpoint."""
        with self._lock:
            st = self._status.get(job)
            if st is None:
                return None
            for rec in reversed(st.history):
                if rec.created_at < t:
                    return rec
            last = st.restored_from
        return last if last is not None and last.created_at < t else None

    def _set_error(self, job: bytes, spec: CheckpointSpec, error: str) -> None:
        st = self._status_for(job, spec)
        with self._lock:
            changed = st.error != error
            st.error = error
            if st.error_since is None:
                st.error_since = self.clock()
        if changed:
            log.warning("job %s: %s", b58encode(job), error)

    def _completed(self, job: bytes, spec: CheckpointSpec, m: Manifest) -> None:
        st = self._status_for(job, spec)
        rec = m.record()
        with self._lock:
            if st.error is not None:
                log.info("job %s: checkpoint sync works again (checkpoint %d)",
                         b58encode(job), m.seq)
            st.error = st.error_since = None
            if st.last != rec:
                st.last = rec
                st.history = [*st.history[-(HISTORY - 1):], rec]
        with contextlib.suppress(OSError):
            _write_file(os.path.join(self._volume(job), LAST), m.canonical_bytes())

    # ----------------------------------------------------------------- restore

    def before_start(self, job: bytes) -> None:
        """Prepare ``job``'s checkpoint directory before its container starts: mount its
        volume and, the first time, restore the store's newest complete checkpoint into it.
        CheckpointStartError (a ContainerRuntimeError) when that cannot be done."""
        spec = self.spec_of(job)
        if spec is None:
            return
        cfg = spec.config
        if self.volumes is None:
            raise CheckpointStartError(
                "this worker keeps no state directory, so it cannot hold a checkpoint "
                "directory (run it with a state directory)")
        vol = self.volumes.ensure(b58encode(job), cfg.max_mib)
        data = os.path.join(vol, DATA)
        st = self._status_for(job, spec)
        if os.path.exists(os.path.join(vol, RESTORED)) and os.path.isdir(data):
            return
        try:
            creds = open_checkpoint_credentials(self._seed, spec)
        except WorkloadSpecError as e:
            raise CheckpointStartError(f"the checkpoint keys cannot be opened: {e}") from None
        store = self._factory(cfg, creds, deadline_s=operation_deadline_s(cfg))
        del creds
        try:
            m, claimed = self._restore_newest(store, job, data)
        except CheckpointError as e:
            error = f"restoring the checkpoint from {cfg.store} failed: {e}"
            self._set_error(job, spec, error)
            raise CheckpointStartError(
                f"{error}; the container does not start without it (retried)") from None
        finally:
            store.close()
        rec = None if m is None else m.record()
        if claimed is not None:
            with contextlib.suppress(OSError):  # lost: the store's newest names this job
                _write_file(os.path.join(vol, LAST), claimed.canonical_bytes())
        _write_file(os.path.join(vol, RESTORED), json.dumps(
            {} if rec is None else {"seq": rec.seq, "digest": rec.manifest_digest.hex(),
                                    "bytes": rec.total_bytes,
                                    "created_at": rec.created_at}).encode())
        with self._lock:
            st.restored_from = rec
            st.last = rec if claimed is None else claimed.record()
            st.history = [] if rec is None else [rec]
            if claimed is not None:
                st.history.append(claimed.record())
            st.error = st.error_since = None
        if m is None:
            log.info("job %s: its checkpoint store %s is empty: the container starts with an "
                     "empty %s", b58encode(job), cfg.store, cfg.dir)
        else:
            log.info("job %s: restored checkpoint %d (%d bytes, %s) from %s into %s",
                     b58encode(job), m.seq, m.total_bytes, m.digest.hex()[:16], cfg.store,
                     cfg.dir)

    def _restore_newest(self, store: CheckpointStore, job: bytes, data: str
                        ) -> tuple[Manifest | None, Manifest | None]:
        """Restore the store's newest checkpoint into ``data`` and claim it for ``job``:
        (restored, claim), or (None, None) when the store is empty (``data`` made empty)."""
        for _ in range(CLAIM_TRIES):
            m = store.latest()
            if m is None:
                os.makedirs(data, exist_ok=True)
                os.chmod(data, 0o777)
                return None, None
            store.restore(m, data, dir_mode=0o777)
            try:
                return m, store.claim(m, job=b58encode(job))
            except CheckpointSuperseded as e:
                log.info("job %s: a newer checkpoint arrived while checkpoint %d was restored "
                         "(%s); restoring that one", b58encode(job), m.seq, e)
        raise CheckpointStoreError(
            "conflict", f"the newest checkpoint changed {CLAIM_TRIES} times while it was "
            "restored: another job keeps writing to this store")

    def superseded(self, job: bytes) -> str | None:
        """Why ``job`` no longer syncs (another job's checkpoint is the store's newest), or
        None while it does."""
        with self._lock:
            return self._superseded.get(job)

    def _moved_on(self, job: bytes, spec: CheckpointSpec, e: CheckpointSuperseded) -> None:
        why = f"checkpoint: {e}; not syncing this job any more"
        with self._lock:
            self._superseded[job] = why
        self._set_error(job, spec, why)

    # ----------------------------------------------------------------- sync threads

    def observed(self, job: bytes, state: str) -> None:
        """The job's container was seen in ``state`` ("running", "exited", ...): start its
        sync thread, or sync once more when it exited."""
        if state not in ("running", "exited"):
            return
        spec = self.spec_of(job)
        if spec is None or self.volumes is None:
            return
        with self._lock:
            if job in self._superseded:
                return
            sync = self._syncs.get(job)
            alive = sync is not None and sync.is_alive()
            if state == "running" and (not alive or sync.final):  # type: ignore[union-attr]
                self._final_done.discard(job)
                self._start_sync(job, spec, final=False, release=False)
            elif state == "exited" and alive and not sync.final:  # type: ignore[union-attr]
                sync.finish(release=False)  # type: ignore[union-attr]
            elif state == "exited" and not alive and job not in self._final_done:
                self._start_sync(job, spec, final=True, release=False)

    def _start_sync(self, job: bytes, spec: CheckpointSpec | None, *, final: bool,
                    release: bool) -> None:
        sync = _Sync(self, job, spec, final=final, release=release)
        self._syncs[job] = sync
        sync.start()

    def reconcile(self, live: Iterable[bytes]) -> None:
        """After the containers were matched to the jobs: a job not in ``live`` (Running or
        held) gets its last sync and then its volume released; a volume left by a job that
        is not live (after a worker restart) too."""
        if self.volumes is None:
            return
        live = frozenset(live)
        with self._lock:
            for job, sync in list(self._syncs.items()):
                if not sync.is_alive():
                    del self._syncs[job]
                elif job not in live and not sync.release:
                    sync.finish(release=True)
        for name in sorted(self.volumes.names()):
            try:
                job = b58decode(name)
            except ValueError:
                continue
            if len(job) != 32 or job in live:
                continue
            now = time.monotonic()
            with self._lock:
                if job in self._syncs or now < self._next_try.get(job, 0.0):
                    continue
                self._next_try[job] = now + RETRY_LEFTOVER_S
            spec = self.spec_of(job)
            with self._lock:
                self._start_sync(job, spec, final=True, release=True)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no sync thread that ends by itself (a last sync) is running."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self._lock:
                busy = [s for s in self._syncs.values() if s.is_alive() and s.final]
            if not busy:
                return True
            busy[0].join(max(0.0, min(0.2, end - time.monotonic())))
        return False

    def sync_now(self, job: bytes) -> None:
        """Wake ``job``'s sync thread for a sync now (tests, operators)."""
        with self._lock:
            sync = self._syncs.get(job)
        if sync is not None:
            sync.wake.set()

    def close(self) -> None:
        """Stop every sync thread (worker shutdown: containers keep running, and the next
        worker process resumes their syncs)."""
        with self._lock:
            syncs = list(self._syncs.values())
        for s in syncs:
            s.stop()
        for s in syncs:
            s.join(5.0)

    def _release(self, job: bytes) -> None:
        assert self.volumes is not None
        try:
            self.volumes.release(b58encode(job))
        except ContainerRuntimeError as e:
            log.warning("job %s: cannot release its checkpoint volume (%s); retrying later",
                        b58encode(job), e)
            return
        with self._lock:
            self._superseded.pop(job, None)
        log.info("job %s: checkpoint volume released", b58encode(job))


class _Sync(threading.Thread):
    """One job's uploads: every ``interval_s`` until ``finish``, then a last one (retried)."""

    def __init__(self, owner: Checkpoints, job: bytes, spec: CheckpointSpec | None, *,
                 final: bool, release: bool) -> None:
        super().__init__(name=f"checkpoint-{b58encode(job)}", daemon=True)
        self.owner, self.job, self.spec = owner, job, spec
        self.final, self.release = final, release
        self.wake = threading.Event()
        self._stopped = threading.Event()

    def finish(self, *, release: bool) -> None:
        self.final = True
        self.release = self.release or release
        self.wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self.wake.set()

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("job %s: the checkpoint sync thread failed",
                          b58encode(self.job))

    def _run(self) -> None:
        owner, job, spec = self.owner, self.job, self.spec
        if spec is None:  # no spec any more (its record was purged): nothing to upload to
            if self.release:
                log.warning("job %s: its checkpoint volume is left without a spec; released "
                            "without a last sync", b58encode(job))
                self._release_when_gone()
            return
        cfg = spec.config
        assert owner.volumes is not None
        if owner.superseded(job) is not None:  # nothing of this job is written any more
            if self.release:
                self._release_when_gone()
            return
        try:
            owner.volumes.ensure(b58encode(job), cfg.max_mib)  # mounted again after a reboot
        except ContainerRuntimeError as e:
            owner._set_error(job, spec, f"the checkpoint volume cannot be mounted: {e}")
            return
        try:
            creds = open_checkpoint_credentials(owner._seed, spec)
            store = owner._factory(cfg, creds, deadline_s=operation_deadline_s(cfg))
            del creds
        except (WorkloadSpecError, CheckpointError) as e:
            owner._set_error(job, spec, f"checkpoint sync cannot start: {e}")
            if self.release:
                self._release_when_gone()
            return
        last = owner._last_manifest(job)
        started = time.monotonic()
        backoff = FINAL_RETRY_BASE_S
        try:
            while not self._stopped.is_set():
                if not self.final:
                    self.wake.wait(cfg.interval_s)
                    self.wake.clear()
                    if self._stopped.is_set():
                        return
                ok, last = self._sync_once(store, last)
                if ok is None:  # the store moved on: this job's data is not written again
                    break
                if not self.final:
                    continue
                if ok:
                    with owner._lock:
                        owner._final_done.add(job)
                    break
                if time.monotonic() - started > FINAL_SYNC_GIVE_UP_S:
                    log.error("job %s: the last checkpoint sync failed for %.0f s; the data "
                              "since checkpoint %s is given up", b58encode(job),
                              FINAL_SYNC_GIVE_UP_S, last.seq if last else "none")
                    break
                self.wake.wait(backoff)
                self.wake.clear()
                backoff = min(backoff * 2, FINAL_RETRY_CAP_S)
        finally:
            store.close()
        if self.release and not self._stopped.is_set():
            self._release_when_gone()

    def _sync_once(self, store: CheckpointStore, last: Manifest | None
                   ) -> tuple[bool | None, Manifest | None]:
        """One upload: (True, its manifest) when it is stored (or nothing changed), (False,
        ``last``) when it failed (retried), (None, ``last``) when the store moved on."""
        owner, job, spec = self.owner, self.job, self.spec
        assert spec is not None
        data = owner.data_dir(job)
        if owner.volumes is not None and not os.path.isdir(data):
            return True, last  # never restored here, so nothing of the job's to upload
        try:
            m = store.upload(data, last, force=self.final, job=b58encode(job))
        except CheckpointSuperseded as e:
            if e.job == b58encode(job):  # this job's other sync wrote first: adopted next time
                return False, last
            owner._moved_on(job, spec, e)
            return None, last
        except CheckpointError as e:
            owner._set_error(job, spec, f"checkpoint sync to {spec.config.store} failed (the job "
                             f"keeps running; retried every {spec.config.interval_s} s): {e}")
            return False, last
        if m is None:
            return False, last  # a file changed while it was read: the next sync retries
        owner._completed(job, spec, m)
        if m is not last:
            log.info("job %s: checkpoint %d stored (%d bytes, %d file(s))", b58encode(job),
                     m.seq, m.total_bytes, len(m.files))
        return True, m

    def _release_when_gone(self) -> None:
        while not self._stopped.is_set():
            try:
                gone = self.owner.container_gone(self.job)
            except ContainerRuntimeError:
                gone = False
            if gone:
                self.owner._release(self.job)
                return
            self._stopped.wait(5.0)


def _write_file(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
