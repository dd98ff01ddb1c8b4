"""Cluster nodes' private network: the signed mesh key and peer list (``gpu_market.mesh``),
WireGuard in a container's network namespace (``gpum_worker.mesh``), the worker API's mesh
endpoints (``mesh_api``) and the gang hold (``workloads``).

Real parts: network namespaces joined by veth pairs and bridges (two providers and the
internet between them), wireguard-go and wg, nftables, the worker API over HTTP, and podman
with runc for the containers. Needs root, like the other real-container tests. Names are
unique per run and everything made is removed afterwards, also when a test fails.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fakes import FakeRuntime
from gpu_market import cluster_mesh
from gpu_market.cluster_spec import ClusterSpec, contract_env
from gpu_market.mesh import (
    MeshKeyError,
    check_udp_endpoint,
    mesh_key_digest,
    parse_peer_list,
)
from gpu_market.receipt import private_key_from_seed, public_key_bytes
from gpu_market.workload import WorkloadSpec, sign_request, spec_hash
from gpum_worker.api import WorkerApi
from gpum_worker.config import resolve
from gpum_worker.errors import ConfigError
from gpum_worker.jobs import AssignedJob
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.mesh import (
    WAITING_FOR_MESH,
    Mesh,
    MeshError,
    MeshSettings,
    _udp_free,
    interface_name,
    mesh_filter,
)
from gpum_worker.mesh_api import ChainPeers, ChainUnavailable, PeerJob
from gpum_worker.runtime import container_name
from gpum_worker.workload_end import PROVIDER_LABEL
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from runtimetestkit import real_podman, wait_for
from solders.keypair import Keypair
from solders.pubkey import Pubkey

T = TypeVar("T")
USER = Keypair()
OTHER_USER = Keypair()
CLUSTER_ID = "5a" + os.urandom(7).hex()
SUBNET_PREFIX = f"10.77.{0x5a}"
WG_RUN = Path("/var/run/wireguard")
PORT_BASE = 52000 + (os.getpid() % 200) * 20
"""Each test run takes its own UDP ports (20 of them), away from the default range."""


def _kernel_wireguard() -> bool:
    probe = f"gwt{os.getpid() % 100000}"
    made = subprocess.run(["ip", "link", "add", "dev", probe, "type", "wireguard"],
                          capture_output=True, check=False).returncode == 0
    if made:
        subprocess.run(["ip", "link", "del", "dev", probe], capture_output=True, check=False)
    return made


KERNEL_WG = _kernel_wireguard()
BACKENDS = ["userspace"] + (["kernel"] if KERNEL_WG else [])
"""wireguard-go always; the kernel's WireGuard too on a host that has it."""


def settings(lo: int = PORT_BASE, hi: int = PORT_BASE + 9, host: str = "127.0.0.1",
             wireguard: str = "userspace") -> MeshSettings:
    return MeshSettings(enabled=True, udp_ports=(lo, hi), public_host=host, wireguard=wireguard)


def cluster(rank: int, nodes: int = 2) -> ClusterSpec:
    return ClusterSpec(id=CLUSTER_ID, rank=rank, nodes=nodes, gpus_per_node=1)


def seed(n: int) -> bytes:
    return bytes([n]) * 32


def pubkey(seed_: bytes) -> bytes:
    return public_key_bytes(private_key_from_seed(seed_))


def peer_body(pubs: dict[int, dict[str, str]]) -> bytes:
    return json.dumps({"peers": [{**p, "rank": r} for r, p in sorted(pubs.items())]},
                      sort_keys=True).encode()


def sh(*argv: str, check: bool = True, timeout: float = 30, stdin: bytes | None = None
       ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, input=None if stdin is None else stdin.decode(),
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
    return proc


# ----------------------------------------------------------------------------- pure parts


def test_mesh_key_digest_is_the_documented_bytes() -> None:
    job, key, endpoint = bytes(range(32)), bytes(range(32, 64)), "198.51.100.7:51820"
    expected = hashlib.sha256(b"gpu-market/mesh-key/v1" + job + key
                              + struct.pack("<H", len(endpoint)) + endpoint.encode()).digest()
    assert mesh_key_digest(job, key, endpoint) == expected
    with pytest.raises(MeshKeyError, match="32 bytes"):
        mesh_key_digest(job[:31], key, endpoint)
    with pytest.raises(MeshKeyError, match="at most 255"):
        mesh_key_digest(job, key, "a" * 250 + ":51820")


@pytest.mark.parametrize("endpoint, problem", [
    ("0.0.0.0:51820", "unspecified"),
    ("[::]:51820", "unspecified"),
    ("198.51.100.7", "port 1..65535"),
    ("198.51.100.7:0", "port 1..65535"),
    ("198.51.100.7:051820", "port 1..65535"),
    ("2001:db8::1:51820", "IPv6 address in brackets"),
    ("[198.51.100.7]:51820", "IPv6 address in brackets"),
    ("bad host:51820", "neither an address nor a DNS name"),
])
def test_udp_endpoint_refusals(endpoint: str, problem: str) -> None:
    with pytest.raises(MeshKeyError, match=problem):
        check_udp_endpoint(endpoint)


def test_publication_is_signed_and_the_private_key_stays_in_a_0600_file(tmp_path: Path) -> None:
    mesh = Mesh(tmp_path, settings(), seed(7))
    job = os.urandom(32)
    pub = mesh.publication(job)
    assert set(pub) == {"job", "public_key", "endpoint", "worker_key", "signature"}
    assert pub["endpoint"] == f"127.0.0.1:{PORT_BASE}"
    # The user side's verification (cluster_mesh) accepts it for this job and worker key only.
    key = cluster_mesh.parse_mesh_key(pub, Pubkey.from_bytes(job),
                                      Pubkey.from_bytes(pubkey(seed(7))), "node 0")
    assert key.public_key == pub["public_key"]
    with pytest.raises(cluster_mesh.MeshError, match="not the provider's current worker key"):
        cluster_mesh.parse_mesh_key(pub, Pubkey.from_bytes(job),
                                    Pubkey.from_bytes(pubkey(seed(8))), "node 0")
    private = tmp_path / "mesh" / b58encode(job) / "private.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    # WireGuard's own tool derives the same public key from the file.
    derived = sh("wg", "pubkey", stdin=private.read_bytes()).stdout.strip()
    assert derived == pub["public_key"]
    assert private.read_text().strip() not in json.dumps(pub)
    # The same key and port on the next ask (and after a worker restart).
    assert Mesh(tmp_path, settings(), seed(7)).publication(job) == pub


def test_each_node_gets_its_own_port_until_its_job_ends(tmp_path: Path) -> None:
    mesh = Mesh(tmp_path, settings(PORT_BASE + 10, PORT_BASE + 12), seed(1))
    jobs = [os.urandom(32) for _ in range(4)]
    import socket
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind(("0.0.0.0", PORT_BASE + 11))  # another program holds this one
    try:
        ports = [int(mesh.publication(j)["endpoint"].rsplit(":", 1)[1]) for j in jobs[:2]]
        assert ports == [PORT_BASE + 10, PORT_BASE + 12]
        with pytest.raises(MeshError, match=rf"no free UDP port left in {PORT_BASE + 10}-"
                                            rf"{PORT_BASE + 12} for another cluster node"):
            mesh.publication(jobs[2])
        assert mesh.health() == {"udp_port": PORT_BASE + 10,
                                 "udp_ports": [PORT_BASE + 10, PORT_BASE + 12],
                                 "free_ports": 0, "host": "127.0.0.1", "subnets_used": []}
    finally:
        squatter.close()
    mesh.reconcile(running=set(), live={jobs[1]})  # job 0 ended: its port is free again
    assert not (tmp_path / "mesh" / b58encode(jobs[0])).exists()
    assert mesh.publication(jobs[3])["endpoint"].endswith(f":{PORT_BASE + 10}")


def _pubs(n: int, tmp_path: Path, nodes: int = 3) -> tuple[list[bytes], dict[int, dict]]:
    """``nodes`` jobs and the publications of all but rank 0 (each by its own worker)."""
    jobs = [os.urandom(32) for _ in range(nodes)]
    pubs = {r: Mesh(tmp_path / f"w{r}", settings(PORT_BASE + 13 + r, PORT_BASE + 13 + r),
                    seed(10 + r)).publication(jobs[r]) for r in range(1, nodes)}
    return jobs, pubs


def test_peer_list_refusals_are_exact(tmp_path: Path) -> None:
    jobs, pubs = _pubs(3, tmp_path)

    def refused(body: Any, nodes: int = 3) -> str:
        with pytest.raises(MeshKeyError) as e:
            parse_peer_list(body if isinstance(body, bytes) else json.dumps(body),
                            job=jobs[0], rank=0, nodes=nodes)
        return str(e.value)

    peers = parse_peer_list(peer_body(pubs), job=jobs[0], rank=0, nodes=3)
    assert [p.rank for p in peers] == [1, 2] and peers[0].job == jobs[1]
    good = json.loads(peer_body(pubs))["peers"]
    tampered = [{**good[0], "endpoint": "203.0.113.9:51820"}, good[1]]
    assert refused({"peers": tampered}) == (
        f"the peer of rank 1: the signature does not verify with worker_key "
        f"{b58encode(pubkey(seed(11)))} for job {b58encode(jobs[1])}, its public key and "
        "endpoint (ask its worker for its mesh key again)")
    other_signer = [{**good[0], "worker_key": b58encode(pubkey(seed(99)))}, good[1]]
    assert refused({"peers": other_signer}).startswith(
        f"the peer of rank 1: the signature does not verify with worker_key "
        f"{b58encode(pubkey(seed(99)))}")
    assert refused({"peers": [good[0], {**good[1], "rank": 1}]}) == \
        "the peer list names rank 1 twice"
    assert refused({"peers": [good[0]]}) == \
        "the peer list lacks rank 2 (every node but this one, 2 entries)"
    assert refused({"peers": [{**good[0], "rank": 0}, good[1]]}) == \
        "the peer list names rank 0, which is this node itself"
    assert refused({"peers": [good[0], {**good[1], "rank": 3}]}) == \
        "the peer list names rank 3; this cluster's ranks are 0..2"
    assert refused({"peers": good + [good[0], good[1]]}) == \
        "the peer list has 4 entries; this cluster has 3 nodes"
    assert refused({"peers": good + [good[0]]}) == "the peer list names rank 1 twice"
    assert refused({"peers": [good[0], {**good[1], "extra": 1}]}) == (
        "peer entry 1 must be an object with exactly the keys rank, job, public_key, "
        "endpoint, worker_key, signature")
    assert refused({"peers": [{**good[0], "public_key": "AAAA"}, good[1]]}) == \
        "the peer of rank 1: public_key 'AAAA' is not 32 bytes of standard base64"
    assert refused(b"[1, 2") == "the peer list is not JSON"
    own = Mesh(tmp_path / "w0", settings(PORT_BASE + 19, PORT_BASE + 19), seed(10))
    mine = {1: pubs[1], 2: own.publication(jobs[0])}
    assert refused(json.loads(peer_body(mine))) == \
        "the peer list names this node's own job as a peer"


def test_config_cluster_section() -> None:
    cfg = resolve({"cluster": {"enabled": True, "public_host": "203.0.113.7",
                               "udp_ports": "51000-51009", "wireguard": "userspace"}}, {}, {})
    assert cfg.cluster == MeshSettings(True, (51000, 51009), "203.0.113.7", "userspace")
    assert resolve({}, {}, {}).cluster == MeshSettings()
    for section, message in (
            ({"enabled": True}, "enabled needs public_host"),
            ({"enabled": True, "public_host": "0.0.0.0"}, "not an address peers can send to"),
            ({"udp_ports": "51899-51820"}, "need 1 <= first <= last <= 65535"),
            ({"udp_ports": "many"}, "must be a port range"),
            ({"wireguard": "fast"}, 'wireguard must be "auto", "kernel" or "userspace"'),
            ({"enabled": "yes"}, "enabled must be true or false"),
            ({"port": 1}, "[cluster] accepts only")):
        with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
            resolve({"cluster": section}, {}, {})


def test_the_filter_is_one_table_for_the_subnet() -> None:
    text = mesh_filter("10.77.90.0/24")
    assert 'iifname != { "gpum0", "lo" } ip daddr 10.77.90.0/24 drop' in text
    assert 'iifname != { "gpum0", "lo" } ip saddr 10.77.90.0/24 drop' in text
    assert 'iifname "gpum0" drop' in text and 'oifname "gpum0" drop' in text


# ----------------------------------------------------------------------------- namespaces

_LIBC = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def in_netns(ns: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a thread that entered network namespace ``ns`` (what it starts, binds and
    makes is there, as for a worker running on that "host")."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {ns}")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(5)
    try:
        c.sendall(sys.argv[2].encode() + b":" + c.recv(64))
    except OSError:
        pass
    c.close()
"""

CLIENT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    s.settimeout(float(sys.argv[3]))
    s.sendall(sys.argv[4].encode().decode("unicode_escape").encode())
    print(s.recv(64).decode().splitlines()[0])
except OSError as e:
    print("FAIL", type(e).__name__)
"""

SINK = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
n, t0 = 0, None
while True:
    d = c.recv(1 << 20)
    if t0 is None:
        t0 = time.monotonic()
    if not d:
        break
    n += len(d)
print(n, time.monotonic() - t0, flush=True)
"""

SOURCE = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
buf = b"x" * (1 << 20)
for _ in range(int(sys.argv[3])):
    s.sendall(buf)
s.close()
"""


@dataclass
class World:
    """Two providers' hosts and the internet between them, each host with a bridge for its
    containers (10.88.0.1/24, NAT to the internet like podman's), a container of a cluster
    node on each (10.88.0.2) and, on provider 0, a container of another job (10.88.0.3)."""

    sfx: str
    inet: str
    hosts: list[str]
    nodes: list[str]
    other: str
    public: list[str]
    pids: dict[str, int] = field(default_factory=dict)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def exec(self, ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", ns, *argv, check=check)

    def serve(self, ns: str, port: int, token: str) -> None:
        p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SERVER,
                              str(port), token], stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"

    def connect(self, ns: str, host: str, port: int, timeout_s: float = 2.0,
                send: str = "hi") -> str:
        """The first line the server at host:port answers ``send`` with, from namespace
        ``ns``, or "FAIL <why>"."""
        return self.exec(ns, sys.executable, "-c", CLIENT, host, str(port), str(timeout_s),
                         send).stdout.strip()

    def throughput(self, src: str, dst_ns: str, host: str, port: int, mib: int) -> float:
        """MiB/s of one TCP stream of ``mib`` MiB from namespace ``src`` to ``host:port``
        (a sink in ``dst_ns``)."""
        sink = subprocess.Popen(["ip", "netns", "exec", dst_ns, sys.executable, "-c", SINK,
                                 str(port)], stdout=subprocess.PIPE, text=True)
        self.procs.append(sink)
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        self.exec(src, sys.executable, "-c", SOURCE, host, str(port), str(mib))
        n, seconds = sink.stdout.readline().split()
        sink.wait(10)
        assert int(n) == mib << 20
        return mib / float(seconds)


@contextmanager
def netns_world() -> Iterator[World]:
    sfx = os.urandom(3).hex()
    w = World(sfx=sfx, inet=f"gmi{sfx}", hosts=[f"gmh0{sfx}", f"gmh1{sfx}"],
              nodes=[f"gmn0{sfx}", f"gmn1{sfx}"], other=f"gmx{sfx}",
              public=["198.51.100.1", "198.51.100.2"])
    made: list[str] = []
    try:
        for ns in (w.inet, *w.hosts, *w.nodes, w.other):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", w.inet, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", w.inet, "link", "set", "br0", "up")
        for i, host in enumerate(w.hosts):
            sh("ip", "-n", host, "link", "add", "wan", "type", "veth", "peer", "name",
               f"up{i}", "netns", w.inet)
            sh("ip", "-n", w.inet, "link", "set", f"up{i}", "master", "br0", "up")
            sh("ip", "-n", host, "addr", "add", f"{w.public[i]}/24", "dev", "wan")
            sh("ip", "-n", host, "link", "set", "wan", "up")
            sh("ip", "-n", host, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", host, "addr", "add", "10.88.0.1/24", "dev", "br0")
            sh("ip", "-n", host, "link", "set", "br0", "up")
            sh("ip", "netns", "exec", host, "nft", "-f", "-", stdin=(
                b"table ip nat { chain post { type nat hook postrouting priority 100; "
                b'oifname "wan" masquerade; }; }\n'))
            for j, ctr in enumerate([w.nodes[i]] + ([w.other] if i == 0 else [])):
                sh("ip", "-n", ctr, "link", "add", "eth0", "type", "veth", "peer", "name",
                   f"veth{j}", "netns", host)
                sh("ip", "-n", host, "link", "set", f"veth{j}", "master", "br0", "up")
                sh("ip", "-n", ctr, "addr", "add", f"10.88.0.{j + 2}/24", "dev", "eth0")
                sh("ip", "-n", ctr, "link", "set", "eth0", "up")
                sh("ip", "-n", ctr, "route", "add", "default", "via", "10.88.0.1")
                p = subprocess.Popen(["ip", "netns", "exec", ctr, "sleep", "3600"])
                w.procs.append(p)  # the container's "init": its pid names the namespace
                w.pids[ctr] = p.pid
        wait_for(lambda: all(_same_netns(pid, ns) for ns, pid in w.pids.items()), 5,
                 what="the containers' inits")
        yield w
    finally:
        for p in w.procs:
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
        for ns in made:
            sh("ip", "netns", "del", ns, check=False)


def _same_netns(pid: int, ns: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return False


@dataclass
class Cluster:
    world: World
    meshes: list[Mesh]
    jobs: list[bytes]

    def address(self, rank: int) -> str:
        return f"{SUBNET_PREFIX}.{rank + 1}"


@contextmanager
def two_node_cluster(w: World, tmp_path: Path, wireguard: str = "userspace",
                     kernel_probe: bool | None = None) -> Iterator[Cluster]:
    """A two-node cluster across the world's providers: each "worker" publishes in its host's
    namespace, accepts the other's key and configures its node's container.
    ``kernel_probe``: what the workers' probe for the kernel's WireGuard found (None: probe)."""
    jobs = [os.urandom(32), os.urandom(32)]
    meshes = [Mesh(tmp_path / f"provider{i}", settings(host=w.public[i], wireguard=wireguard),
                   seed(20 + i)) for i in range(2)]
    for m in meshes:
        m._kernel = kernel_probe
    c = Cluster(w, meshes, jobs)
    try:
        pubs = [in_netns(w.hosts[i], lambda i=i: meshes[i].publication(jobs[i]))
                for i in range(2)]
        for i in range(2):
            peers = parse_peer_list(peer_body({1 - i: pubs[1 - i]}), job=jobs[i], rank=i,
                                    nodes=2)
            assert meshes[i].accept(jobs[i], cluster(i), peers) == [1 - i]
            assert _same_netns(w.pids[w.nodes[i]], w.nodes[i])
            in_netns(w.hosts[i], lambda i=i: meshes[i].configure(jobs[i],
                                                                  w.pids[w.nodes[i]]))
        yield c
    finally:
        for i in range(2):
            in_netns(w.hosts[i], lambda i=i: meshes[i].forget(jobs[i]))


@pytest.fixture
def world() -> Iterator[World]:
    with netns_world() as w:
        yield w


@pytest.mark.parametrize("wireguard", BACKENDS)
def test_mesh_joins_two_providers_and_carries_only_the_cluster(world: World, tmp_path: Path,
                                                                wireguard: str) -> None:
    w = world
    with two_node_cluster(w, tmp_path, wireguard) as c:
        # TCP between the two nodes over gpum0, both ways.
        w.serve(w.nodes[1], 7000, "node1")
        w.serve(w.nodes[0], 7000, "node0")
        assert w.connect(w.nodes[0], c.address(1), 7000) == "node1:hi"
        assert w.connect(w.nodes[1], c.address(0), 7000) == "node0:hi"
        # Each worker reports the peer's latest handshake (what the user's side waits for).
        for i in range(2):
            shakes = in_netns(w.hosts[i], lambda i=i: c.meshes[i].handshakes(c.jobs[i]))
            assert [s["rank"] for s in shakes] == [1 - i] and shakes[0]["latest_handshake"] > 0
        link = w.exec(w.nodes[0], "ip", "-o", "addr", "show", "dev", "gpum0").stdout
        assert f"inet {c.address(0)}/24" in link and "inet6" not in link
        # The hosts never see the mesh: no interface, no route; only the UDP socket.
        for host in w.hosts:
            assert "gpum0" not in w.exec(host, "ip", "-o", "link").stdout
            assert SUBNET_PREFIX not in w.exec(host, "ip", "route").stdout
        # Another job's container on provider 0 cannot reach either node's mesh address...
        for rank in (0, 1):
            assert w.connect(w.other, c.address(rank), 7000).startswith("FAIL")
        # ... not even when it routes the subnet at node 0's bridge address (what raw
        # sockets allow it): the filter in node 0's namespace drops it.
        w.exec(w.other, "ip", "route", "add", f"{SUBNET_PREFIX}.0/24", "via", "10.88.0.2")
        for rank in (0, 1):
            assert w.connect(w.other, c.address(rank), 7000).startswith("FAIL")
        w.exec(w.nodes[0], "nft", "delete", "table", "inet", "gpum_mesh")
        assert w.connect(w.other, c.address(0), 7000) == "node0:hi"  # the filter did it
        sh("ip", "netns", "exec", w.nodes[0], "nft", "-f", "-",
           stdin=mesh_filter(f"{SUBNET_PREFIX}.0/24").encode())
        assert w.connect(w.other, c.address(0), 7000).startswith("FAIL")


@pytest.mark.parametrize("wireguard", BACKENDS)
def test_from_the_mesh_the_providers_host_is_unreachable(world: World, tmp_path: Path,
                                                         key: WorkerKey, wireguard: str) -> None:
    """Node 1's side turned hostile (its worker's WireGuard sends anything to node 0): the
    worker API on provider 0's host still cannot be reached through node 0."""
    w = world
    store = WorkloadStore(tmp_path / "api.sqlite")
    api = WorkerApi(WorkloadManager(None, store, key.seed), "0.0.0.0:0",
                    worker=key.pubkey_b58)
    in_netns(w.hosts[0], api.start)  # the worker API listens on provider 0's host
    port = api.address[1]
    try:
        with two_node_cluster(w, tmp_path, wireguard) as c:
            pub0 = c.meshes[0].publication(c.jobs[0])["public_key"]
            hostile = ["set", interface_name(c.jobs[1]), "peer", pub0, "allowed-ips",
                       f"{c.address(0)}/32,{w.public[0]}/32"]
            if wireguard == "kernel":  # its device is gpum0, in node 1's namespace
                w.exec(w.nodes[1], "wg", *hostile[:1], "gpum0", *hostile[2:])
            else:  # wireguard-go's control socket
                sh("wg", *hostile)
            w.exec(w.nodes[1], "ip", "route", "add", f"{w.public[0]}/32", "dev", "gpum0")
            # Provider 0 even routes the mesh back through node 0, so only node 0's
            # namespace stands between the mesh and the host.
            w.exec(w.hosts[0], "ip", "route", "add", f"{SUBNET_PREFIX}.0/24", "via",
                   "10.88.0.2")
            health = r"GET /v1/health HTTP/1.0\r\n\r\n"
            assert w.connect(w.nodes[1], w.public[0], port, send=health) == \
                "FAIL TimeoutError"
            w.exec(w.nodes[0], "nft", "delete", "table", "inet", "gpum_mesh")
            answer = w.connect(w.nodes[1], w.public[0], port, send=health)
            assert answer == "HTTP/1.1 200 OK", answer  # reached without it: the filter did
    finally:
        api.close()
        store.close()


@pytest.mark.parametrize("wireguard", BACKENDS)
def test_teardown_ends_the_device_and_frees_the_port(world: World, tmp_path: Path,
                                                     wireguard: str) -> None:
    w = world
    with two_node_cluster(w, tmp_path, wireguard) as c:
        mesh, job = c.meshes[0], c.jobs[0]
        pid = mesh.device_pid(job)
        sock = WG_RUN / f"{interface_name(job)}.sock"
        if wireguard == "userspace":
            assert pid is not None and _same_netns(pid, w.hosts[0])
            assert sock.exists()
        assert in_netns(w.hosts[0], lambda: _udp_free(PORT_BASE)) is False
        in_netns(w.hosts[0], lambda: mesh.teardown(job))
        assert pid is None or not os.path.exists(f"/proc/{pid}") or _zombie(pid)
        assert not sock.exists()
        assert "gpum0" not in w.exec(w.nodes[0], "ip", "-o", "link").stdout
        assert in_netns(w.hosts[0], lambda: _udp_free(PORT_BASE)) is True
        assert mesh.accepted(job) is not None  # the job still runs: key, port, peers kept
        # Configured again (a container started again), the mesh works again.
        in_netns(w.hosts[0], lambda: mesh.configure(job, w.pids[w.nodes[0]]))
        w.serve(w.nodes[1], 7001, "again")
        assert w.connect(w.nodes[0], c.address(1), 7001) == "again:hi"
        # A worker restarted meanwhile (no process handle) still ends it, then forgets.
        restarted = Mesh(tmp_path / "provider0", settings(host=w.public[0]), seed(20))
        pid = restarted.device_pid(job)
        assert (pid is not None) == (wireguard == "userspace")
        in_netns(w.hosts[0], lambda: restarted.reconcile(running=set(), live=set()))
        wait_for(lambda: pid is None or not os.path.exists(f"/proc/{pid}") or _zombie(pid), 5,
                 what="wireguard-go to stop")
        assert "gpum0" not in w.exec(w.nodes[0], "ip", "-o", "link").stdout
        assert in_netns(w.hosts[0], lambda: _udp_free(PORT_BASE)) is True
        assert not (tmp_path / "provider0" / "mesh" / b58encode(job)).exists()


def test_auto_takes_the_kernels_wireguard_or_else_wireguard_go(world: World,
                                                                tmp_path: Path) -> None:
    """The workers' probe said the kernel has WireGuard: where it has not (this host, unless
    it has), making the device fails and the worker goes on with wireguard-go."""
    w = world
    with two_node_cluster(w, tmp_path, "auto", kernel_probe=True) as c:
        for mesh, job in zip(c.meshes, c.jobs):
            backend = (mesh._recorded(job) or {}).get("backend")
            assert backend == ("kernel" if KERNEL_WG else "userspace")
            assert mesh.kernel_wireguard() is KERNEL_WG
        w.serve(w.nodes[1], 7004, "auto")
        assert w.connect(w.nodes[0], c.address(1), 7004) == "auto:hi"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


# ----------------------------------------------------------------------------- the API


class PeerChainDouble:
    """The chain as the test says it is (unit tests only)."""

    def __init__(self) -> None:
        self.jobs: dict[bytes, PeerJob] = {}
        self.reads = 0

    def peer_jobs(self, jobs: list[bytes]) -> dict[bytes, PeerJob | None]:
        self.reads += 1
        return {k: self.jobs.get(k) for k in jobs}


class SdkClientDouble:
    """``fetch_jobs`` / ``fetch_job`` / ``fetch_provider`` of the SDK client (unit tests
    only): ``jobs`` job -> (status, user, provider) or "invalid" (another kind of account),
    ``providers`` provider -> worker key; each provider read advances ``clock`` by ``cost``."""

    def __init__(self) -> None:
        self.jobs: dict[bytes, Any] = {}
        self.providers: dict[bytes, bytes] = {}
        self.now = 0.0
        self.cost = 0.0
        self.provider_reads = 0

    def _view(self, k: Any) -> Any:
        from types import SimpleNamespace

        from gpu_market.client import InvalidAccount

        v = self.jobs.get(bytes(k))
        if v == "invalid":
            raise InvalidAccount(f"{k} is a Provider account, not a Job")
        if v is None:
            return None
        status, user, provider = v
        return SimpleNamespace(status=SimpleNamespace(name=status), user=Pubkey.from_bytes(user),
                               provider=Pubkey.from_bytes(provider))

    def fetch_jobs(self, keys: list[Any]) -> list[Any]:
        return [self._view(k) for k in keys]

    def fetch_job(self, key: Any) -> Any:
        return self._view(key)

    def fetch_provider(self, key: Any) -> Any:
        from types import SimpleNamespace

        self.provider_reads += 1
        self.now += self.cost
        wk = self.providers.get(bytes(key))
        return None if wk is None else SimpleNamespace(worker_key=Pubkey.from_bytes(wk))


def test_chain_peers_reads_each_job_and_its_providers_current_key() -> None:
    sdk = SdkClientDouble()
    a, b, c, d, gone = (os.urandom(32) for _ in range(5))
    p1, p2 = os.urandom(32), os.urandom(32)
    user = bytes(USER.pubkey())
    sdk.jobs = {a: ("Running", user, p1), b: ("Open", user, p1), c: ("Finishing", user, p2)}
    sdk.providers = {p1: pubkey(seed(1))}
    chain = ChainPeers(sdk, deadline_s=5, clock=lambda: sdk.now)
    got = chain.peer_jobs([a, b, c, gone])
    assert got == {a: PeerJob("running", user, pubkey(seed(1))),
                   b: PeerJob("open", user, pubkey(seed(1))),
                   c: PeerJob("finishing", user, None), gone: None}
    assert sdk.provider_reads == 2  # one read per distinct provider
    sdk.jobs[d] = "invalid"  # an address that holds another kind of account
    assert chain.peer_jobs([a, d])[d] is None
    sdk.cost = 3.0  # each provider read takes 3 s: no third read starts after 5 s
    e = os.urandom(32)
    sdk.jobs[e] = ("Running", user, os.urandom(32))
    with pytest.raises(ChainUnavailable, match="reading the peers' providers took over 5 s"):
        chain.peer_jobs([a, c, e])
    assert sdk.provider_reads == 3 + 2  # two reads, then none after the deadline

    class Down(SdkClientDouble):
        def fetch_jobs(self, keys: list[Any]) -> list[Any]:
            raise ConnectionError("connection refused")

    with pytest.raises(ChainUnavailable, match="reading the peer jobs failed: connection "
                                               "refused"):
        ChainPeers(Down()).peer_jobs([a])


def node_spec(rank: int, nodes: int = 2, args: tuple[str, ...] = ("sleep", "600")
              ) -> WorkloadSpec:
    return WorkloadSpec(image="localhost/gpum-busybox:1", args=args,
                        cluster=cluster(rank, nodes))


def assigned(job: bytes, spec: WorkloadSpec | None, status: str = "running",
             user: Keypair = USER, provider: bytes = b"\x03" * 32) -> AssignedJob:
    return AssignedJob(job=job, market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=provider, gpu_count=1, status=status, started_at=1,
                       user=bytes(user.pubkey()),
                       workload_hash=spec_hash(spec) if spec else bytes(32))


def test_mesh_api_publishes_checks_and_keeps_one_peer_list(tmp_path: Path,
                                                           key: WorkerKey) -> None:
    spec0 = node_spec(0, 3)
    plain = WorkloadSpec(image="localhost/gpum-busybox:1")
    jobs = [os.urandom(32) for _ in range(4)]
    j0, jplain = assigned(jobs[0], spec0), assigned(jobs[3], plain)
    store = WorkloadStore(tmp_path / "w.sqlite")
    manager = WorkloadManager(FakeRuntime(), store, key.seed, background_starts=False)
    manager.reconcile({j0.job: (j0, ()), jplain.job: (jplain, ())})
    chain = PeerChainDouble()
    api = WorkerApi(manager, "127.0.0.1:0", worker=key.pubkey_b58, peer_chain=chain)
    api.start()
    http = httpx.Client(base_url=api.url, timeout=10)

    def get(j: AssignedJob, signer: Keypair = USER) -> httpx.Response:
        return http.get(f"/v1/jobs/{j.job_b58}/mesh", headers=sign_request(
            signer.to_bytes(), "mesh", j.job, j.workload_hash, int(time.time())))

    def post(j: AssignedJob, body: bytes, signed: bytes | None = None) -> httpx.Response:
        h = hashlib.sha256(body).digest() if signed is None else signed
        return http.post(f"/v1/jobs/{j.job_b58}/mesh", content=body, headers=sign_request(
            USER.to_bytes(), "mesh", j.job, h, int(time.time())))

    try:
        assert http.get("/v1/health").json()["cluster"] is None
        assert get(j0).json() == {"error": "cluster_disabled", "message": (
            "this worker serves no cluster nodes (set [cluster] enabled = true, public_host "
            "and udp_ports, open those UDP ports, and run the worker as root)")}
        manager.mesh = Mesh(tmp_path / "state", settings(), key.seed)
        assert http.get("/v1/health").json()["cluster"] == {
            "udp_port": PORT_BASE, "udp_ports": [PORT_BASE, PORT_BASE + 9],
            "free_ports": 10, "host": "127.0.0.1", "subnets_used": []}
        r = get(j0)
        assert r.status_code == 409 and r.json()["error"] == "spec_not_delivered"
        manager.deliver(j0, spec0)
        manager.deliver(jplain, plain)
        assert get(j0, OTHER_USER).status_code == 403
        r = get(jplain)
        assert r.status_code == 409 and r.json()["error"] == "not_a_cluster_node"
        r = get(j0)
        assert r.status_code == 200
        cluster_mesh.parse_mesh_key(r.json(), Pubkey.from_bytes(j0.job),
                                    Pubkey.from_bytes(key.pubkey), "node 0")

        peer_keys = [seed(31), seed(32)]
        pubs = {r: Mesh(tmp_path / f"peer{r}", settings(PORT_BASE + 10 + r, PORT_BASE + 10 + r),
                        peer_keys[r - 1]).publication(jobs[r]) for r in (1, 2)}
        body = peer_body(pubs)
        for r in (1, 2):
            chain.jobs[jobs[r]] = PeerJob("running", bytes(USER.pubkey()),
                                          pubkey(peer_keys[r - 1]))
        r = post(j0, body, signed=j0.workload_hash)  # a status-like signature: not this body
        assert r.status_code == 401 and "does not verify" in r.json()["error"]
        bad = json.loads(body)
        bad["peers"][1]["signature"] = bad["peers"][0]["signature"]
        r = post(j0, json.dumps(bad).encode())
        assert (r.status_code, r.json()["error"]) == (400, "bad_peer_list")
        assert r.json()["message"].startswith("the peer of rank 2: the signature does not "
                                              "verify with worker_key")
        dup = json.loads(body)
        dup["peers"][1] = {**dup["peers"][0]}
        r = post(j0, json.dumps(dup).encode())
        assert r.json() == {"error": "bad_peer_list",
                            "message": "the peer list names rank 1 twice"}
        # The chain's checks: the provider's current worker key, the user, the status.
        chain.jobs[jobs[2]] = PeerJob("running", bytes(USER.pubkey()), pubkey(seed(77)))
        r = post(j0, body)
        assert r.status_code == 403 and r.json() == {"error": "peer_refused", "message": (
            f"the peer of rank 2 (job {b58encode(jobs[2])}) was signed by worker key "
            f"{b58encode(pubkey(seed(32)))}, which is not its provider's current worker key "
            f"({b58encode(pubkey(seed(77)))}); ask that node's worker for its mesh key "
            "again")}
        chain.jobs[jobs[2]] = PeerJob("running", bytes(OTHER_USER.pubkey()), pubkey(seed(32)))
        assert post(j0, body).json()["message"] == (
            f"the peer of rank 2 (job {b58encode(jobs[2])}) is another user's job; a "
            "cluster's nodes are one user's jobs")
        chain.jobs[jobs[2]] = PeerJob("finishing", bytes(USER.pubkey()), pubkey(seed(32)))
        assert post(j0, body).json()["message"].endswith("is finishing, not open or running")
        del chain.jobs[jobs[2]]
        assert post(j0, body).json()["message"].endswith(
            "is not on chain (closed, or never created)")
        assert manager.mesh.accepted(j0.job) is None  # nothing kept from refused lists
        chain.jobs[jobs[2]] = PeerJob("open", bytes(USER.pubkey()), pubkey(seed(32)))
        r = post(j0, body)
        assert (r.status_code, r.json()) == (200, {"status": "configured", "version": 0})
        # Its subnet is in use on this host now; no device yet, so no handshakes to report.
        assert http.get("/v1/health").json()["cluster"]["subnets_used"] == [0x5a]
        assert get(j0).json()["handshakes"] is None
        reads = chain.reads
        assert post(j0, body).json() == {"status": "configured", "version": 0}  # idempotent
        assert chain.reads == reads
        moved = Mesh(tmp_path / "peer1b", settings(PORT_BASE + 15, PORT_BASE + 15),
                     peer_keys[0]).publication(jobs[1])
        r = post(j0, peer_body({1: moved, 2: pubs[2]}))  # another list, no newer version
        assert r.status_code == 409 and r.json()["error"] == "mesh_stale"
        # The node waits for its mesh until the list is here; now it would start.
        assert manager.mesh.node_env(j0.job) == contract_env(cluster(0, 3))
    finally:
        http.close()
        api.close()
        store.close()


def test_a_worker_without_meshes_never_accepts_a_cluster_node(tmp_path: Path,
                                                              key: WorkerKey) -> None:
    spec = node_spec(0)
    j = assigned(os.urandom(32), spec, status="open")
    store = WorkloadStore(tmp_path / "w.sqlite")
    try:
        manager = WorkloadManager(FakeRuntime(), store, key.seed, background_starts=False)
        manager.reconcile({j.job: (j, ())})
        manager.deliver(j, spec)
        assert "is a cluster node, but this worker serves no cluster nodes" in (
            manager.acceptance_blocker(j) or "")
        manager.mesh = Mesh(tmp_path / "state", settings(), key.seed)
        assert manager.acceptance_blocker(j) is None
    finally:
        store.close()


# ----------------------------------------------------------------------------- podman


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return real_podman(tmp_path_factory.mktemp("podman"))


def _exec(real: Any, job: bytes, *cmd: str, check: bool = True
          ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([real.runtime.binary, "exec", container_name(job), *cmd],
                          env=real.runtime.cli_env(), capture_output=True, text=True,
                          timeout=30, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"exec {cmd} failed ({proc.returncode}): {proc.stderr}")
    return proc


def test_cluster_nodes_start_only_with_their_mesh_in_real_containers(
        real: Any, tmp_path: Path, key: WorkerKey) -> None:
    start = ("sh", "-c", ("ip -o -4 addr show dev gpum0 > /tmp/at-start 2>&1; "
                          "env > /tmp/env; exec sleep 600"))
    specs = [node_spec(0, args=start), node_spec(1, args=start)]
    jobs = [os.urandom(32), os.urandom(32), os.urandom(32)]
    other = WorkloadSpec(image=real.image, args=("sleep", "600"))
    provider = os.urandom(32)
    views = [assigned(jobs[i], s, provider=provider) for i, s in enumerate(specs)] + [
        assigned(jobs[2], other, provider=provider)]
    listing = {v.job: (v, ("GPU-0",)) for v in views}
    store = WorkloadStore(tmp_path / "w.sqlite")
    manager = WorkloadManager(real.runtime, store, key.seed, attach_gpus=False,
                              background_starts=False, provider=provider,
                              state_dir=tmp_path)
    mesh = manager.mesh = Mesh(tmp_path / "state", settings(wireguard="auto"), key.seed)
    try:
        for v, s in zip(views, (*specs, other)):
            manager.deliver(v, s)
        manager.reconcile(listing)
        # The gang hold: no container for a node without its peer list.
        for j in jobs[:2]:
            assert real.runtime.state(container_name(j)).status == "missing"
            d = manager.describe(listing[j][0])
            assert (d["state"], d["error"]) == ("pending", WAITING_FOR_MESH)
        assert real.runtime.state(container_name(jobs[2])).status == "running"
        pubs = [mesh.publication(j) for j in jobs[:2]]
        for r in (0, 1):
            mesh.accept(jobs[r], cluster(r), parse_peer_list(
                peer_body({1 - r: pubs[1 - r]}), job=jobs[r], rank=r, nodes=2))
        manager.reconcile(listing)
        for r in (0, 1):
            assert real.runtime.state(container_name(jobs[r])).status == "running"
            # gpum0 was up with its address before the container's command ran.
            seen = _exec(real, jobs[r], "cat", "/tmp/at-start").stdout
            assert f"inet {SUBNET_PREFIX}.{r + 1}/24" in seen, seen
            env = dict(line.split("=", 1) for line in _exec(
                real, jobs[r], "cat", "/tmp/env").stdout.splitlines() if "=" in line)
            expected = contract_env(cluster(r))
            for name in ("NODE_RANK", "NUM_NODES", "NODE_ADDR", "MASTER_ADDR", "MASTER_PORT",
                         "WORLD_SIZE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
                assert env[name] == expected[name], name
            assert _exec(real, jobs[r], "sh", "-c", 'echo "$NODE_IPS"').stdout.split() == \
                [f"{SUBNET_PREFIX}.1", f"{SUBNET_PREFIX}.2"]
        # TCP between the two containers over the mesh.
        _exec(real, jobs[1], "sh", "-c", "nc -l -p 7000 > /tmp/got &")
        time.sleep(0.3)
        _exec(real, jobs[0], "sh", "-c", f"echo over-the-mesh | nc -w 3 {SUBNET_PREFIX}.2 7000")
        wait_for(lambda: _exec(real, jobs[1], "cat", "/tmp/got").stdout == "over-the-mesh\n",
                 5, what="the message over the mesh")
        # Another job's container on the same host reaches nothing of it.
        _exec(real, jobs[1], "sh", "-c", "nc -l -p 7001 > /tmp/got2 &")
        time.sleep(0.3)
        _exec(real, jobs[2], "sh", "-c", f"echo intruder | nc -w 2 {SUBNET_PREFIX}.2 7001",
              check=False)
        time.sleep(0.5)
        assert _exec(real, jobs[1], "cat", "/tmp/got2").stdout == ""
        assert "gpum0" not in sh("ip", "route", "get", f"{SUBNET_PREFIX}.2").stdout
        # A worker that died between a node's init and its start left it initialized (not
        # running): the next reconcile starts it afresh, mesh included.
        old_pid = mesh.device_pid(jobs[0])
        real.runtime.remove(container_name(jobs[0]), timeout_s=0)
        wait_for(lambda: old_pid is None or not os.path.exists(f"/proc/{old_pid}")
                 or _zombie(old_pid), 5, what="wireguard-go to end with its namespace")
        name0 = container_name(jobs[0])
        podman = [real.runtime.binary, "container"]
        for argv in (["create", "--name", name0, "--label", f"gpum.job={b58encode(jobs[0])}",
                      "--label", f"{PROVIDER_LABEL}={b58encode(provider)}", real.image,
                      "sleep", "600"], ["init", name0]):
            subprocess.run(podman + argv, env=real.runtime.cli_env(), check=True,
                           capture_output=True, timeout=60)
        store.set_state(jobs[0], "starting")
        assert real.runtime.state(name0).status == "created"
        manager.reconcile(listing)
        assert real.runtime.state(name0).status == "running"
        assert f"inet {SUBNET_PREFIX}.1/24" in _exec(real, jobs[0], "cat", "/tmp/at-start").stdout
        _exec(real, jobs[1], "sh", "-c", "nc -l -p 7002 > /tmp/got3 &")
        time.sleep(0.3)
        _exec(real, jobs[0], "sh", "-c", f"echo again | nc -w 3 {SUBNET_PREFIX}.2 7002")
        wait_for(lambda: _exec(real, jobs[1], "cat", "/tmp/got3").stdout == "again\n",
                 5, what="the message over the mesh after the restart")
        # wireguard-go dies under a running node (a crash, or the service manager took it
        # with the worker): the next poll configures the mesh again.
        dead = mesh.device_pid(jobs[1])
        assert dead is not None
        os.kill(dead, 9)
        wait_for(lambda: "gpum0" not in _exec(real, jobs[1], "sh", "-c", "ip -o link").stdout, 5,
                 what="gpum0 to go with its wireguard-go")
        manager.reconcile(listing)
        assert mesh.device_pid(jobs[1]) not in (None, dead)
        _exec(real, jobs[1], "sh", "-c", "nc -l -p 7003 > /tmp/got4 &")
        time.sleep(0.3)
        _exec(real, jobs[0], "sh", "-c", f"echo repaired | nc -w 3 {SUBNET_PREFIX}.2 7003")
        wait_for(lambda: _exec(real, jobs[1], "cat", "/tmp/got4").stdout == "repaired\n",
                 5, what="the message over the repaired mesh")
        pids = [mesh.device_pid(j) for j in jobs[:2]]
        assert all(pids)
        # The jobs end: containers removed, wireguard-go stopped, keys deleted, ports free.
        manager.reconcile({})
        for j, pid in zip(jobs[:2], pids):
            assert real.runtime.state(container_name(j)).status == "missing"
            assert pid is not None and (not os.path.exists(f"/proc/{pid}") or _zombie(pid))
            assert not (WG_RUN / f"{interface_name(j)}.sock").exists()
        assert mesh.jobs() == set()
        assert _udp_free(PORT_BASE) and _udp_free(PORT_BASE + 1)
    finally:
        for j in jobs:
            real.runtime.remove(container_name(j), timeout_s=0)
        for j in jobs[:2]:
            mesh.forget(j)
        store.close()


def test_a_failed_mesh_fails_the_start_and_leaves_no_container(real: Any, tmp_path: Path,
                                                               key: WorkerKey) -> None:
    spec = node_spec(0)
    job = os.urandom(32)
    provider = os.urandom(32)
    view = assigned(job, spec, provider=provider)
    store = WorkloadStore(tmp_path / "w.sqlite")
    manager = WorkloadManager(real.runtime, store, key.seed, attach_gpus=False,
                              background_starts=False, provider=provider, state_dir=tmp_path)
    mesh = manager.mesh = Mesh(tmp_path / "state", settings(), key.seed,
                               path=str(tmp_path / "empty-path"))  # no wireguard-go here
    peer = Mesh(tmp_path / "peer", settings(PORT_BASE + 18, PORT_BASE + 18), seed(41))
    try:
        manager.deliver(view, spec)
        mesh.publication(job)
        mesh.accept(job, cluster(0), parse_peer_list(peer_body({1: peer.publication(
            os.urandom(32))}), job=job, rank=0, nodes=2))
        manager.reconcile({job: (view, ("GPU-0",))})
        d = manager.describe(view)
        assert d["state"] == "failed"
        assert d["error"].startswith("the cluster's mesh could not be configured: "
                                     "wireguard-go is not installed on this host: install "
                                     "the Debian packages"), d["error"]
        assert real.runtime.state(container_name(job)).status == "missing"
        assert not any(WG_RUN.glob(f"{interface_name(job)}*"))
    finally:
        real.runtime.remove(container_name(job), timeout_s=0)
        mesh.forget(job)
        store.close()


def test_throughput_over_the_mesh_against_the_same_path_without_it(world: World,
                                                                   tmp_path: Path) -> None:
    """Not a benchmark gate (bench/mesh_throughput.py prints the numbers): the mesh moves a
    stream end to end, at some fraction of the plain path's rate."""
    w = world
    with two_node_cluster(w, tmp_path) as c:
        plain = w.throughput(w.nodes[0], w.hosts[1], w.public[1], 7100, 64)
        mesh = w.throughput(w.nodes[0], w.nodes[1], c.address(1), 7101, 64)
        print(f"plain {plain:.0f} MiB/s, mesh {mesh:.0f} MiB/s ({mesh / plain:.0%})")
        assert mesh > 0 and plain > 0

