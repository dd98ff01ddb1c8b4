"""A cluster's creation against a fake world (gpu_market.cluster.prepare/launch and
gpu_market.cluster_gang): every check before money moves, one job per rank, the peer lists,
and the gang limit releasing every job (Open ones refunded in full)."""

from __future__ import annotations

import base64
from dataclasses import replace
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.cluster import ClusterError, ClusterRequest, launch, prepare
from gpu_market.cluster_mesh import NOT_REPORTED, MeshError, MeshKey
from gpu_market.cluster_store import ClusterStore
from gpu_market.cluster_templates import load_cluster_template
from gpu_market.cluster_world import Probe
from gpu_market.deployment import Hooks
from gpu_market.errors import GpuMarketError
from gpu_market.workload_api import WorkerApiError
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_cluster_plan import offer

CID = "0123456789abcdef"
PRICE = 100


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.01)


class FakeWorld:
    """The chain, the wallet and the workers of a test. ``behaviour[provider]``: "good",
    "late" (accepts only once its mesh is configured), "no_key" (late, and never publishes a
    mesh key),
    "silent" (its worker answers 503 to everything), "refuse" (refuses the workload: 400),
    "same_key" (publishes node 0's key), "unreachable" (its UDP endpoint drops everything: no
    handshake with it ever), "old" (its worker reports no handshakes), "done" (its container
    exits 0 at once, and its mesh with it), "crashed" (its container runs, then exits 3)."""

    url = "http://fake-chain"

    def __init__(self, offers: list[Any], behaviour: dict[Pubkey, str], balance: int) -> None:
        self.user, self.market_key, self.program_id = Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()
        self.mint = Pubkey.new_unique()
        self._offers, self.behaviour, self.held = offers, behaviour, balance
        self.providers = {o.provider: SimpleNamespace(status="active", worker_key=o.worker_key,
                                                      endpoint=f"http://{o.provider}", address=o.provider)
                          for o in offers}  # fmt: skip
        self.by_endpoint = {p.endpoint: a for a, p in self.providers.items()}
        self.jobs: dict[Pubkey, SimpleNamespace] = {}
        self.calls: list[str] = []
        self.peers: dict[Pubkey, dict] = {}
        self.crashed: dict[Pubkey, bool] = {}

    # chain
    def market(self):
        self.calls.append("market")
        params = SimpleNamespace(window_seconds=2, min_quorum=1)
        return SimpleNamespace(payment_mint=self.mint, params=params, params_effective_at=0,
                               pending_params=params)  # fmt: skip

    def chain_time(self) -> int:
        return 1_700_000_000

    def decimals(self, mint: Pubkey) -> int:
        return 6

    def offers(self):
        return list(self._offers)

    used: frozenset[int] = frozenset()
    """The mesh subnets (X of 10.77.X.0/24) every worker says its nodes use."""

    def probe(self, offers, left):
        return {o.provider: Probe(True, "", 64, self.used) for o in offers}

    def provider(self, p):
        return self.providers.get(p)

    def balance(self):
        return Pubkey.new_unique(), self.held

    def default_committee(self, exclude):
        return [Pubkey.new_unique()]

    def job(self, j):
        return self.jobs.get(j)

    def create_job(self, job_id, provider, gpus, deposit, committee, quorum, max_price, workload_hash):
        self.calls.append("create")
        address = pda.job_pda(self.market_key, self.user, job_id, self.program_id)
        assert address not in self.jobs, "two jobs for one rank"
        self.held -= deposit
        self.jobs[address] = SimpleNamespace(status="open", deposited=deposit, provider=provider,
                                             workload_hash=workload_hash)  # fmt: skip
        return "sig"

    def cancel_job(self, j):
        job = self.jobs[j]
        if job.status != "open":
            raise GpuMarketError(6000, "NotOpen", "not open")
        job.status = "cancelled"
        self.held += job.deposited
        return "sig"

    def finish_job(self, j):
        self.jobs[j].status = "finishing"
        return "sig"

    # workers
    def _how(self, endpoint: str) -> str:
        return self.behaviour.get(self.by_endpoint[endpoint], "good")

    def deliver(self, endpoint, job, spec, timeout):
        how = self._how(endpoint)
        if how == "silent":
            raise WorkerApiError("busy", status=503)
        if how == "refuse":
            raise WorkerApiError("the worker refused: bad image", status=400)
        if how not in ("late", "no_key"):
            self.jobs[job].status = "running"
        return {"state": "pending"}

    def mesh_key(self, endpoint, job, workload_hash, worker_key, timeout, who):
        how = self._how(endpoint)
        if how == "no_key":
            raise MeshError(f"{who} answered HTTP 503: no key yet", retry=True, status=503)
        key = bytes(next(iter(self.jobs))) if how == "same_key" else bytes(job)  # node 0's
        return MeshKey(job, base64.b64encode(key).decode(), "203.0.113.1:51820", worker_key, "sig")

    def post_peers(self, endpoint, job, workload_hash, peers, timeout, who):
        self.peers[job] = peers
        if self._how(endpoint) == "late":
            self.jobs[job].status = "running"
        return {"status": "configured"}

    def mesh_handshakes(self, endpoint, job, workload_hash, timeout, who):
        how = self._how(endpoint)
        if how == "old":
            return NOT_REPORTED
        if how == "done" or (how == "crashed" and self.crashed.get(job)):
            return None
        out = {}
        for peer in self.peers[job]["peers"]:
            other = self.behaviour.get(self.jobs[Pubkey.from_string(peer["job"])].provider)
            out[peer["rank"]] = 0 if "unreachable" in (how, other) else 1_700_000_000
        return out

    def workload_status(self, endpoint, job, workload_hash, timeout):
        if job not in self.peers:
            return {"state": "pending", "reason": "waiting for the cluster's mesh"}
        if self._how(endpoint) == "done":
            return {"state": "exited", "exit_code": 0}
        if self._how(endpoint) == "crashed":  # runs once, then its container has exited
            if self.crashed.get(job):
                return {"state": "exited", "exit_code": 3}
            self.crashed[job] = True
        return {"state": "running", "ports": [{"host": "h", "host_port": 1, "port": 8080,
                                               "protocol": "tcp"}]}  # fmt: skip


def world_of(behaviours: list[str], balance: int = 10**9, free: int = 4) -> FakeWorld:
    offers = [replace(offer(PRICE + i, free=free), worker_key=Keypair().pubkey())
              for i in range(len(behaviours))]  # real keys: secrets are sealed to them
    return FakeWorld(offers, {o.provider: b for o, b in zip(offers, behaviours)}, balance)


def request(nodes: int = 2, **kw: Any) -> ClusterRequest:
    base = {"model": "h100", "gpus": 4, "nodes": nodes, "seconds": Fraction(3600),
            "image": "localhost/busybox:1", "command": ("sh", "-c", "env")}
    return ClusterRequest(**{**base, **kw})


def run(world: FakeWorld, req: ClusterRequest, timeout: float = 60) -> tuple[Any, Any, Clock]:
    clock = Clock()
    hooks = Hooks(sleep=lambda s: clock.sleep(s), monotonic=clock.monotonic)
    deadline = clock.t + timeout
    store = ClusterStore()
    prepared = prepare(world, req, hooks=hooks, deadline=deadline, cluster_id=CID, store=store)
    return prepared, (lambda: launch(world, prepared, hooks=hooks, deadline=deadline, store=store)), clock


def test_every_node_is_created_joined_and_started():
    w = world_of(["good", "good", "good"], free=4)
    prepared, go, _ = run(w, request(nodes=3))
    statuses = go()
    assert [s["state"] for s in statuses] == ["running"] * 3
    assert w.calls.count("create") == 3 and len(w.jobs) == 3
    for n in prepared.nodes:
        peers = w.peers[n.job]["peers"]
        assert sorted(p["rank"] for p in peers) == sorted({0, 1, 2} - {n.rank})
        assert all(p["job"] != str(n.job) for p in peers)
        assert n.spec.cluster.rank == n.rank and n.spec.cluster.id == CID
        assert n.spec.cluster.nodes == 3 and n.spec.cluster.gpus_per_node == 4
        assert w.jobs[n.job].workload_hash == n.workload_hash
    record = ClusterStore().find(CID, w.url)
    assert record.state == "running" and [x.job for x in record.nodes] == [str(n.job) for n in prepared.nodes]
    assert prepared.summary()["deposit"] == "4.3632"  # 100+101+102 per GPU-s, 4 GPUs, 1 h


def test_a_retried_create_never_makes_a_second_job_for_a_rank():
    w = world_of(["good", "good"])
    prepared, go, _ = run(w, request())
    first = prepared.nodes[0]
    w.jobs[first.job] = SimpleNamespace(status="open", deposited=first.deposit,
                                        provider=first.provider, workload_hash=first.workload_hash)
    go()
    assert w.calls.count("create") == 1  # rank 0's job was already there


def test_a_node_that_never_publishes_its_key_releases_every_job_with_a_full_refund():
    w = world_of(["late", "no_key"])
    before = w.held
    _, go, clock = run(w, request(), timeout=30)
    with pytest.raises(ClusterError) as e:
        go()
    text = str(e.value)
    assert "node 1 (job" in text and "collecting the mesh keys" in text
    assert "within the cluster's start limit" in text and "no key yet" in text
    assert [j.status for j in w.jobs.values()] == ["cancelled", "cancelled"]
    assert w.held == before  # every deposit back
    assert clock.t >= 1030
    assert ClusterStore().find(CID, w.url).state == "failed"
    assert "refunded in full" in text


def test_running_nodes_are_finished_when_the_gang_fails():
    w = world_of(["good", "no_key"])
    _, go, _ = run(w, request(), timeout=20)
    with pytest.raises(ClusterError, match=r"node 1 .*did not get through 'collecting the mesh "
                                           r"keys'.*finished \(billing stopped\).*gpum cluster "
                                           r"down"):  # fmt: skip
        go()
    assert [j.status for j in w.jobs.values()] == ["finishing", "cancelled"]


def test_a_worker_that_never_takes_the_workload_leaves_its_job_open_and_refunded():
    w = world_of(["good", "silent"])
    _, go, _ = run(w, request(), timeout=20)
    with pytest.raises(ClusterError, match=r"node 1 .*'delivering the workloads'.*busy"):
        go()
    assert [j.status for j in w.jobs.values()] == ["finishing", "cancelled"]


def test_a_definite_refusal_ends_the_gang_at_once():
    w = world_of(["good", "refuse"])
    _, go, clock = run(w, request(), timeout=600)
    with pytest.raises(ClusterError, match=r"node 1 .*refused its workload: the worker refused"):
        go()
    assert clock.t < 1010


@pytest.mark.parametrize(("behaviours", "reporter", "peer"), [
    (["good", "unreachable"], 0, 1),  # two nodes: either end may be at fault
    (["good", "unreachable", "good"], 0, 1),  # three: the one every other node misses
    (["unreachable", "good", "good"], 1, 0),
])  # fmt: skip
def test_a_udp_endpoint_nobody_reaches_fails_the_gang_naming_node_and_endpoint(
        behaviours, reporter, peer):  # fmt: skip
    w = world_of(behaviours)
    before = w.held
    prepared, go, clock = run(w, request(nodes=len(behaviours)), timeout=600)
    with pytest.raises(ClusterError) as e:
        go()
    n, p = prepared.nodes[reporter], prepared.nodes[peer]
    assert str(e.value).startswith(
        f"cluster {prepared.name} did not start: node {reporter} (job {n.job} on provider "
        f"{n.provider}) had no WireGuard handshake with node {peer} (provider {p.provider}) at "
        "203.0.113.1:51820 within 20 s: UDP between them does not get through")
    assert 1020 <= clock.t < 1030  # the handshake limit, not the cluster's 600 s
    assert all(j.status == "finishing" for j in w.jobs.values())  # billing stopped at once
    assert w.held == before - sum(j.deposited for j in w.jobs.values())  # closed by `down`


def test_a_container_that_fails_while_the_mesh_completes_is_named_as_such():
    w = world_of(["good", "crashed"])
    _, go, clock = run(w, request(), timeout=600)
    with pytest.raises(ClusterError, match=r"node 1 \(job .*\) ran its container, which ended "
                                           r"\(exited, exit code 3\) before the mesh was "
                                           r"complete"):  # fmt: skip
        go()
    assert clock.t < 1010


def test_workers_that_report_no_handshakes_and_nodes_already_done_count_as_joined():
    w = world_of(["old", "done", "good"])
    _, go, clock = run(w, request(nodes=3))
    statuses = go()
    assert [s["state"] for s in statuses] == ["running", "exited", "running"]
    assert clock.t < 1010


def test_a_new_cluster_takes_a_subnet_its_nodes_hosts_do_not_use():
    w = world_of(["good", "good"])
    w.used = frozenset(range(256)) - {0x42}
    clock = Clock()
    hooks = Hooks(sleep=clock.sleep, monotonic=clock.monotonic)
    prepared = prepare(w, request(), hooks=hooks, deadline=clock.t + 60, store=ClusterStore())
    assert prepared.cluster_id.startswith("42")
    assert {n.spec.cluster.subnet for n in prepared.nodes} == {"10.77.66.0/24"}
    w.used = frozenset(range(256))  # none left: any subnet (each mesh has its own namespace)
    assert len(prepare(w, request(), hooks=hooks, deadline=clock.t + 60,
                       store=ClusterStore()).cluster_id) == 16


def test_two_nodes_with_one_mesh_key_are_refused():
    w = world_of(["good", "same_key"])
    _, go, _ = run(w, request())
    with pytest.raises(ClusterError, match="published the same mesh key as node 0"):
        go()


def test_an_interrupt_releases_every_job():
    w = world_of(["late", "no_key"])
    _, go, clock = run(w, request())

    def interrupt(s: float) -> None:
        raise KeyboardInterrupt

    clock.sleep = interrupt  # type: ignore[method-assign]
    with pytest.raises(ClusterError, match=r"interrupted; every node .* cancelled"):
        go()
    assert [j.status for j in w.jobs.values()] == ["cancelled", "cancelled"]


def test_a_balance_short_of_every_deposit_is_refused_before_any_money_moves():
    w = world_of(["good", "good"], balance=PRICE * 4 * 3600 + 1)
    with pytest.raises(ClusterError, match=r"the 2 nodes' deposits need .* \(it covers 1 of them\)"):
        run(w, request())
    assert "create" not in w.calls and w.jobs == {}


@pytest.mark.parametrize("nodes", [0, 1, 65, -3])
def test_absurd_sizes_are_refused_before_reading_the_chain(nodes: int):
    w = world_of(["good"])
    with pytest.raises(ClusterError, match=r"a cluster has 2\.\.64 nodes"):
        run(w, request(nodes=nodes))
    assert w.calls == []


def test_more_nodes_than_the_offers_hold_is_refused():
    w = world_of(["good", "good"], free=4)
    with pytest.raises(ClusterError, match=r"only 2 node\(s\) of 4 GPU\(s\) fit.*nothing was sent"):
        run(w, request(nodes=3))


def test_a_contract_variable_in_env_and_a_taken_name_are_refused_before_money():
    w = world_of(["good", "good"])
    with pytest.raises(ClusterError, match="NODE_RANK is set by the cluster's environment contract"):
        run(w, request(env={"NODE_RANK": "7"}))
    _, go, _ = run(w, request(name="train"))
    go()
    with pytest.raises(ClusterError, match="cluster name 'train' is taken"):
        run(world_of(["good", "good"]), request(name="train"))
    assert w.calls.count("create") == 2


def test_templates_give_each_rank_its_line_and_node_0_the_published_ports():
    w = world_of(["good", "good"])
    prepared, _, _ = run(w, request(template=load_cluster_template("ray"), image=None,
                                    command=("python3", "d.py"), ports=("9000",)))  # fmt: skip
    head, worker = (n.spec for n in prepared.nodes)
    assert head.image == worker.image == "docker.io/rayproject/ray:latest-gpu"
    assert "ray start --head" in head.command[2] and "--block" in worker.command[2]
    assert [str(p) for p in head.ports] == ["8265/tcp", "9000/tcp"]
    assert [str(p) for p in worker.ports] == ["9000/tcp"]
    assert head.shm_size_mib == 8192
    # one Ray token per cluster, sealed to each node's worker; the user's --secret would win
    assert [n for n, _ in head.secret_env] == [n for n, _ in worker.secret_env] == ["RAY_AUTH_TOKEN"]
    t = load_cluster_template("torchrun")
    with pytest.raises(ClusterError, match="give it after --"):
        run(w, request(template=t, command=()))
    prepared, _, _ = run(w, request(template=t, command=("train.py",)))
    assert all(n.spec.finish_on_exit for n in prepared.nodes)
    assert all(n.spec.secret_env == () for n in prepared.nodes)


@pytest.mark.parametrize(("args", "message"), [
    (["--nodes", "0"], "'--nodes': 0: a cluster has 2..64 nodes"),
    (["--nodes", "1"], "'--nodes': 1: a cluster has 2..64 nodes (for one node, use `gpum run`)"),
    (["--nodes", "100000"], "a cluster has 2..64 nodes"),
    (["--nodes", "2", "--port", "99999"], "'--port'"),
    (["--nodes", "2", "--template", "slurm"], "no cluster template named 'slurm'"),
    (["--nodes", "2", "--env", "NOEQUALS"], "is not NAME=VALUE"),
])  # fmt: skip
def test_the_cli_refuses_bad_input_before_reading_the_chain(args, message, keyfile, capsys):
    from gpu_market.cli import main

    code = main(["cluster", "create", "--url", "http://127.0.0.1:9", "--keypair", keyfile,
                 "--market", str(Pubkey.new_unique()), "--gpu", "H100:1", "--hours", "1",
                 "--image", "x", *args])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.startswith("error: ")


def test_a_price_cap_below_every_offer_is_named_as_such():
    w = world_of(["good", "good"])
    with pytest.raises(ClusterError, match=r"costs 0.36 per GPU-hour, above your max_price"):
        run(w, request(max_price="0.1"))
    assert "create" not in w.calls


def test_the_record_finds_clusters_by_name_or_id_and_frees_a_name_once_down():
    from gpu_market.cluster_store import StoreError

    w = world_of(["good", "good"])
    _, go, _ = run(w, request(name="pair"))
    go()
    store = ClusterStore()
    assert store.find("pair", w.url).id == CID == store.find(CID[:6], w.url).id
    with pytest.raises(StoreError, match="no cluster named 'pair' on http://other"):
        store.find("pair", "http://other")
    with pytest.raises(StoreError, match="cluster name 'pair' is taken by cluster"):
        store.check_name_free("pair", w.url)
    store.update(CID, state="down")
    store.check_name_free("pair", w.url)
    with pytest.raises(StoreError, match="cluster name '-x' is not valid"):
        store.check_name_free("-x", w.url)


def test_status_names_the_node_that_is_not_running(monkeypatch):
    from gpu_market import workload_api
    from gpu_market.cluster import Cluster
    from solders.keypair import Keypair

    w = world_of(["good", "good"])
    _, go, _ = run(w, request(name="pair"))
    statuses = go()
    record = ClusterStore().find("pair", w.url)
    jobs = [Pubkey.from_string(n.job) for n in record.nodes]
    states = {jobs[0]: "running", jobs[1]: "exited"}
    monkeypatch.setattr(workload_api, "workload_status", lambda endpoint, job, h, kp, timeout: {
        "state": states[Pubkey.from_bytes(job)], "error": "exit code 3",
        "ports": [{"host": "127.0.0.1", "host_port": 4000, "port": 8080, "protocol": "tcp"}]})
    client = SimpleNamespace(fetch_jobs=lambda keys: [w.jobs[k] for k in keys])
    c = Cluster(record, client, Keypair(), statuses)
    assert c.endpoint == "h:1" and [n.rank for n in c.nodes] == [0, 1]
    s = c.status()
    assert s["state"] == "degraded" and s["endpoint"] == "127.0.0.1:4000"
    assert [n["problem"] for n in s["nodes"]] == [None, "its container is exited: exit code 3"]
    for j in w.jobs.values():
        j.status = "finishing"
    assert Cluster(record, client, Keypair()).status()["state"] == "ended"
