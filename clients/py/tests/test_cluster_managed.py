"""A managed cluster's record and successor addresses (pure parts of
``gpu_market.cluster_managed``; the controller end to end is ``tests/test_e2e_cluster_managed``)."""

from __future__ import annotations

from pathlib import Path

from gpu_market.cluster_spec import node_job_id
from gpu_market.cluster_store import ClusterRecord, ClusterStore, NodeRecord

CID = "5a01020304050607"


def test_a_successor_has_its_own_fixed_address_and_the_gangs_is_unchanged() -> None:
    import hashlib

    gang = node_job_id(CID, 1)
    digest = hashlib.sha256(b"gpum-cluster-node-v1" + bytes.fromhex(CID) + (1).to_bytes(4, "little"))
    assert gang == int.from_bytes(digest.digest()[:8], "little") == node_job_id(CID, 1, 0)
    ids = {node_job_id(CID, r, a) for r in range(3) for a in range(4)}
    assert len(ids) == 12  # every rank's every attempt has an address of its own


def _record(**kw: object) -> ClusterRecord:
    nodes = tuple(NodeRecord(r, f"job{r}", r, "prov", "http://w", "00", 10) for r in range(2))
    return ClusterRecord(id=CID, name="c", url="u", market="m", user="x", created_at=1,
                         gpu_model="H100", gpus_per_node=1, seconds=60, template=None,
                         nodes=nodes, **kw)  # type: ignore[arg-type]


def test_the_record_keeps_replaced_nodes_events_and_reads_old_files(tmp_path: Path) -> None:
    store = ClusterStore(tmp_path / "clusters.json")
    r = _record(managed={"budget": 40, "gave_up": None}, state="running")
    store.save(r)
    old = r.nodes[1]
    succ = NodeRecord(1, "", 0, "", "", "", 0, attempt=1, state="pending", since=5)
    store.change(CID, lambda x: ClusterRecord(**{**x.__dict__, "nodes": (x.nodes[0], succ),
                                                 "retired": (old,), "mesh_version": 1,
                                                 "events": ((5, "decision", "replacing"),)}))
    got = store.get(CID)
    assert got.retired == (old,) and got.nodes[1] == succ and got.mesh_version == 1
    assert got.events == ((5, "decision", "replacing"),) and got.managed == {"budget": 40,
                                                                           "gave_up": None}
    # A record written before managed clusters existed reads with the defaults.
    d = _record().as_dict()
    for k in ("managed", "mesh_version", "retired", "events", "stop_requested"):
        d.pop(k)
    for n in d["nodes"]:
        for k in ("attempt", "state", "since", "end_reason", "spec", "committee", "quorum",
                  "mesh_key"):
            n.pop(k)
    back = ClusterRecord.from_dict(d)
    assert back.managed is None and back.retired == () and back.nodes[0].state == "running"
