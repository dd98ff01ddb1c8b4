"""A cluster node's peer list replaced while its node runs (a replaced peer: ``gpum cluster
create --managed``): the worker API takes a newer version that keeps this node's own entry and
changes another rank's, refuses an older or equal version (a replay), a change of its own
entry, and a list not signed by the job's user; and the running WireGuard device takes the
successor in place, so traffic to the replaced rank's address reaches the new node while this
node's device (its wireguard-go) keeps running.

Real parts as in ``test_mesh``: network namespaces for two providers' hosts and their
containers, wireguard-go and wg, the worker API over HTTP. Needs root.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
from fakes import FakeRuntime
from gpu_market.mesh import MeshKeyError, parse_peer_doc
from gpu_market.workload import sign_request
from gpum_worker.api import WorkerApi
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.mesh import Mesh, MeshStale
from gpum_worker.mesh_api import PeerJob
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from solders.keypair import Keypair
from test_mesh import (
    OTHER_USER,
    PORT_BASE,
    USER,
    PeerChainDouble,
    assigned,
    cluster,
    in_netns,
    netns_world,
    node_spec,
    pubkey,
    seed,
    settings,
    two_node_cluster,
)


def versioned(pubs: dict[int, dict[str, str]], version: int) -> bytes:
    return json.dumps({"version": version,
                       "peers": [{**p, "rank": r} for r, p in sorted(pubs.items())]},
                      sort_keys=True).encode()


def test_a_versioned_list_names_every_node_and_its_own_entry_is_its_job(tmp_path: Path) -> None:
    jobs = [os.urandom(32) for _ in range(2)]
    pubs = {r: Mesh(tmp_path / f"w{r}", settings(PORT_BASE + 17 + r, PORT_BASE + 17 + r),
                    seed(40 + r)).publication(jobs[r]) for r in range(2)}
    plist = parse_peer_doc(versioned(pubs, 3), job=jobs[0], rank=0, nodes=2)
    assert plist.version == 3 and [p.rank for p in plist.peers] == [1]
    assert plist.own is not None and plist.own.job == jobs[0]

    def refused(body: Any) -> str:
        try:
            parse_peer_doc(body, job=jobs[0], rank=0, nodes=2)
        except MeshKeyError as e:
            return str(e)
        raise AssertionError("accepted")

    assert refused(versioned({1: pubs[1]}, 1)) == (
        "a peer list with a version names every node, this one included (2 entries, not 1)")
    assert refused(versioned({0: pubs[1], 1: pubs[0]}, 1)).startswith(
        "the peer list's entry of rank 0, this node, names job ")
    for bad in (-1, 2**53, True, "1"):
        assert "is not an integer 0..9007199254740991" in refused(
            json.dumps({"version": bad, "peers": []}))
    assert refused(json.dumps({"version": 1, "peers": [], "x": 1})).startswith(
        'send {"version": N, "peers": [...]}')


def test_the_worker_takes_a_newer_list_for_a_replaced_rank_and_refuses_the_rest(
        tmp_path: Path, key: WorkerKey) -> None:
    spec0 = node_spec(0, 3)
    jobs = [os.urandom(32) for _ in range(3)]
    successor = os.urandom(32)
    j0 = assigned(jobs[0], spec0)
    store = WorkloadStore(tmp_path / "w.sqlite")
    manager = WorkloadManager(FakeRuntime(), store, key.seed, background_starts=False)
    manager.reconcile({j0.job: (j0, ())})
    manager.mesh = Mesh(tmp_path / "state", settings(), key.seed)
    manager.deliver(j0, spec0)
    chain = PeerChainDouble()
    api = WorkerApi(manager, "127.0.0.1:0", worker=key.pubkey_b58, peer_chain=chain)
    api.start()
    http = httpx.Client(base_url=api.url, timeout=10)

    def post(body: bytes, signer: Keypair = USER) -> httpx.Response:
        return http.post(f"/v1/jobs/{j0.job_b58}/mesh", content=body, headers=sign_request(
            signer.to_bytes(), "mesh", j0.job, hashlib.sha256(body).digest(), int(time.time())))

    try:
        own = manager.mesh.publication(j0.job)
        peer = {r: Mesh(tmp_path / f"peer{r}", settings(PORT_BASE + 10 + r, PORT_BASE + 10 + r),
                        seed(50 + r)) for r in (1, 2)}
        pubs = {0: own, 1: peer[1].publication(jobs[1]), 2: peer[2].publication(jobs[2])}
        for r in (1, 2):
            chain.jobs[jobs[r]] = PeerJob("running", bytes(USER.pubkey()), pubkey(seed(50 + r)))
        first = versioned(pubs, 1)
        assert post(first).json() == {"status": "configured", "version": 1}
        # Rank 2 fails and is replaced on another provider: a new job, key and endpoint.
        moved = Mesh(tmp_path / "peer2b", settings(PORT_BASE + 15, PORT_BASE + 15), seed(60))
        pubs2 = {**pubs, 2: moved.publication(successor)}
        update = versioned(pubs2, 2)
        chain.jobs[successor] = PeerJob("open", bytes(USER.pubkey()), pubkey(seed(60)))
        reads = chain.reads
        # Signed by someone else than the job's user: refused before anything is read.
        r = post(update, OTHER_USER)
        assert r.status_code == 403 and chain.reads == reads
        # The new entry is checked on chain (only it: one read) and the list replaces the old.
        r = post(update)
        assert (r.status_code, r.json()) == (200, {"status": "updated", "version": 2,
                                                   "ranks": [2]})
        assert chain.reads == reads + 1
        kept = manager.mesh.accepted(j0.job)
        assert kept["version"] == 2 and kept["peers"][1]["job"] == b58encode(successor)
        assert post(update).json() == {"status": "configured", "version": 2}  # idempotent
        # A replay of the older list, or another list at the same version: never back.
        other1 = Mesh(tmp_path / "peer1b", settings(PORT_BASE + 13, PORT_BASE + 13), seed(51))
        for body in (first, versioned({**pubs2, 1: other1.publication(jobs[1])}, 2)):
            r = post(body)
            assert (r.status_code, r.json()["error"]) == (409, "mesh_stale"), r.json()
            assert r.json()["message"].startswith(
                "this node keeps version 2 of the cluster's peer list; version ")
        # This node's own entry never changes: another key or endpoint for rank 0 is refused.
        stranger = Mesh(tmp_path / "stranger", settings(PORT_BASE + 16, PORT_BASE + 16), key.seed)
        forged = {**pubs2, 0: stranger.publication(j0.job)}
        r = post(versioned(forged, 3))
        assert (r.status_code, r.json()["error"]) == (409, "own_entry_changed")
        assert "public_key, endpoint" in r.json()["message"]
        # A successor whose job is not the user's is refused by the chain check.
        other = os.urandom(32)
        chain.jobs[other] = PeerJob("open", bytes(OTHER_USER.pubkey()), pubkey(seed(61)))
        pubs3 = {**pubs2, 1: Mesh(tmp_path / "peer1c", settings(PORT_BASE + 14, PORT_BASE + 14),
                                  seed(61)).publication(other)}
        r = post(versioned(pubs3, 3))
        assert (r.status_code, r.json()["error"]) == (403, "peer_refused")
        assert manager.mesh.accepted(j0.job)["version"] == 2  # nothing kept from refusals
    finally:
        http.close()
        api.close()
        store.close()


def test_a_running_device_takes_the_replaced_peer_in_place(tmp_path: Path) -> None:
    with netns_world() as w, two_node_cluster(w, tmp_path) as c:
        w.serve(w.nodes[1], 7000, "node1")
        assert w.connect(w.nodes[0], c.address(1), 7000) == "node1:hi"
        device = c.meshes[0].device_pid(c.jobs[0])
        assert device is not None
        # Node 1 fails: its mesh ends. Its successor is another job on provider 1's host with
        # a new key and port, configured in a new container (the old one's namespace reused).
        in_netns(w.hosts[1], lambda: c.meshes[1].forget(c.jobs[1]))
        assert w.connect(w.nodes[0], c.address(1), 7000, timeout_s=1.0).startswith("FAIL")
        successor = os.urandom(32)
        new = Mesh(tmp_path / "successor", settings(PORT_BASE + 18, PORT_BASE + 19,
                                                    host=w.public[1]), seed(70))
        pubs = [in_netns(w.hosts[0], lambda: c.meshes[0].publication(c.jobs[0])),
                in_netns(w.hosts[1], lambda: new.publication(successor))]
        for rank, (mesh, job) in enumerate(((c.meshes[0], c.jobs[0]), (new, successor))):
            plist = parse_peer_doc(versioned({0: pubs[0], 1: pubs[1]}, 1), job=job, rank=rank,
                                   nodes=2)
            changed = in_netns(w.hosts[rank], lambda m=mesh, j=job, r=rank, p=plist:
                               m.accept(j, cluster(r), p.peers, p.version))
            assert changed == [1 - rank]
        try:
            in_netns(w.hosts[1], lambda: new.configure(successor, w.pids[w.nodes[1]]))
            # Node 0's device was changed, not made again, and reaches the successor.
            assert c.meshes[0].device_pid(c.jobs[0]) == device
            peers = in_netns(
                w.hosts[0], lambda: c.meshes[0].tools.run(
                    ["wg", "show", f"gw{c.jobs[0][:4].hex()}", "peers"]).stdout.decode().split())
            assert peers == [pubs[1]["public_key"]]
            assert w.connect(w.nodes[0], c.address(1), 7000, timeout_s=5.0) == "node1:hi"
            shakes = in_netns(w.hosts[0], lambda: c.meshes[0].handshakes(c.jobs[0]))
            assert shakes == [{"rank": 1, "latest_handshake": shakes[0]["latest_handshake"]}]
            assert shakes[0]["latest_handshake"] > 0
            # A replay of the first list (version 0) is refused and changes nothing.
            try:
                c.meshes[0].accept(c.jobs[0], cluster(0),
                                   parse_peer_doc(versioned({0: pubs[0], 1: pubs[1]}, 0),
                                                  job=c.jobs[0], rank=0, nodes=2).peers, 0)
                raise AssertionError("a stale list was accepted")
            except MeshStale:
                pass
            assert c.meshes[0].accepted(c.jobs[0])["version"] == 1
        finally:
            in_netns(w.hosts[1], lambda: new.forget(successor))
