"""The local record of your clusters: each cluster's name, id and, by rank, its node jobs (the
chain knows only K separate jobs).

One JSON file, ``clusters.json``, next to the job history (``$GPUM_DATA_DIR``, else
``$XDG_DATA_HOME/gpum``, else ``~/.local/share/gpum``; :func:`gpu_market.job_history.history_path`).
A cluster is recorded, with the job address of every rank, before its first job is created, so
a cluster whose creation was interrupted can still be found and taken down. Writes are atomic
(a temporary file renamed over the old one) under an advisory lock, so two ``gpum`` processes
never lose each other's records. Each record names the RPC URL it lives on; a name is unique
among the clusters of one URL that are not down.

Amounts are payment-mint base units and times Unix seconds.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["CLUSTERS_FILE", "NODE_STATES", "ClusterRecord", "ClusterStore", "NodeRecord", "StoreError",
           "clusters_path"]  # fmt: skip

CLUSTERS_FILE = "clusters.json"
VERSION = 1
STATES = ("starting", "running", "failed", "down")
"""``starting``: jobs being created and joined; ``running``: every node ran once; ``failed``:
the gang did not start (its jobs released); ``down``: taken down by the user."""


class StoreError(ValueError):
    """A cluster name or reference that cannot be used, or an unreadable file (one line saying
    what to do)."""


def clusters_path() -> Path:
    from .job_history import history_path

    return history_path().parent / CLUSTERS_FILE


NODE_STATES = ("running", "pending", "planned", "created", "delivered", "keyed", "joining",
               "joined", "stopping", "stopped")
"""A node's state as a managed cluster's controller keeps it (:mod:`gpu_market.cluster_managed`):
``running`` for every node of the gang once it ran; a successor of a failed node goes
``pending`` (decided, no offer yet), ``planned`` (its job address, provider, deposit and spec
fixed), ``created``, ``delivered``, ``keyed`` (its mesh key known), ``joining`` (the peer
list of ``mesh_version`` being delivered to every node), ``joined``, then ``running``; a
failed node moves to ``retired`` as ``stopping`` (its job being finished or cancelled), then
``stopped`` (closed by ``gpum cluster down``)."""


@dataclass(frozen=True)
class NodeRecord:
    """Node ``rank``: its job (address and id), provider, worker endpoint, the workload hash
    its job was created with, and its deposit; for a managed cluster also its ``attempt``
    (0: the gang's node, k: its k-th successor), ``state``, since when (``since``), why it
    was retired (``end_reason``), a successor's ``spec`` (canonical JSON, hex; its secrets
    sealed), ``committee`` and ``quorum``, and its verified ``mesh_key`` (a peer entry)."""

    rank: int
    job: str
    job_id: int
    provider: str
    worker_endpoint: str
    workload_hash: str
    deposit: int
    attempt: int = 0
    state: str = "running"
    since: int = 0
    end_reason: str | None = None
    spec: str = ""
    committee: tuple[str, ...] = ()
    quorum: int = 0
    mesh_key: dict[str, Any] | None = None


@dataclass(frozen=True)
class ClusterRecord:
    id: str
    name: str
    url: str
    market: str
    user: str
    created_at: int
    gpu_model: str
    gpus_per_node: int
    seconds: int
    template: str | None
    nodes: tuple[NodeRecord, ...]
    state: str = "starting"
    error: str | None = None
    receipts: dict[str, Any] = field(default_factory=dict)
    """Receipts by rank (as ``Receipt.as_dict``) once the cluster is down; a retired node's
    by its job address."""
    managed: dict[str, Any] | None = None
    """A managed cluster's policy (:mod:`gpu_market.cluster_managed`), None otherwise."""
    mesh_version: int = 0
    """The version of the newest peer list sent to the nodes (0: the gang's)."""
    retired: tuple[NodeRecord, ...] = ()
    """Failed nodes that were replaced (their jobs are still closed by ``down``)."""
    events: tuple[tuple[int, str, str], ...] = ()
    """The controller's newest decisions and warnings: ``(unix seconds, level, text)``."""
    stop_requested: bool = False
    """``gpum cluster down`` asked the controller to stop."""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = [asdict(n) for n in self.nodes]
        d["retired"] = [asdict(n) for n in self.retired]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClusterRecord:
        node = lambda n: NodeRecord(**{**n, "committee": tuple(n.get("committee", ()))})
        nodes = tuple(node(n) for n in d.get("nodes", ()))
        retired = tuple(node(n) for n in d.get("retired", ()))
        events = tuple(tuple(e) for e in d.get("events", ()))
        return cls(**{**d, "nodes": nodes, "retired": retired, "events": events})


class ClusterStore:
    """The record file at ``path`` (default :func:`clusters_path`)."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else clusters_path()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            return {"version": VERSION, "clusters": {}}
        except (OSError, ValueError) as e:
            raise StoreError(f"cannot read the cluster record {self.path} ({e}): fix or move it "
                             "away") from None  # fmt: skip
        if not isinstance(data, dict) or not isinstance(data.get("clusters"), dict):
            raise StoreError(f"{self.path} is not a gpum cluster record: move it away")
        return data

    def _update(self) -> contextlib.AbstractContextManager[dict[str, Any]]:
        """The record, locked for a read-modify-write; written back atomically on exit."""
        from .job_history import locked_json_update

        return locked_json_update(self.path, self._read, "the cluster record", StoreError)

    def records(self, url: str | None = None, user: str | None = None) -> list[ClusterRecord]:
        """Every record (of ``url`` and ``user`` when given), oldest first."""
        out = [ClusterRecord.from_dict(r) for r in self._read()["clusters"].values()]
        out = [r for r in out if (url is None or r.url == url) and (user is None or r.user == user)]
        return sorted(out, key=lambda r: (r.created_at, r.id))

    def check_name_free(self, name: str, url: str) -> None:
        """StoreError unless ``name`` is a valid name no cluster of ``url`` still up holds."""
        from .job_history import HistoryError, check_name

        try:
            check_name(name)
        except HistoryError as e:
            raise StoreError(str(e).replace("job name", "cluster name")) from None
        for r in self.records(url):
            if r.name == name and r.state != "down":
                raise StoreError(f"cluster name {name!r} is taken by cluster {r.id} "
                                 f"({r.state}): pick another name, or `gpum cluster down {name}`")  # fmt: skip

    def find(self, ref: str, url: str) -> ClusterRecord:
        """The cluster ``ref`` names on ``url``: by name (one not down first, else the newest),
        else by id or a unique id prefix of at least 4 digits; StoreError otherwise."""
        ref = ref.strip()
        records = self.records(url)
        named = [r for r in records if r.name == ref]
        if named:
            up = [r for r in named if r.state != "down"]
            return (up or named)[-1]
        by_id = [r for r in records if len(ref) >= 4 and r.id.startswith(ref.lower())]
        if len(by_id) == 1:
            return by_id[0]
        if len(by_id) > 1:
            raise StoreError(f"{ref!r} starts {len(by_id)} cluster ids: give more of it")
        raise StoreError(f"no cluster named {ref!r} on {url} in {self.path}: see `gpum cluster "
                         "list`")  # fmt: skip

    def save(self, record: ClusterRecord) -> None:
        with self._update() as data:
            data["clusters"][record.id] = record.as_dict()

    def get(self, cluster_id: str) -> ClusterRecord:
        """The record of ``cluster_id`` as the file has it now; StoreError when there is none."""
        d = self._read()["clusters"].get(cluster_id)
        if d is None:
            raise StoreError(f"no cluster {cluster_id} in {self.path}")
        return ClusterRecord.from_dict(d)

    def change(self, cluster_id: str, fn: Any) -> ClusterRecord:
        """Replace the record of ``cluster_id`` by ``fn(record)`` under the lock (one atomic
        read-modify-write): the new record."""
        with self._update() as data:
            old = data["clusters"].get(cluster_id)
            if old is None:
                raise StoreError(f"no cluster {cluster_id} in {self.path}")
            new = fn(ClusterRecord.from_dict(old))
            data["clusters"][cluster_id] = new.as_dict()
            return new

    def update(self, cluster_id: str, **fields: Any) -> ClusterRecord:
        """The record of ``cluster_id`` with ``fields`` replaced, written back."""
        with self._update() as data:
            old = data["clusters"].get(cluster_id)
            if old is None:
                raise StoreError(f"no cluster {cluster_id} in {self.path}")
            new = replace(ClusterRecord.from_dict(old), **fields)
            data["clusters"][cluster_id] = new.as_dict()
            return new
