"""The cluster section of a workload spec (gpu_market.cluster_spec and its place in
gpu_market.workload), node job ids, mesh key verification (gpu_market.cluster_mesh) and the
cluster templates (gpu_market.cluster_templates)."""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import struct
from dataclasses import replace

import pytest
from gpu_market.cluster_mesh import MeshError, parse_mesh_key, peer_list
from gpu_market.cluster_spec import (
    CONTRACT_ENV,
    ClusterSpec,
    cluster_from_json,
    contract_env,
    node_job_id,
    subnet_for,
)
from gpu_market.cluster_templates import TemplateError, load_cluster_template
from gpu_market.mesh import mesh_key_digest
from gpu_market.receipt import sign
from gpu_market.workload import (
    WorkloadSpec,
    WorkloadSpecError,
    canonical_bytes,
    spec_from_json,
    spec_hash,
)
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature
from test_workload import GOLDEN, GOLDEN_HASH, MINIMAL_HASH

CID = "a1b2c3d4e5f60718"
NODE = ClusterSpec(CID, 1, 2, 4)


# ----------------------------------------------------------------------------- the spec


def test_a_spec_without_a_cluster_hashes_as_before_the_key_existed():
    assert spec_hash(GOLDEN).hex() == GOLDEN_HASH
    assert spec_hash(WorkloadSpec(image="x")).hex() == MINIMAL_HASH
    assert b"cluster" not in canonical_bytes(GOLDEN)


def test_the_cluster_key_encodes_every_field_and_round_trips():
    spec = replace(GOLDEN, cluster=NODE)
    obj = json.loads(canonical_bytes(spec))
    assert obj["cluster"] == {"id": CID, "rank": 1, "nodes": 2, "gpus_per_node": 4,
                              "master_port": 29500, "subnet": "10.77.161.0/24"}  # fmt: skip
    assert spec_from_json(canonical_bytes(spec)) == spec
    assert spec_hash(spec) != spec_hash(GOLDEN)
    assert spec_hash(replace(GOLDEN, cluster=NODE.at_rank(0))) != spec_hash(spec)


def test_the_subnet_follows_from_the_id_and_node_addresses_from_the_rank():
    assert subnet_for("00ffffffffffffff") == "10.77.0.0/24"
    assert subnet_for("ff00000000000000") == "10.77.255.0/24"
    c = ClusterSpec(CID, 0, 3, 2)
    assert [c.node_address(r) for r in range(3)] == ["10.77.161.1", "10.77.161.2", "10.77.161.3"]
    env = contract_env(c.at_rank(2))
    assert set(env) == set(CONTRACT_ENV)
    assert env["NODE_RANK"] == "2" and env["NUM_NODES"] == "3" and env["WORLD_SIZE"] == "6"
    assert env["NODE_ADDR"] == "10.77.161.3" and env["MASTER_ADDR"] == "10.77.161.1"
    assert env["NODE_IPS"].splitlines() == ["10.77.161.1", "10.77.161.2", "10.77.161.3"]
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "gpum0"


GOOD = {"id": CID, "rank": 0, "nodes": 2, "gpus_per_node": 1, "master_port": 29500,
        "subnet": "10.77.161.0/24"}  # fmt: skip


@pytest.mark.parametrize(("change", "message"), [
    ({"rank": 2}, r"cluster.rank=2 is out of range; allowed 0..1"),
    ({"rank": -1}, r"cluster.rank=-1 is out of range"),
    ({"nodes": 1, "rank": 0}, r"cluster.nodes=1 is out of range; allowed 2..64"),
    ({"nodes": 65}, r"cluster.nodes=65 is out of range; allowed 2..64"),
    ({"nodes": True}, r"cluster.nodes must be an integer"),
    ({"gpus_per_node": 0}, r"cluster.gpus_per_node=0 is out of range"),
    ({"gpus_per_node": 257}, r"cluster.gpus_per_node=257 is out of range"),
    ({"master_port": 0}, r"cluster.master_port=0 is out of range"),
    ({"master_port": 65536}, r"cluster.master_port=65536"),
    ({"id": "A1B2C3D4E5F60718"}, r"cluster.id must be 16 lowercase hex"),
    ({"id": "a1b2"}, r"cluster.id must be 16 lowercase hex"),
    ({"id": 7}, r"cluster.id must be 16 lowercase hex"),
    ({"subnet": "10.78.1.0/24"}, r"cluster.subnet must be 10.77.X.0/24"),
    ({"subnet": "10.77.256.0/24"}, r"cluster.subnet must be 10.77.X.0/24"),
    ({"subnet": "10.77.01.0/24"}, r"cluster.subnet must be 10.77.X.0/24"),
    ({"subnet": "10.77.1.0/16"}, r"cluster.subnet must be 10.77.X.0/24"),
    ({"subnet": 5}, r"cluster.subnet must be a string"),
    ({"extra": 1}, r"cluster has the unknown key 'extra'"),
])  # fmt: skip
def test_a_bad_cluster_section_is_refused_naming_the_field(change: dict, message: str):
    text = json.dumps({"image": "x", "cluster": {**GOOD, **change}})
    with pytest.raises(WorkloadSpecError, match=message):
        spec_from_json(text)


@pytest.mark.parametrize("missing", sorted(GOOD))
def test_every_cluster_key_is_required(missing: str):
    section = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(WorkloadSpecError, match=f'cluster is missing "{missing}"'):
        spec_from_json({"image": "x", "cluster": section})


def test_floats_and_non_objects_are_refused():
    with pytest.raises(WorkloadSpecError, match="only integers"):
        spec_from_json('{"image": "x", "cluster": {"rank": 0.0}}')
    with pytest.raises(WorkloadSpecError, match="cluster must be a JSON object"):
        cluster_from_json([GOOD])


@pytest.mark.parametrize("name", ["NODE_RANK", "MASTER_ADDR", "WORLD_SIZE", "NCCL_SOCKET_IFNAME"])
def test_a_cluster_node_may_not_set_a_variable_of_the_contract(name: str):
    with pytest.raises(WorkloadSpecError, match=f"{name} is set by the cluster's environment"):
        replace(WorkloadSpec(image="x", env=((name, "3"),)), cluster=NODE).validate()
    WorkloadSpec(image="x", env=((name, "3"),)).validate()  # no cluster: the user's own
    with pytest.raises(WorkloadSpecError, match="ClusterSpec or None"):
        replace(WorkloadSpec(image="x"), cluster=GOOD).validate()  # type: ignore[arg-type]


def test_node_job_ids_are_fixed_by_cluster_and_rank():
    digest = hashlib.sha256(b"gpum-cluster-node-v1" + bytes.fromhex(CID) + (1).to_bytes(4, "little"))
    assert node_job_id(CID, 1) == int.from_bytes(digest.digest()[:8], "little")
    ids = {node_job_id(CID, r) for r in range(64)}
    assert len(ids) == 64 and node_job_id(CID, 3) == node_job_id(CID, 3)
    assert node_job_id("a1b2c3d4e5f60719", 0) != node_job_id(CID, 0)
    with pytest.raises(WorkloadSpecError):
        node_job_id(CID, 64)


# ----------------------------------------------------------------------------- mesh keys

WORKER = Keypair.from_seed(bytes([5] * 32))
JOB = Pubkey.from_bytes(bytes(range(32)))
WG = bytes(range(100, 132))


def answer(endpoint: str = "203.0.113.7:51820", key: bytes = WG, signer: Keypair = WORKER,
           job: Pubkey = JOB) -> dict:  # fmt: skip
    sig = sign(bytes(signer)[:32], mesh_key_digest(bytes(job), key, endpoint))
    return {"job": str(job), "public_key": base64.b64encode(key).decode(), "endpoint": endpoint,
            "worker_key": str(signer.pubkey()), "signature": str(Signature.from_bytes(sig))}


def test_the_mesh_key_digest_is_the_documented_message():
    raw = b"gpu-market/mesh-key/v1" + bytes(JOB) + WG + struct.pack("<H", 17) + b"203.0.113.7:51820"
    assert mesh_key_digest(bytes(JOB), WG, "203.0.113.7:51820") == hashlib.sha256(raw).digest()


def test_a_key_signed_by_the_providers_worker_key_is_accepted():
    k = parse_mesh_key(answer(), JOB, WORKER.pubkey(), "node 1")
    assert k.endpoint == "203.0.113.7:51820" and base64.b64decode(k.public_key) == WG
    assert parse_mesh_key(answer("[2001:db8::1]:51820"), JOB, WORKER.pubkey(), "n").endpoint
    assert parse_mesh_key(answer("node7.example:51820"), JOB, WORKER.pubkey(), "n").endpoint
    other = replace(k, job=Pubkey.from_bytes(bytes(32)), endpoint="198.51.100.1:1")
    body = peer_list([k, other], 1)
    assert body == {"peers": [k.peer(0)]}
    assert body["peers"][0] == {"rank": 0, "job": str(JOB), "public_key": k.public_key,
                                "endpoint": k.endpoint, "worker_key": str(WORKER.pubkey()),
                                "signature": k.signature}  # fmt: skip


@pytest.mark.parametrize(("body", "message"), [
    (answer(signer=Keypair()), r"node 1 signed its mesh key with .*, not the provider's current"),
    ({**answer(), "worker_key": str(WORKER.pubkey()),
      "signature": answer(signer=Keypair())["signature"]}, r"signature does not verify"),
    ({**answer(), "endpoint": "203.0.113.8:51820"}, r"signature does not verify"),
    (answer(job=Pubkey.from_bytes(bytes(32))), r"answered the mesh key of job"),
    (answer("0.0.0.0:51820"), r"nobody can send to an unspecified address"),
    (answer("[::]:51820"), r"nobody can send to an unspecified address"),
    (answer("203.0.113.7:0"), r"not host:port"),
    (answer("203.0.113.7"), r"not host:port"),
    (answer("::1:51820"), r"write an IPv6 address in brackets"),
    ({**answer(), "public_key": base64.b64encode(bytes(31)).decode()}, r"not 32 bytes of standard"),
    ({**answer(), "signature": "zz"}, r"not a base58 ed25519 signature"),
    ("nope", r"something else than a JSON object"),
])  # fmt: skip
def test_a_bad_mesh_key_is_refused_naming_the_node(body: object, message: str):
    with pytest.raises(MeshError, match=message) as e:
        parse_mesh_key(body, JOB, WORKER.pubkey(), "node 1")
    assert "node 1" in str(e.value) and not e.value.retry


# ----------------------------------------------------------------------------- templates


def test_torchrun_runs_the_users_script_on_every_node_with_the_contract():
    t = load_cluster_template("torchrun")
    head = t.command(0, ["train.py", "--name", "a b"])
    assert head == t.command(1, ["train.py", "--name", "a b"])
    assert head[:2] == ("/bin/sh", "-c")
    line = head[2]
    assert line.startswith('exec torchrun --nnodes "$NUM_NODES" --node_rank "$NODE_RANK" '
                           '--nproc_per_node "$GPUS_PER_NODE" --master_addr "$MASTER_ADDR" '
                           '--master_port "$MASTER_PORT" ')  # fmt: skip
    assert shlex.split(line)[-3:] == ["train.py", "--name", "a b"]
    assert t.finish_on_exit is True
    with pytest.raises(TemplateError, match="give it after --"):
        t.command(0, [])


def test_ray_runs_the_head_on_node_0_and_joins_the_others():
    t = load_cluster_template("ray")
    head = t.command(0, ["python3", "driver.py"])[2]
    worker = t.command(1, ["python3", "driver.py"])[2]
    assert head.startswith('export RAY_AUTH_MODE=token\nray start --head --node-ip-address '
                           '"$NODE_ADDR" --port 6379 --dashboard-host 0.0.0.0')
    assert head.endswith("exec python3 driver.py") and 'ray.nodes()' in head
    assert worker.startswith("export RAY_AUTH_MODE=token\n")
    assert worker.endswith('exec ray start --address "$MASTER_ADDR:6379" --node-ip-address '
                           '"$NODE_ADDR" --disable-usage-stats --block $RAY_START_ARGS')
    assert "--disable-usage-stats $RAY_START_ARGS" in head
    assert t.ports == ("8265",) and t.command(0, [])[2].endswith("exec sleep infinity")
    assert t.shared_secret == "RAY_AUTH_TOKEN"
    assert load_cluster_template("torchrun").shared_secret is None


def test_a_user_template_overrides_and_a_broken_one_is_named(gpum_home):
    folder = gpum_home / "config" / "gpum" / "templates" / "cluster"
    folder.mkdir(parents=True)
    (folder / "torchrun.toml").write_text('run = "exec echo {command}"\n')
    assert load_cluster_template("torchrun").command(1, ["hi"])[2] == "exec echo hi"
    (folder / "bad.toml").write_text('run = "x"\nhead = "y"\n')
    with pytest.raises(TemplateError, match="either run"):
        load_cluster_template("bad")
    (folder / "odd.toml").write_text('command = "x"\n')
    with pytest.raises(TemplateError, match="unknown key 'command'"):
        load_cluster_template("odd")
    (folder / "leaky.toml").write_text('run = "x"\nshared_secret = "A B"\n')
    with pytest.raises(TemplateError, match="shared_secret must be a variable name"):
        load_cluster_template("leaky")
    with pytest.raises(TemplateError, match="no cluster template named 'nope'; known: bad, leaky, "
                                            "odd, ray, torchrun"):  # fmt: skip
        load_cluster_template("nope")


# ----------------------------------------------------------------------------- mesh requests


def test_mesh_requests_sign_the_workload_hash_for_a_get_and_the_body_for_a_post():
    import hashlib as h
    import time

    import httpx
    from gpu_market.cluster_mesh import get_mesh_key, post_peers
    from gpu_market.net import BoundedClient
    from gpu_market.workload import verify_request

    user = Keypair()
    whash = h.sha256(b"spec").digest()
    seen: list[tuple[str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = request.read()
        seen.append((request.method, body))
        signed = whash if request.method == "GET" else h.sha256(body).digest()
        verify_request(request.headers, "mesh", bytes(JOB), signed,
                       expected_signer=bytes(user.pubkey()), now=int(time.time()))  # fmt: skip
        assert request.url.path == f"/v1/jobs/{JOB}/mesh"
        if request.method == "GET":
            return httpx.Response(200, json=answer())
        return httpx.Response(200, json={"status": "configured"})

    http = BoundedClient(transport=httpx.MockTransport(handler))
    key = get_mesh_key(http, "http://w:1", JOB, whash, user, WORKER.pubkey(), deadline=5, who="n")
    assert post_peers(http, "w:1", JOB, whash, user, peer_list([key, key], 1), deadline=5,
                      who="n") == {"status": "configured"}  # fmt: skip
    assert json.loads(seen[1][1]) == {"peers": [key.peer(0)]}


@pytest.mark.parametrize(("status", "body", "retry"), [
    (503, {"error": "chain_unavailable", "message": "retry later"}, True),
    (409, {"error": "spec_not_delivered", "message": "deliver first"}, True),
    (404, {"error": "unknown job"}, True),
    (409, {"error": "mesh_configured", "message": "another list was accepted"}, False),
    (409, {"error": "not_a_cluster_node", "message": "no cluster section"}, False),
    (400, {"error": "bad_peer_list", "message": "rank 3 twice"}, False),
    (403, {"error": "peer_refused", "message": "another user's job"}, False),
])  # fmt: skip
def test_a_mesh_refusal_says_whether_asking_again_may_help(status, body, retry):
    import httpx
    from gpu_market.cluster_mesh import get_mesh_key
    from gpu_market.net import BoundedClient

    http = BoundedClient(transport=httpx.MockTransport(lambda r: httpx.Response(status, json=body)))
    with pytest.raises(MeshError) as e:
        get_mesh_key(http, "w:1", JOB, bytes(32), Keypair(), WORKER.pubkey(), deadline=5,
                     who="node 2's worker")  # fmt: skip
    assert e.value.retry is retry and e.value.status == status
    assert str(e.value).startswith("node 2's worker answered GET") and body["error"] in str(e.value)
    assert body.get("message", "") in str(e.value)
