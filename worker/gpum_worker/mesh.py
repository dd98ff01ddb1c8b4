"""A cluster node's private network: one WireGuard interface ``gpum0`` in its container.

Every node of a cluster (``gpu_market.cluster_spec``) is a job on some provider. Its worker
makes the job's WireGuard key pair here, on its own host (``Mesh.publication``: the private
key is a mode-0600 file under ``<state_dir>/mesh/<job>/`` and never leaves it), publishes the
public key with a UDP endpoint signed by the worker key (``gpu_market.mesh``), takes the
user's peer list (``Mesh.accept``, checked by ``mesh_api``) and, right before the container
starts, configures the interface in the container's network namespace (``Mesh.configure``):

1. the WireGuard device is made in the host's network namespace under a name unique on this
   host (``interface_name``: "gw" + 8 hex digits of the job), so its UDP socket is the host's:
   the kernel's WireGuard (``ip link add type wireguard``) where the host has it, else
   wireguard-go (Debian's package; its control socket /var/run/wireguard/<name>.sock stays
   with the process in the host's namespace);
2. ``wg set``: the job's private key, its UDP port (one per node, from ``[cluster]
   udp_ports``), every peer with ``allowed-ips`` its mesh address /32, its endpoint and a
   25 s keepalive;
3. the device moves into the container's namespace and becomes ``gpum0`` there: the node's
   address (``subnet`` host rank+1)/24, MTU 1420, no IPv6 address, up; before it comes up,
   an nftables table ``gpum_mesh`` in that namespace (``mesh_filter``): the mesh's
   addresses are reached only over gpum0 (or from the container itself), a packet with a
   mesh source is taken only from gpum0, and nothing is forwarded into or out of gpum0. The
   container cannot change it (it has no CAP_NET_ADMIN).

Isolation, as a result:

* The mesh carries only the cluster's addresses: WireGuard sends a packet only to the peer
  whose ``allowed-ips`` hold its destination and accepts one only from the peer whose
  ``allowed-ips`` hold its source, and those are the nodes' /32s.
* Another job's container on this host (another network namespace) has no route to the
  mesh: the subnet's only route is ``gpum0``, inside this container's namespace; the host's
  own namespace never sees a mesh packet, only the encrypted UDP. One that sends packets
  to this container's bridge address anyway (raw sockets: podman grants CAP_NET_RAW) is
  dropped by the filter, whether it aims at a mesh address or spoofs a mesh source.
* From the mesh, the provider's host (worker API, validator, SSH) cannot be reached: the
  interface lives in the container's namespace, whose filter forwards nothing received on
  it.

``teardown`` ends the device (wireguard-go is stopped and its socket removed; a kernel
device goes with the namespace, or is deleted); ``forget`` also deletes the job's key and
frees its port, once the job ended (``reconcile``). When the container's namespace goes away
with its container, the device goes with it and wireguard-go exits on its own.

Every tool runs with a timeout and an argument list (never a shell); every failure is a
``MeshError`` saying what failed and what to do.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_market.cluster_spec import MESH_INTERFACE, ClusterSpec, cluster_from_json, contract_env
from gpu_market.mesh import (
    MeshKeyError,
    MeshPeer,
    check_udp_endpoint,
    sign_mesh_key,
    wg_public_key,
)
from gpu_market.receipt import private_key_from_seed, public_key_bytes
from gpu_market.spec_checks import WorkloadSpecError

from .errors import ContainerRuntimeError
from .keys import b58encode, decode_pubkey
from .mesh_tools import (
    MeshError,
    Tools,
    inode,
    is_wireguard_go,
    kill_pid,
    kill_stale,
    stop,
    tail,
    udp_free,
    write_private,
)
from .mesh_tools import udp_free as _udp_free  # noqa: F401 - the name tests import

__all__ = [
    "MESH_INTERFACE",
    "NO_MESH",
    "WAITING_FOR_MESH",
    "Mesh",
    "MeshConflict",
    "MeshError",
    "MeshSettings",
    "MeshStale",
    "check_public_host",
    "cluster_of",
    "interface_name",
    "parse_port_range",
]

log = logging.getLogger("gpum_worker.mesh")

WAITING_FOR_MESH = "waiting for the cluster's mesh"
"""The workload's error while a cluster node waits for its peer list."""
NO_MESH = ("this worker serves no cluster nodes (set [cluster] enabled = true, public_host and "
           "udp_ports, open those UDP ports, and run the worker as root)")
DEFAULT_UDP_PORTS = (51820, 51899)
KEEPALIVE_S = 25
MTU = 1420
FILTER_TABLE = "gpum_mesh"
SOCKET_WAIT_S = 5.0
"""wireguard-go has its control socket by then, or the configuration fails."""
BIND_WAIT_S = 5.0
"""The device listens on its UDP port by then (wireguard-go notices the interface is up
within a second), or the configuration fails."""
WG_RUN_DIR = "/var/run/wireguard"
BACKENDS = ("auto", "kernel", "userspace")


class MeshConflict(MeshError):
    """A different peer list was accepted for the job before, and this one may not replace
    it."""


class MeshStale(MeshConflict):
    """A peer list whose version is not newer than the one kept."""


@dataclass(frozen=True)
class MeshSettings:
    """``[cluster]``: whether this provider serves cluster nodes, the UDP ports their meshes
    listen on (one per node) and the public address peers send to."""

    enabled: bool = False
    udp_ports: tuple[int, int] = DEFAULT_UDP_PORTS
    public_host: str = ""
    wireguard: str = "auto"
    """"kernel", "userspace" (wireguard-go) or "auto" (the kernel's where it has one)."""


def parse_port_range(text: object) -> tuple[int, int]:
    """``"LO-HI"`` (or one port) -> (lo, hi), 1 <= lo <= hi <= 65535; ValueError otherwise."""
    s = str(text).strip()
    lo_s, _, hi_s = s.partition("-")
    hi_s = hi_s or lo_s
    if not (lo_s.strip().isdigit() and hi_s.strip().isdigit()):
        raise ValueError(f"udp_ports must be a port range such as \"51820-51899\", got {s!r}")
    lo, hi = int(lo_s), int(hi_s)
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"udp_ports {s!r}: need 1 <= first <= last <= 65535")
    return lo, hi


def check_public_host(text: object) -> str:
    """The host part of the endpoints this worker publishes: an IP address or a DNS name
    peers can send to; ValueError otherwise."""
    host = str(text).strip()
    try:
        ip = ipaddress.ip_address(host)
        shown = f"[{ip}]:1" if ip.version == 6 else f"{ip}:1"
    except ValueError:
        shown = f"{host}:1"
    try:
        check_udp_endpoint(shown, "public_host")
    except MeshKeyError as e:
        raise ValueError(f"[cluster] public_host {host!r} is not an address peers can send to "
                         f"({e})") from None
    return host


def mesh_filter(subnet: str) -> str:
    """The nftables ruleset of a node's container namespace (``nft -f``): the mesh's
    addresses are reached only over ``gpum0`` (or from the container itself), packets with
    a mesh source arrive only over it, and nothing is forwarded into or out of it."""
    net = str(ipaddress.ip_network(subnet))
    ifs = f'{{ "{MESH_INTERFACE}", "lo" }}'
    return (f"table inet {FILTER_TABLE} {{\n"
            "  chain input {\n"
            "    type filter hook input priority 0; policy accept;\n"
            f"    iifname != {ifs} ip daddr {net} drop\n"
            f"    iifname != {ifs} ip saddr {net} drop\n"
            "  }\n"
            "  chain forward {\n"
            "    type filter hook forward priority 0; policy accept;\n"
            f'    iifname "{MESH_INTERFACE}" drop\n'
            f'    oifname "{MESH_INTERFACE}" drop\n'
            "  }\n"
            "}\n")


def interface_name(job: bytes) -> str:
    """The WireGuard device's name on this host before it moves into the container: "gw" and
    the job's first 4 bytes in hex (an interface name has at most 15 characters)."""
    return "gw" + bytes(job)[:4].hex()


def cluster_of(spec_json: bytes | Mapping[str, Any]) -> ClusterSpec | None:
    """The cluster section of a stored spec (canonical JSON bytes or its object), None when
    the spec has none; WorkloadSpecError when it is malformed."""
    if isinstance(spec_json, (bytes, bytearray)):
        try:
            doc = json.loads(bytes(spec_json))
        except ValueError:
            raise WorkloadSpecError("the stored spec is not JSON") from None
    else:
        doc = spec_json
    if not isinstance(doc, Mapping) or doc.get("cluster") is None:
        return None
    return cluster_from_json(doc["cluster"])


def _endpoint(host: str, port: int) -> str:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"{host}:{port}"
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


class Mesh:
    """The meshes of this worker's cluster nodes (module docstring).

    ``state_dir``: where each job's directory is kept (``<state_dir>/mesh/<job b58>``);
    ``worker_seed``: the worker key's 32-byte ed25519 seed (it signs the publications).
    Thread-safe: the API thread publishes and accepts, the start thread configures, the
    agent's loop reconciles.
    """

    def __init__(self, state_dir: str | os.PathLike[str], settings: MeshSettings,
                 worker_seed: bytes, *, wg_run_dir: str = WG_RUN_DIR,
                 path: str | None = None) -> None:
        if settings.wireguard not in BACKENDS:
            raise MeshError(f"[cluster] wireguard must be one of {', '.join(BACKENDS)}")
        self.settings = settings
        self.root = Path(state_dir) / "mesh"
        self.wg_run_dir = Path(wg_run_dir)
        self._seed = bytes(worker_seed)[:32]
        self.worker_key = public_key_bytes(private_key_from_seed(self._seed))
        self.tools = Tools(path)
        self._lock = threading.RLock()
        self._procs: dict[bytes, subprocess.Popen[bytes]] = {}
        self._kernel: bool | None = None

    def preflight(self, runtime_name: str | None) -> None:
        """MeshError saying what this host lacks to serve cluster nodes: root, podman, the
        tools, and /dev/net/tun for wireguard-go."""
        if os.geteuid() != 0:
            raise MeshError("cluster nodes need a worker that runs as root (it makes network "
                            "devices and moves them into containers)")
        if runtime_name != "podman":
            raise MeshError("cluster nodes need podman (the container's network namespace "
                            "is made at `podman init`, before it starts)")
        for tool in ("ip", "nsenter", "nft", "wg"):
            self.tools.which(tool)
        if self.settings.wireguard == "userspace" or (
                self.settings.wireguard == "auto" and not self.kernel_wireguard()):
            self.tools.which("wireguard-go")
            if not os.path.exists("/dev/net/tun"):
                raise MeshError("wireguard-go needs /dev/net/tun (load the tun module)")

    # ------------------------------------------------------------------ keys and ports

    def _dir(self, job: bytes, create: bool = False) -> Path:
        d = self.root / b58encode(job)
        if create:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            d.mkdir(mode=0o700, exist_ok=True)
        return d

    def _private_key(self, job: bytes) -> bytes:
        """The job's WireGuard private key, made on first need (clamped X25519)."""
        path = self._dir(job, create=True) / "private.key"
        try:
            key = base64.b64decode(path.read_bytes().strip(), validate=True)
            if len(key) == 32:
                return key
            log.error("mesh key of job %s is damaged; making a new one", b58encode(job))
        except FileNotFoundError:
            pass
        except ValueError:
            log.error("mesh key of job %s is damaged; making a new one", b58encode(job))
        key = bytearray(os.urandom(32))
        key[0] &= 248
        key[31] = (key[31] & 127) | 64
        write_private(path, base64.b64encode(bytes(key)) + b"\n")
        return bytes(key)

    def _ports_taken(self) -> set[int]:
        taken: set[int] = set()
        if not self.root.is_dir():
            return taken
        for d in self.root.iterdir():
            try:
                taken.add(int((d / "port").read_text().strip()))
            except (OSError, ValueError):
                continue
        return taken

    def _port(self, job: bytes) -> int:
        """The job's UDP port: reserved from the range on first need, kept until ``forget``."""
        path = self._dir(job, create=True) / "port"
        try:
            return int(path.read_text().strip())
        except (FileNotFoundError, ValueError):
            pass
        lo, hi = self.settings.udp_ports
        taken = self._ports_taken()
        for port in range(lo, hi + 1):
            if port not in taken and udp_free(port):
                write_private(path, f"{port}\n".encode())
                return port
        raise MeshError(f"no free UDP port left in {lo}-{hi} for another cluster node "
                        f"({len(taken)} reserved by this worker's nodes); widen [cluster] "
                        "udp_ports (and the firewall's opening) or wait for a node to end")

    def publication(self, job: bytes) -> dict[str, str]:
        """The job's signed mesh key, as ``GET /v1/jobs/<job>/mesh`` answers it (its key
        pair and port made on first need)."""
        if not self.settings.enabled or not self.settings.public_host:
            raise MeshError("this worker serves no cluster nodes ([cluster] enabled = true "
                            "and public_host are needed)")
        with self._lock:
            public = wg_public_key(self._private_key(job))
            port = self._port(job)
        endpoint = _endpoint(self.settings.public_host, port)
        sig = sign_mesh_key(self._seed, job, public, endpoint)
        return {"job": b58encode(job), "public_key": base64.b64encode(public).decode(),
                "endpoint": endpoint, "worker_key": b58encode(self.worker_key),
                "signature": b58encode(sig)}

    def health(self) -> dict[str, Any] | None:
        """``/v1/health``'s "cluster": where this worker's nodes listen, how many more it can
        take (ports neither reserved nor held by another program) and the mesh subnets its
        nodes use (``subnets_used``: X of each 10.77.X.0/24, so a new cluster can take
        another), or None when it serves no cluster nodes."""
        s = self.settings
        if not s.enabled or not s.public_host:
            return None
        lo, hi = s.udp_ports
        with self._lock:
            taken = self._ports_taken()
            free = sum(1 for p in range(lo, hi + 1) if p not in taken and udp_free(p))
            used = self._subnets_used()
        return {"udp_port": lo, "udp_ports": [lo, hi], "free_ports": free,
                "host": s.public_host, "subnets_used": used}

    def _subnets_used(self) -> list[int]:
        """X of every 10.77.X.0/24 in a peer list this worker keeps (distinct, sorted)."""
        used: set[int] = set()
        for job in self.jobs():
            doc = self.accepted(job) or {}
            subnet = str((doc.get("cluster") or {}).get("subnet", ""))
            octets = subnet.split("/")[0].split(".")
            if len(octets) == 4 and octets[2].isdigit():
                used.add(int(octets[2]))
        return sorted(used)

    def handshakes(self, job: bytes) -> list[dict[str, int]] | None:
        """Every peer's latest WireGuard handshake with ``job``'s device, rank order
        (``{"rank", "latest_handshake"}``: unix seconds, 0 when none yet), or None while the
        device is not up on this host."""
        doc, info = self.accepted(job), self._recorded(job)
        if doc is None or info is None:
            return None
        if info.get("backend") == "kernel":
            netns = f"/proc/{info.get('netns_pid')}/ns/net"
            if inode(netns) != info.get("netns"):
                return None
            argv = ["nsenter", f"--net={netns}", "--", "wg", "show", MESH_INTERFACE,
                    "latest-handshakes"]
        elif self.device_pid(job) is not None:
            argv = ["wg", "show", str(info.get("ifname", "")), "latest-handshakes"]
        else:
            return None
        try:
            proc = self.tools.run(argv, check=False)
        except MeshError:
            return None
        if proc.returncode != 0:
            return None
        seen: dict[str, int] = {}
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                seen[parts[0]] = int(parts[1])
        return [{"rank": int(p["rank"]), "latest_handshake": seen.get(str(p["public_key"]), 0)}
                for p in doc["peers"]]

    # ------------------------------------------------------------------ peer lists

    def accepted(self, job: bytes) -> dict[str, Any] | None:
        """The peer list accepted for ``job`` ({"cluster", "peers"}), or None."""
        try:
            doc = json.loads((self._dir(job) / "peers.json").read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            log.error("the stored peer list of job %s is damaged", b58encode(job))
            return None
        return doc if isinstance(doc, dict) else None

    def accept(self, job: bytes, cluster: ClusterSpec, peers: Sequence[MeshPeer],
               version: int = 0) -> list[int] | None:
        """Keep ``peers`` (checked by the caller) as ``job``'s mesh, durably. None when the
        very same list (same version) was kept before; else the ranks whose entries are new
        (every peer for a first list). A later list needs a higher ``version`` and the same
        cluster section (MeshStale, MeshConflict); it replaces the changed peers of a device
        that is up at once (``_apply``), without touching this node's own interface."""
        doc = {"cluster": {"id": cluster.id, "rank": cluster.rank, "nodes": cluster.nodes,
                           "gpus_per_node": cluster.gpus_per_node,
                           "master_port": cluster.master_port, "subnet": cluster.subnet},
               "peers": [p.to_json() for p in sorted(peers, key=lambda p: p.rank)],
               "version": int(version)}
        with self._lock:
            before = self.accepted(job)
            if before is not None:
                kept = int(before.get("version", 0))
                if {**before, "version": kept} == doc:
                    return None
                if before.get("cluster") != doc["cluster"]:
                    raise MeshConflict("this node's mesh was configured for another cluster "
                                       "section; a node's rank, size and subnet never change")
                if version <= kept:
                    raise MeshStale(f"this node keeps version {kept} of the cluster's peer "
                                    f"list; version {version} is not newer, so it cannot "
                                    "replace it (a replayed or late list never rolls the mesh "
                                    f"back): send version {kept + 1} or higher")
            old = {int(p["rank"]): p for p in (before or {}).get("peers", [])}
            changed = [int(p["rank"]) for p in doc["peers"] if old.get(int(p["rank"])) != p]
            self._private_key(job)
            write_private(self._dir(job, create=True) / "peers.json",
                          json.dumps(doc, sort_keys=True).encode())
            if before is not None:
                self._apply(job, cluster, list(old.values()), doc["peers"])
        log.info("job %s: mesh peer list version %d accepted (rank %d of %d nodes; new "
                 "entries of rank(s) %s)", b58encode(job), version, cluster.rank, cluster.nodes,
                 ", ".join(map(str, changed)) or "none")
        return changed

    def _apply(self, job: bytes, cluster: ClusterSpec, old: Sequence[Mapping[str, Any]],
               new: Sequence[Mapping[str, Any]]) -> None:
        """Put a newer peer list into ``job``'s running device: each peer whose key changed is
        removed and its successor added with the same ``allowed-ips`` (its rank's address)
        and its endpoint; an unchanged peer is left as it is, so its session goes on. The
        filter (``mesh_filter``) names the subnet and ``gpum0``, never a peer, so it holds
        for the successor as it is. When the device is not up nothing is done (``configure``
        reads the kept list); when the change fails the device is ended, and the next poll's
        ``repair`` configures it again from the kept list."""
        info = self._recorded(job)
        if info is None:
            return
        before = {int(p["rank"]): p for p in old}
        argv: list[str] = []
        for p in new:
            o = before.get(int(p["rank"]))
            if o == p:
                continue
            if o is not None and o["public_key"] != p["public_key"]:
                argv += ["peer", str(o["public_key"]), "remove"]
            argv += ["peer", str(p["public_key"]), "allowed-ips",
                     f"{cluster.node_address(int(p['rank']))}/32", "endpoint", str(p["endpoint"]),
                     "persistent-keepalive", str(KEEPALIVE_S)]
        if not argv:
            return
        if info.get("backend") == "kernel":
            netns = f"/proc/{info.get('netns_pid')}/ns/net"
            if inode(netns) != info.get("netns"):
                return
            cmd = ["nsenter", f"--net={netns}", "--", "wg", "set", MESH_INTERFACE, *argv]
        elif self.device_pid(job) is not None:
            cmd = ["wg", "set", str(info.get("ifname", "")), *argv]
        else:
            return
        try:
            self.tools.run(cmd)
        except MeshError as e:
            log.error("job %s: putting the new peers into its mesh device failed (%s); ending "
                      "the device so that it is configured again from the kept list",
                      b58encode(job), e)
            self.teardown(job)
            return
        log.info("job %s: mesh device updated in place (%d peer(s) replaced)", b58encode(job),
                 sum(1 for p in new if before.get(int(p["rank"])) != p))

    def node_env(self, job: bytes) -> dict[str, str] | None:
        """The environment contract of ``job``'s container once its peer list is accepted,
        else None (the container waits)."""
        doc = self.accepted(job)
        if doc is None:
            return None
        return contract_env(cluster_from_json(doc["cluster"]))

    # ------------------------------------------------------------------ configure

    def before_start(self, job: bytes) -> Callable[[int], None]:
        """``configure`` for ``ContainerRuntime.run``'s ``before_start``: a failure is a
        ContainerRuntimeError (the start failed; it is retried like any failed start)."""
        def configure(pid: int) -> None:
            try:
                self.configure(job, pid)
            except (MeshError, OSError, WorkloadSpecError) as e:
                raise ContainerRuntimeError(f"the cluster's mesh could not be configured: "
                                            f"{e}") from None
        return configure

    def kernel_wireguard(self) -> bool:
        """Whether this host's kernel makes WireGuard devices (probed once)."""
        if self._kernel is None:
            probe = f"gwprobe{os.getpid() % 100000}"
            proc = self.tools.run(["ip", "link", "add", "dev", probe, "type", "wireguard"],
                                  check=False)
            self._kernel = proc.returncode == 0
            if self._kernel:
                self.tools.run(["ip", "link", "del", "dev", probe], check=False)
        return self._kernel

    def configure(self, job: bytes, pid: int) -> None:
        """Bring ``gpum0`` up in the network namespace of process ``pid`` (the container's
        init, before the container starts) with the accepted peer list; MeshError saying
        what failed (nothing of it is left behind then)."""
        doc = self.accepted(job)
        if doc is None:
            raise MeshError("no peer list was accepted for this job yet")
        cluster = cluster_from_json(doc["cluster"])
        netns = f"/proc/{int(pid)}/ns/net"
        if not os.path.exists(netns):
            raise MeshError(f"the container's process {pid} is gone (no {netns})")
        with self._lock:
            self.teardown(job)
            self._private_key(job)
            port = self._port(job)
            if not udp_free(port):
                raise MeshError(f"UDP port {port} of this node's mesh is taken by another "
                                "program on this host; free it (the port is in [cluster] "
                                "udp_ports)")
            use_kernel = self.settings.wireguard == "kernel" or (
                self.settings.wireguard == "auto" and self.kernel_wireguard())
            try:
                self._make_device(job, pid, cluster, doc["peers"], port, use_kernel)
            except MeshError as e:
                if not (use_kernel and self.settings.wireguard == "auto"
                        and shutil.which("wireguard-go", path=self.tools.path)):
                    raise
                log.error("job %s: the kernel's WireGuard failed (%s); this worker uses "
                          "wireguard-go from now on", b58encode(job), e)
                self._kernel = use_kernel = False
                self._make_device(job, pid, cluster, doc["peers"], port, use_kernel)
        log.info("job %s: mesh up: %s %s/24 in the container, UDP port %d, %d peer(s) (%s)",
                 b58encode(job), MESH_INTERFACE, cluster.node_address(),
                 port, len(doc["peers"]), "kernel" if use_kernel else "wireguard-go")

    def _make_device(self, job: bytes, pid: int, cluster: ClusterSpec,
                     peers: Sequence[Mapping[str, Any]], port: int, kernel: bool) -> None:
        """Steps 1-3 of the module docstring; on any failure what was made is undone."""
        name = interface_name(job)
        self._record(job, {"backend": "kernel" if kernel else "userspace", "ifname": name,
                           "netns_pid": int(pid), "netns": inode(f"/proc/{int(pid)}/ns/net")})
        try:
            if kernel:
                self.tools.run(["ip", "link", "add", "dev", name, "type", "wireguard"])
            else:
                self._start_userspace(job, name)
            self._wg_set(name, self._dir(job) / "private.key", port, cluster, peers)
            self.tools.run(["ip", "link", "set", "dev", name, "netns", str(int(pid))])
            self._inside(pid, name, cluster)
            self._await_bound(job, port)
        except BaseException:
            self.teardown(job)
            raise

    def alive(self, job: bytes, pid: int) -> bool:
        """Whether ``job``'s mesh device serves the container whose init is ``pid``: its
        wireguard-go runs (userspace), or its device is in that namespace (kernel)."""
        info = self._recorded(job) or {}
        if info.get("netns") != inode(f"/proc/{int(pid)}/ns/net"):
            return False
        if info.get("backend") == "kernel":
            return True
        return self.device_pid(job) is not None

    def repair(self, job: bytes, pid: int) -> None:
        """For a running node's container: configure its mesh again when its device is gone
        (wireguard-go died, or the worker's service manager stopped it with the worker);
        failures are logged and retried on the next call."""
        if self.accepted(job) is None or self.alive(job, pid):
            return
        log.warning("job %s: its mesh device is gone while its container runs; configuring "
                    "it again", b58encode(job))
        try:
            self.configure(job, pid)
        except (MeshError, OSError, WorkloadSpecError) as e:
            log.error("job %s: configuring its mesh again failed (%s); retrying next poll",
                      b58encode(job), e)

    def _start_userspace(self, job: bytes, name: str) -> None:
        sock = self.wg_run_dir / f"{name}.sock"
        if sock.exists():
            kill_stale(sock, name)
        exe = self.tools.which("wireguard-go")
        log_path = self._dir(job) / "wireguard-go.log"
        with open(log_path, "wb") as out:
            try:
                proc = subprocess.Popen(
                    [exe, "-f", name], stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    env={"PATH": self.tools.path, "WG_PROCESS_FOREGROUND": "1",
                         "LOG_LEVEL": "error"})
            except OSError as e:
                raise MeshError(f"cannot start {exe}: {e.strerror or e}") from None
        self._procs[job] = proc
        info = self._recorded(job) or {}
        self._record(job, {**info, "pid": proc.pid})
        deadline = time.monotonic() + SOCKET_WAIT_S
        while not sock.exists():
            if proc.poll() is not None:
                raise MeshError(f"wireguard-go exited ({proc.returncode}) before it made its "
                                f"device: {tail(log_path.read_bytes()) or 'no output'} "
                                "(is /dev/net/tun there, and does the worker run as root?)")
            if time.monotonic() > deadline:
                raise MeshError(f"wireguard-go made no control socket {sock} within "
                                f"{SOCKET_WAIT_S:g} s")
            time.sleep(0.02)

    def _wg_set(self, name: str, key_path: Path, port: int, cluster: ClusterSpec,
                peers: Iterable[Mapping[str, Any]]) -> None:
        argv = ["wg", "set", name, "private-key", str(key_path), "listen-port", str(port)]
        for p in peers:
            argv += ["peer", str(p["public_key"]), "allowed-ips",
                     f"{cluster.node_address(int(p['rank']))}/32", "endpoint",
                     str(p["endpoint"]), "persistent-keepalive", str(KEEPALIVE_S)]
        self.tools.run(argv)

    def _inside(self, pid: int, name: str, cluster: ClusterSpec) -> None:
        """In the container's namespace: the filter (``mesh_filter``), then rename, address
        and up (one ``ip -batch``)."""
        netns = f"--net=/proc/{int(pid)}/ns/net"
        self.tools.run(["nsenter", netns, "--", "nft", "-f", "-"],
                       stdin=mesh_filter(cluster.subnet).encode())
        prefix = cluster.subnet.split("/")[1]
        batch = "\n".join((
            f"link set dev {name} name {MESH_INTERFACE}",
            f"link set dev {MESH_INTERFACE} mtu {MTU} addrgenmode none",
            f"addr add {cluster.node_address()}/{prefix} dev {MESH_INTERFACE}",
            f"link set dev {MESH_INTERFACE} up",
        )) + "\n"
        self.tools.run(["nsenter", netns, "--", "ip", "-batch", "-"], stdin=batch.encode())

    def _await_bound(self, job: bytes, port: int) -> None:
        deadline = time.monotonic() + BIND_WAIT_S
        while udp_free(port):
            proc = self._procs.get(job)
            if proc is not None and proc.poll() is not None:
                raise MeshError(f"wireguard-go exited ({proc.returncode}) while coming up: "
                                f"{tail((self._dir(job) / 'wireguard-go.log').read_bytes())}")
            if time.monotonic() > deadline:
                raise MeshError(f"the mesh device did not listen on UDP port {port} within "
                                f"{BIND_WAIT_S:g} s")
            time.sleep(0.05)

    # ------------------------------------------------------------------ records, teardown

    def _record(self, job: bytes, info: Mapping[str, Any]) -> None:
        write_private(self._dir(job, create=True) / "device.json",
                       json.dumps(dict(info), sort_keys=True).encode())

    def _recorded(self, job: bytes) -> dict[str, Any] | None:
        try:
            doc = json.loads((self._dir(job) / "device.json").read_bytes())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def device_pid(self, job: bytes) -> int | None:
        """The running wireguard-go of ``job``'s mesh, or None."""
        info = self._recorded(job) or {}
        pid = info.get("pid")
        if isinstance(pid, int) and is_wireguard_go(pid, str(info.get("ifname", ""))):
            return pid
        return None

    def teardown(self, job: bytes) -> None:
        """End ``job``'s mesh device: stop its wireguard-go (its socket removed) or delete its
        kernel device; keeps its key, port and peer list. No error when there is none."""
        with self._lock:
            info = self._recorded(job)
            proc = self._procs.pop(job, None)
            if proc is not None:
                stop(proc)
            if info is None:
                return
            name = str(info.get("ifname", ""))
            pid = info.get("pid")
            if proc is None and isinstance(pid, int) and is_wireguard_go(pid, name):
                kill_pid(pid)
            if name:
                sock = self.wg_run_dir / f"{name}.sock"
                try:
                    sock.unlink()
                except FileNotFoundError:
                    pass
                if info.get("backend") == "kernel":
                    self._delete_kernel_device(name, info)
            try:
                (self._dir(job) / "device.json").unlink()
            except FileNotFoundError:
                pass

    def _delete_kernel_device(self, name: str, info: Mapping[str, Any]) -> None:
        self.tools.run(["ip", "link", "del", "dev", name], check=False)  # never moved
        netns_pid = info.get("netns_pid")
        netns = f"/proc/{netns_pid}/ns/net"
        if isinstance(netns_pid, int) and inode(netns) == info.get("netns"):
            self.tools.run(["nsenter", f"--net={netns}", "--", "ip", "link", "del", "dev",
                            MESH_INTERFACE], check=False)

    def forget(self, job: bytes) -> None:
        """``teardown`` and delete the job's key, port and peer list (its job ended)."""
        with self._lock:
            self.teardown(job)
            d = self._dir(job)
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
                log.info("job %s: mesh key deleted, UDP port freed", b58encode(job))

    def jobs(self) -> set[bytes]:
        """Jobs with a mesh directory here."""
        out: set[bytes] = set()
        if self.root.is_dir():
            for d in self.root.iterdir():
                try:
                    out.add(decode_pubkey(d.name, "job"))
                except ValueError:
                    continue
        return out

    def reconcile(self, running: Iterable[bytes], live: Iterable[bytes]) -> None:
        """Once per poll: forget the meshes of jobs that are not ``live`` (ended), end the
        devices of jobs not ``running`` and reap wireguard-go processes that exited (their
        container's namespace went away)."""
        running, live = set(running), set(live)
        with self._lock:
            for job in self.jobs():
                try:
                    if job not in live:
                        self.forget(job)
                    elif job not in running and self._recorded(job) is not None:
                        self.teardown(job)
                except (MeshError, OSError) as e:
                    log.warning("job %s: ending its mesh failed (%s); retrying next poll",
                                b58encode(job), e)
            for job, proc in list(self._procs.items()):
                if proc.poll() is not None:
                    self._procs.pop(job, None)

    def close(self) -> None:
        """Reap the wireguard-go processes that exited (the others keep running: a worker
        restart must not cut running clusters)."""
        with self._lock:
            for job, proc in list(self._procs.items()):
                if proc.poll() is not None:
                    self._procs.pop(job, None)
