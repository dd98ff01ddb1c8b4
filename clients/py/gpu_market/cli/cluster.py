"""``gpum cluster create|status|logs|down|list``: K nodes on one private network, as one thing.

``create`` plans the nodes (:mod:`gpu_market.cluster_plan`), checks everything that needs no
signature (offers online and serving cluster nodes, the committee, every node's workload, a
balance that pays every deposit) and, unless ``--dry-run``, creates and starts the nodes as a
gang (:mod:`gpu_market.cluster_gang`): every container runs, or every job is released and the
error names the node that failed. It prints the cluster's endpoint (node 0's published ports).
The flow is the SDK's :mod:`gpu_market.cluster`, which ``gpu_market.create_cluster`` runs too.

Clusters are named (``--name``, default ``cluster-<id>``) in the local record
(:mod:`gpu_market.cluster_store`); ``status``, ``logs`` and ``down`` take the name or the id.
Text output shows tokens, GPU-hours and dates; ``--output json`` base units where it says so.
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction
from typing import Any

import click
from solders.pubkey import Pubkey

from ..cluster_spec import MAX_NODES
from ..deployment import parse_gpu, parse_hours
from .base import CliError, Duration, Env, common, market_option, parse_callback, resolve_url

__all__ = ["cluster"]

_sleep = time.sleep  # tests replace them
_monotonic = time.monotonic


class _Progress:
    """The waiting line on stderr (text output only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.tty, self.last = enabled, enabled and sys.stderr.isatty(), ""

    def show(self, text: str) -> None:
        if not self.enabled or text == self.last:
            return
        if self.tty:
            click.echo("\r\x1b[K" + text, err=True, nl=False)
        else:
            click.echo(text, err=True)
        self.last = text

    def done(self) -> None:
        if self.tty and self.last:
            click.echo("", err=True)
        self.last = ""


def _hooks(env: Env) -> Any:
    from ..deployment import Hooks, cli_flag

    return Hooks(sleep=lambda s: _sleep(s), monotonic=lambda: _monotonic(),
                 progress=_Progress(env.output == "text"), flag=cli_flag)  # fmt: skip


@click.group("cluster")
def cluster() -> None:
    """Clusters: several nodes of GPUs, across providers, joined in one private network
    (WireGuard), with the environment torchrun and Ray need (NODE_RANK, MASTER_ADDR, ...)."""


def _pairs(values: tuple[str, ...], hint: str) -> dict[str, str]:
    from ..workload import WorkloadSpecError, parse_env_arg

    out: dict[str, str] = {}
    for text in values:
        try:
            k, v = parse_env_arg(text)
        except WorkloadSpecError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None
        if k in out:
            raise click.BadParameter(f"{k} is given twice", param_hint=hint)
        out[k] = v
    return out


@cluster.command("create", context_settings={"ignore_unknown_options": False})
@common
@market_option
@click.option("--gpu", metavar="MODEL:N", required=True,
              callback=parse_callback(parse_gpu, "'--gpu'"),
              help="GPU model (a substring of the provider's) and GPUs per node, e.g. H100:8.")
@click.option("--nodes", type=int, required=True, metavar="K",
              help=f"How many nodes (2..{MAX_NODES}); several may share a provider when that "
                   "is cheaper.")  # fmt: skip
@click.option("--hours", metavar="HOURS", required=True,
              callback=parse_callback(parse_hours, "'--hours'"),
              help="Time to prepay on every node (2, 0.5, 90m, 1h30m).")
@click.option("--image", default=None, help="The container image every node runs (default: "
              "the template's).")
@click.option("--template", "template_ref", default=None, metavar="ray|torchrun|FILE",
              help="What each node runs around your command (see the cluster templates).")
@click.option("--port", "ports", multiple=True, metavar="PORT[/udp]",
              help="Container port published on every node (repeatable); node 0's are the "
                   "cluster's endpoint.")  # fmt: skip
@click.option("--region", default=None, help="Only providers of this region.")
@click.option("--max-price", default=None, metavar="PRICE",
              help="Highest price per GPU-hour you accept, in tokens.")
@click.option("--env", "env_vars", multiple=True, metavar="K=V",
              help="Environment variable on every node (repeatable).")
@click.option("--secret", "secrets", multiple=True, metavar="K=V",
              help="Secret variable on every node, sealed to each node's worker key.")
@click.option("--shm-size", "shm_size_mib", type=click.IntRange(1), default=None,
              help="Shared memory per node, MiB.")
@click.option("--finish-on-exit/--no-finish-on-exit", default=None,
              help="A node's job finishes when its container exits (default: the template's, "
                   "else no).")  # fmt: skip
@click.option("--name", default=None, help="A name for the cluster (default cluster-<id>).")
@click.option("--timeout", "wait_timeout", type=Duration(low=1), default=600, show_default=True,
              help="How long every node has to be created, joined and running; then every job "
                   "is released (Open ones refunded in full).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Show the plan and its cost; send nothing.")
@click.option("--managed", is_flag=True,
              help="Replace a node that fails (same rank and mesh address, another provider) "
                   "by a controller running in the foreground; `gpum cluster watch` resumes it.")  # fmt: skip
@click.option("--max-replacements", type=click.IntRange(0, 100), default=3, show_default=True,
              help="With --managed: the most nodes replaced over the cluster's life.")
@click.argument("command", nargs=-1, metavar="[-- COMMAND...]")
def cluster_create(env: Env, market: Pubkey, gpu: tuple[str, int], nodes: int, hours: Fraction,
                   image: str | None, template_ref: str | None, ports: tuple[str, ...],
                   region: str | None, max_price: str | None, env_vars: tuple[str, ...],
                   secrets: tuple[str, ...], shm_size_mib: int | None, finish_on_exit: bool | None,
                   name: str | None, wait_timeout: int, dry_run: bool, managed: bool,
                   max_replacements: int, command: tuple[str, ...]) -> None:  # fmt: skip
    """Rent K nodes of N GPUs each, run the container on every node, join them in one private
    network and print the cluster's endpoint (node 0's published ports). Every node's
    container starts only once all of them can; if that does not happen within --timeout,
    every job is released and the error names the node that failed.

    COMMAND (after --) is what every node runs, or, with --template, what the template runs:
    torchrun's script and its arguments, Ray's driver on the head."""
    from ..cluster import ClusterError, ClusterRequest, launch, prepare
    from ..cluster_templates import TemplateError, load_cluster_template
    from ..cluster_world import ChainClusterWorld
    from ..workload import WorkloadSpecError, parse_port_arg

    if not 2 <= nodes <= MAX_NODES:
        raise click.BadParameter(f"{nodes}: a cluster has 2..{MAX_NODES} nodes (for one node, use "
                                 "`gpum run`)", param_hint="'--nodes'")  # fmt: skip
    for p in ports:
        try:
            parse_port_arg(p)
        except WorkloadSpecError as e:
            raise click.BadParameter(str(e), param_hint="'--port'") from None
    try:
        template = None if template_ref is None else load_cluster_template(template_ref)
    except TemplateError as e:
        raise click.BadParameter(str(e), param_hint="'--template'") from None
    env_map, secret_map = _pairs(env_vars, "'--env'"), _pairs(secrets, "'--secret'")
    model, gpus = gpu
    req = ClusterRequest(model=model, gpus=gpus, nodes=nodes, seconds=hours, image=image,
                         command=command, env=env_map, secrets=secret_map, ports=ports,
                         template=template, region=region, max_price=max_price,
                         shm_size_mib=shm_size_mib, finish_on_exit=finish_on_exit, name=name)  # fmt: skip
    hooks = _hooks(env)
    world = ChainClusterWorld(env.client, env.keypair, market)
    deadline = _monotonic() + wait_timeout
    try:
        prepared = prepare(world, req, hooks=hooks, deadline=deadline)
        summary = prepared.summary()
        if dry_run:
            balance = {"balance": _tokens(prepared.balance, prepared.decimals)}
            env.emit({"dry_run": True, **summary, **balance},
                     None if env.output == "json" else _plan_lines(summary, dry_run=True))  # fmt: skip
            return
        policy = None
        if managed:
            from ..cluster_managed import managed_policy

            policy = managed_policy(req, prepared, max_replacements=max_replacements)
        statuses = launch(world, prepared, hooks=hooks, deadline=deadline, managed=policy)
    except ClusterError as e:
        raise CliError(str(e)) from None
    finally:
        world.close()
    from ..deployment import ports as published

    nodes_out = []
    for n, s in zip(prepared.nodes, statuses):
        endpoints, mappings = published(s)
        nodes_out.append({"rank": n.rank, "job": str(n.job), "provider": str(n.provider),
                          "endpoints": endpoints, "ports": mappings})  # fmt: skip
    endpoint = nodes_out[0]["endpoints"][0] if nodes_out[0]["endpoints"] else None
    data = {**summary, "state": "running", "endpoint": endpoint, "managed": managed, "nodes": [
        {**plan, **node} for plan, node in zip(summary["nodes"], nodes_out)]}  # fmt: skip
    env.emit(data, None if env.output == "json" else _plan_lines(data, dry_run=False))
    if managed:
        sys.stdout.flush()
        _watch(env, prepared.cluster_id, {**secret_map, **prepared.shared})


def _watch(env: Env, cluster_id: str, secrets: dict[str, str]) -> None:
    """Run a managed cluster's controller here until Ctrl-C, `gpum cluster down` or it gives
    up; each event one line (text) or one JSON object (json)."""
    import json

    from ..cluster_managed import watch
    from ..cluster_store import ClusterStore, StoreError
    from ..managed.store import ControllerBusy

    store = ClusterStore()

    def say(level: str, text: str) -> None:
        if env.output == "json":
            click.echo(json.dumps({"cluster": cluster_id, "event": level, "at": int(time.time()),
                                   "text": text}))  # fmt: skip
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            click.echo(f"{stamp}  {level}: {text}")
        sys.stdout.flush()

    try:
        record = store.get(cluster_id)
        if env.output != "json":
            click.echo(f"controller of cluster {record.name} running (Ctrl-C stops it; the "
                       f"cluster runs on, and `gpum cluster watch {record.name}` resumes it)",
                       err=True)  # fmt: skip
        end = watch(store, record, env.client, env.keypair, secrets=secrets, say=say,
                    sleep=lambda s: _sleep(s))  # fmt: skip
    except (StoreError, ControllerBusy) as e:
        raise CliError(str(e)) from None
    except KeyboardInterrupt:
        click.echo("controller stopped; the cluster runs on: `gpum cluster watch` resumes it",
                   err=True)  # fmt: skip
        return
    gave_up = (end.managed or {}).get("gave_up")
    if gave_up:
        raise CliError(gave_up)


@cluster.command("watch")
@common
@click.argument("ref", metavar="CLUSTER")
def cluster_watch(env: Env, ref: str) -> None:
    """Run a managed cluster's controller (a node that fails is replaced) until Ctrl-C or
    `gpum cluster down`. The cluster's secrets come from the environment, by name."""
    import os

    c = _open(env, ref)
    if not c.record.managed:
        raise CliError(f"cluster {c.name} is not managed (`gpum cluster create --managed` makes "
                       "one); `gpum cluster status` names a failed node, `gpum cluster down` "
                       "ends it")  # fmt: skip
    names = {n for t in c.record.managed["templates"] for n in t.get("secrets", ())}
    _watch(env, c.id, {n: os.environ[n] for n in names if n in os.environ})


def _tokens(base: int, decimals: int) -> str:
    from ..units import format_ui_amount

    return format_ui_amount(base, decimals)


def _plan_lines(d: dict[str, Any], *, dry_run: bool) -> list[str]:
    head = "would rent" if dry_run else "running"
    lines = [f"cluster {d['name']} ({d['cluster']}) {head}: {len(d['nodes'])} nodes of "
             f"{d['gpus_per_node']} GPU(s) on {d['providers']} provider(s), image {d['image']}"
             + (f", template {d['template']}" if d.get("template") else "")]
    if not dry_run:
        lines.append(f"  endpoint: {d.get('endpoint') or 'none (node 0 publishes no port)'}")
    for n in d["nodes"]:
        where = f" at {', '.join(n['endpoints'])}" if n.get("endpoints") else ""
        job = f" job {n['job']}" if n.get("job") else ""
        lines.append(f"  node {n['rank']}:{job} provider {n['provider']} ({n['region']}), "
                     f"{n['price_per_gpu_hour']} per GPU-hour, deposit {n['deposit']}{where}")
    lines.append(f"  cost: {d['cost_per_hour']} per hour for the cluster; deposits "
                 f"{d['deposit']} in all for {d['hours']} h per node")
    if dry_run:
        lines.append(f"  your balance: {d['balance']}; nothing was sent")
    else:
        lines.append(f"  `gpum cluster status {d['name']}`, `gpum cluster logs {d['name']}`, "
                     f"`gpum cluster down {d['name']}`")
    return lines


def _open(env: Env, ref: str) -> Any:
    from ..cluster import Cluster
    from ..cluster_store import ClusterStore, StoreError

    try:
        record = ClusterStore().find(ref, resolve_url(env.url))
    except StoreError as e:
        raise CliError(str(e)) from None
    return Cluster(record, env.client, env.keypair)


@cluster.command("status")
@common
@click.argument("ref", metavar="CLUSTER")
def cluster_status(env: Env, ref: str) -> None:
    """Every node's job and container: running, or what is wrong with the node that is not
    (a failed node is not replaced: `gpum cluster down` stops and closes them all)."""
    c = _open(env, ref)
    s = c.status()
    if env.output == "json":
        env.emit(s)
        return
    lines = [f"cluster {s['name']} ({s['cluster']}): {s['state']}",
             f"  endpoint: {s['endpoint'] or '-'}"]
    for n in s["nodes"]:
        where = ", ".join(n["endpoints"]) or "-"
        lines.append(f"  node {n['rank']}: job {n['job'] or '-'} {n['status']}, container "
                     f"{n['state'] or '-'}, {where}" + (f"; {n['problem']}" if n["problem"] else ""))
    m = s.get("managed")
    for r in (m or {}).get("replaced", []):
        lines.append(f"  replaced: node {r['rank']}'s job {r['job']} on provider {r['provider']} "
                     f"({r['state']}): {r['why']}")
    if m and m["gave_up"]:
        lines.append(f"  the controller gave up: {m['gave_up']}")
    if s["state"] == "degraded" and not (m and not m["gave_up"]):
        lines.append(f"  a node is not running: `gpum cluster logs {s['name']} --rank R` shows "
                     f"its output; `gpum cluster down {s['name']}` stops the cluster")
    elif s["state"] == "degraded":
        lines.append(f"  a node is not running; the cluster is managed: its controller (`gpum "
                     f"cluster watch {s['name']}`) replaces it, `gpum cluster down "
                     f"{s['name']}` stops the cluster")
    env.emit(s, lines)


@cluster.command("logs")
@common
@click.argument("ref", metavar="CLUSTER")
@click.option("--rank", type=click.IntRange(0), default=None, help="Only this node.")
@click.option("--tail", type=click.IntRange(0), default=None, help="Only the last N lines.")
def cluster_logs(env: Env, ref: str, rank: int | None, tail: int | None) -> None:
    """The containers' output, node by node."""
    from ..cluster import ClusterError

    c = _open(env, ref)
    try:
        logs = {rank: c.logs(rank, tail)} if rank is not None else c.logs(tail=tail)
    except ClusterError as e:
        raise CliError(str(e)) from None
    if env.output == "json":
        env.emit({"cluster": c.id, "name": c.name, "logs": {str(r): t for r, t in logs.items()}})
        return
    for r, text in logs.items():
        click.echo(f"==> node {r} <==")
        click.echo(text, nl=not text.endswith("\n"))


@cluster.command("down")
@common
@click.argument("ref", metavar="CLUSTER")
@click.option("--timeout", "timeout", type=Duration(low=1), default=None,
              help="Give up waiting for each node's settlement grace after this long (default: "
                   "the grace plus 2m); `gpum cluster down` again closes the rest.")  # fmt: skip
def cluster_down(env: Env, ref: str, timeout: int | None) -> None:
    """Stop every node (billing stops), wait out their settlement graces and close them:
    the receipts by node and in all (deposited, paid, refunded)."""
    from ..cluster import ClusterError
    from ..deployment import Hooks, cli_flag

    c = _open(env, ref)
    progress = _Progress(env.output == "text")
    hooks = Hooks(sleep=lambda s: _sleep(s), monotonic=lambda: _monotonic(), flag=cli_flag)
    try:
        receipts = c.down(timeout, hooks=hooks, say=progress.show)
    except ClusterError as e:
        raise CliError(str(e)) from None
    finally:
        progress.done()
    total = {k: sum(r.as_dict()[k] for r in receipts.values())
             for k in ("deposited", "paid", "fees", "refunded")}  # fmt: skip
    every = [*receipts.values(), *c.retired_receipts.values()]
    total = {k: sum(r.as_dict()[k] for r in every) for k in ("deposited", "paid", "fees", "refunded")}
    data = {"cluster": c.id, "name": c.name, "state": "down",
            "receipts": {str(r): rc.as_dict() for r, rc in receipts.items()},
            "replaced": {job: rc.as_dict() for job, rc in c.retired_receipts.items()},
            "total": total}  # fmt: skip
    if env.output == "json":
        env.emit(data)
        return
    decimals = _decimals(env, c)
    t = lambda v: _tokens(v, decimals)
    lines = [f"cluster {c.name} ({c.id}) is down"]
    for r, rc in sorted(receipts.items()):
        lines.append(f"  node {r}: deposited {t(rc.deposited)}, paid {t(rc.paid)} (fees "
                     f"{t(rc.fees)}), refunded {t(rc.refunded)}")
    lines.append(f"  in all: deposited {t(total['deposited'])}, paid {t(total['paid'])}, refunded "
                 f"{t(total['refunded'])}")
    env.emit(data, lines)


def _decimals(env: Env, c: Any) -> int:
    m = env.client.fetch_market(Pubkey.from_string(c.record.market))
    return 6 if m is None else env.client.mint_decimals(m.payment_mint)


@cluster.command("list")
@common
def cluster_list(env: Env) -> None:
    """Your clusters in the local record (this machine), newest last."""
    from ..cluster_store import ClusterStore, StoreError

    try:
        records = ClusterStore().records(resolve_url(env.url), str(env.keypair.pubkey()))
    except StoreError as e:
        raise CliError(str(e)) from None
    rows = [{"name": r.name, "cluster": r.id, "state": r.state, "nodes": len(r.nodes),
             "gpus_per_node": r.gpus_per_node, "created_at": r.created_at} for r in records]  # fmt: skip
    if env.output == "json":
        env.emit({"clusters": rows})
        return
    from ..units import when

    now = int(time.time())
    env.emit({"clusters": rows}, [f"{r['name']}  {r['cluster']}  {r['state']}  {r['nodes']} x "
                                  f"{r['gpus_per_node']} GPU(s)  created {when(r['created_at'], now)}"
                                  for r in rows] or ["no clusters in the local record"])  # fmt: skip
