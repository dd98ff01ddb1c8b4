"""``gpum provider init``: a GPU machine from nothing to a verified offer in one command, and
``gpum provider reprice``: auto-pricing within the provider's bounds.

``init`` runs the steps of :mod:`gpu_market.onboarding` (GPUs, local benchmark, price,
worker configuration, service, endpoint probe, registration, stake, the validators' verdict),
each recorded in the state file of the provider's data folder, so running it again after an
interruption or a fixed error continues and never registers or stakes twice. It prints a
progress line per step on stderr, then one summary (``--output json``: every step with its
outcome, its start (Unix seconds) and its duration, base units).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from solders.pubkey import Pubkey

from ..onboarding import (
    DEFAULT_PRICE_PER_GPU_HOUR,
    STEPS,
    AutoPrice,
    InitState,
    OnboardingError,
    RunLock,
    choose_price,
    detect_gpus,
    gpu_backend,
    market_prices,
    parse_simulate,
    provider_changes,
    reprice,
    run_benchmark,
    stake_to_add,
)
from ..units import format_price_per_hour, format_span, format_ui_amount
from .base import DURATION, CliError, Duration, Env, token_holding
from .base import common as _common
from .base import market_option as _market_option
from .base import market_view as _market

__all__ = ["provider_init", "provider_reprice"]

VERIFY_POLL_S = 2.0
PROGRESS_EVERY_S = 15.0


def _price_base(text: str, decimals: int, hint: str) -> int:
    from ..units import AmountError, parse_price_per_hour

    try:
        return parse_price_per_hour(text, decimals)
    except AmountError as e:
        raise click.BadParameter(str(e), param_hint=hint) from None


def _percent_bps(ctx: Any, param: Any, value: str) -> int:
    text = str(value).strip().removesuffix("%").strip()
    try:
        bps = round(float(text) * 100)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 5 or 5%)") from None
    if not 0 <= bps <= 10_000:
        raise click.BadParameter("a percentage 0..100")
    return bps


class InitRun:
    """One run of ``gpum provider init`` (the options, the chain, the state, the steps)."""

    def __init__(self, env: Env, market: Pubkey, o: dict[str, Any]) -> None:
        from .. import pda
        from ..challenge_verdict import load_bounds
        from ..onboarding_machine import make_data_dir, parse_endpoint, provider_data_dir

        self.env, self.market, self.o = env, market, o
        self.client = env.client
        self.kp = env.keypair
        self.m = _market(env, market)
        self.address = pda.provider_pda(market, self.kp.pubkey(), self.client.program_id)
        try:
            self.endpoint, self.listen = parse_endpoint(o["endpoint"], o["listen"])
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--endpoint'") from None
        self.data_dir = make_data_dir(Path(o["data_dir"]) if o["data_dir"] else
                                      provider_data_dir(market, self.kp.pubkey()))
        self.table = load_bounds()
        self.sim = None
        if o["simulate"]:
            try:
                self.sim = parse_simulate(o["simulate"])
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="'--simulate'") from None
        self.decimals = self.client.mint_decimals(self.m.payment_mint)
        self.flag_price = (None if o["price"] is None else
                           _price_base(o["price"], self.decimals, "'--price'"))
        self.default_price = _price_base(o["default_price"], self.decimals, "'--default-price'")
        self.auto_wanted: AutoPrice | None = None
        if o["auto_price"]:
            if o["min_price"] is None or o["max_price"] is None:
                raise click.UsageError("--auto-price needs --min-price and --max-price")
            try:
                self.auto_wanted = AutoPrice(
                    _price_base(o["min_price"], self.decimals, "'--min-price'"),
                    _price_base(o["max_price"], self.decimals, "'--max-price'"),
                    o["reprice_threshold"])
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="'--min-price'") from None
            if self.flag_price is not None and \
                    self.auto_wanted.clamp(self.flag_price) != self.flag_price:
                raise click.BadParameter("outside --min-price..--max-price",
                                         param_hint="'--price'")
        self.state: InitState | None = None
        self.results: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.setup: Any = None
        self.started_pid: int | None = None
        self.gpus: Any = None
        self.price = 0
        self.auto: AutoPrice | None = None
        self.mode = "process"
        self.worker_key: Pubkey | None = None
        self.config_sha256 = ""
        self.config_changed = False

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        with RunLock(self.data_dir):
            self.state = InitState(self.data_dir / "init-state.json")
            self.state.set(market=str(self.market), owner=str(self.kp.pubkey()),
                           provider=str(self.address), rpc_url=self.client.url)
            until = self.o["until"]
            for name in STEPS:
                self._step(name, getattr(self, f"step_{name}"))
                if name == until:
                    break
        self.summary(stopped_after=until if until and until != STEPS[-1] else None)

    def _say(self, text: str) -> None:
        if self.env.output != "json":
            click.echo(text, err=True)

    def _step(self, name: str, fn: Any) -> None:
        assert self.state is not None
        start_wall, start = time.time(), time.monotonic()
        self._say(f"[{STEPS.index(name) + 1}/{len(STEPS)}] {name} ...")
        try:
            status, inputs, outcome, text = fn()
        except BaseException as e:
            message = str(e) or type(e).__name__
            self.state.record(name, "failed", message=message, started_at=start_wall,
                              seconds=time.monotonic() - start)
            if isinstance(e, OnboardingError):
                raise CliError(f"{name}: {e}") from None
            raise
        seconds = time.monotonic() - start
        self.state.record(name, status, inputs=inputs, outcome=outcome, message=text,
                          started_at=start_wall, seconds=seconds)
        self.results.append({"step": name, "status": status, "outcome": outcome,
                             "message": text, "started_at": int(start_wall),
                             "seconds": round(seconds, 3)})
        self._say(f"      {status}: {text} ({seconds:.1f} s)")

    # ------------------------------------------------------------------ steps

    def step_gpus(self) -> tuple[str, dict, dict, str]:
        from ..onboarding_machine import simulated_seed

        sim = self.sim
        seed = simulated_seed(bytes(self.address)) if sim else None
        gpus = detect_gpus(gpu_backend(sim, seed or 0), self.table,
                           simulated_model=sim[1] if sim else None,
                           model_override=self.o["gpu_model"], seed=seed)
        self.gpus = gpus
        kind = "simulated GPUs" if gpus.simulated else f"NVML, driver {gpus.driver}"
        text = (f"{gpus.count} x {gpus.model}, {gpus.vram_mib / 1024:.1f} GiB each ({kind})"
                + ("" if gpus.known else "; the validators' bounds table does not know "
                   "this model"))
        return "done", {}, asdict(gpus), text

    def step_benchmark(self) -> tuple[str, dict, dict, str]:
        g = self.gpus
        inputs = {"model": g.model, "uuids": list(g.uuids), "backend": g.backend}
        assert self.state is not None
        done = self.state.done_with("benchmark", inputs)
        if done is None:
            done = asdict(run_benchmark(g, self.table))
        if done["passed"]:
            slowest = max((r.get("matmul_s", 0) for r in done["gpus"]), default=0)
            limit = min((r.get("max_matmul_s", 0) for r in done["gpus"]), default=0)
            text = (f"would pass a validator's challenge as {g.model}: matmul {slowest:.3f} s "
                    f"(at most {limit:.3f} s) on {done['backend']}, n={done['challenge']['n']}, "
                    f"{done['challenge']['rounds']} round(s)")
        else:
            text = f"WARNING: {done['warning']}"
            click.echo(f"warning: {done['warning']}", err=True)
        return "done", inputs, done, text

    def step_price(self) -> tuple[str, dict, dict, str]:
        from ..offers import list_offers
        from ..onboarding_machine import write_auto_price

        decimals, flag, default, auto = (self.decimals, self.flag_price, self.default_price,
                                         self.auto_wanted)
        inputs = {"price": flag, "default": default, "auto": auto and auto.to_json(),
                  "model": self.gpus.model}
        assert self.state is not None
        done = self.state.done_with("price", inputs)
        if done is None:
            offers = list_offers(self.client, self.market, include_full=True, probe=True)
            prices = market_prices(offers, self.gpus.model, exclude=self.address,
                                   table=self.table)
            try:
                choice = choose_price(flag=flag, market=prices, default=default, auto=auto)
            except OnboardingError as e:
                raise click.BadParameter(str(e), param_hint="'--price'") from None
            done = asdict(choice)
        if auto is not None:
            done["auto_price_file"] = str(write_auto_price(self.data_dir, auto))
        self.price = int(done["per_second"])
        self.auto = auto
        hour = format_price_per_hour(self.price, decimals)
        why = {"flag": "--price",
               "median": f"the median of {done['offers']} offer(s) of the model",
               "default": "the stated default (no offer of the model on the market)"}
        text = f"{hour} per GPU-hour: {why[done['source']]}"
        if done.get("clamped"):
            text += ", moved into your auto-pricing bounds"
        if auto is not None:
            lo, hi = (format_price_per_hour(v, decimals)
                      for v in (auto.min_per_second, auto.max_per_second))
            text += f"; auto-pricing between {lo} and {hi}"
        return "done", inputs, done, text

    def _worker_setup(self) -> Any:
        from ..onboarding_machine import WorkerSetup, simulated_seed, systemd_running

        o = self.o
        self.mode = ("none" if not o["start_worker"] else
                     "systemd" if not o["no_systemd"] and systemd_running() else "process")
        g = self.gpus
        sim = (g.count, g.simulate_seed or simulated_seed(bytes(self.address))) \
            if g.simulated else None
        return WorkerSetup(
            data_dir=self.data_dir,
            key_file=(Path(o["worker_key"]) if o["worker_key"] else
                      self.data_dir / "worker-key.json"),
            rpc_url=self.client.url, program_id=str(self.client.program_id),
            market=str(self.market), provider=str(self.address), listen=self.listen,
            simulate=sim, runtime=o["runtime"],
            containers_conf=Path(o["containers_conf"]) if o["containers_conf"] else None,
            reaper=self.mode != "systemd")

    def step_worker_config(self) -> tuple[str, dict, dict, str]:
        from ..base58 import b58encode
        from ..onboarding import atomic_write
        from ..onboarding_machine import ensure_worker_key, worker_config_text

        s = self.setup = self._worker_setup()
        key, created = ensure_worker_key(s.key_file)
        self.worker_key = Pubkey.from_bytes(key)
        text = worker_config_text(s)
        self.config_sha256 = hashlib.sha256(text.encode()).hexdigest()
        self.config_changed = atomic_write(s.config_file, text)
        outcome = {"config": str(s.config_file), "key_file": str(s.key_file),
                   "worker_key": b58encode(key), "key_created": created,
                   "config_changed": self.config_changed, "listen": s.listen}
        written = "written" if self.config_changed else "unchanged"
        return "done", {}, outcome, (f"{s.config_file} ({written}), worker key "
                                     f"{b58encode(key)}{' (new)' if created else ''}, API on "
                                     f"{s.listen}")

    def _reprice_argv(self) -> list[str] | None:
        if self.auto is None:
            return None
        from ..processes import tool
        from ..solana_cli import DEFAULT_KEYPAIR, solana_config

        keypair = self.env.keypair_path or solana_config().get("keypair_path", DEFAULT_KEYPAIR)
        return [tool("gpum"), "--url", self.client.url, "--keypair",
                str(Path(keypair).expanduser().resolve()), "--program-id",
                str(self.client.program_id), "provider", "reprice", "--market",
                str(self.market), "--data-dir", str(self.data_dir)]

    def step_service(self) -> tuple[str, dict, dict, str]:
        from ..onboarding_machine import (
            enable_commands,
            enable_units,
            start_worker,
            started_worker,
            stop_worker,
            systemd_units,
            worker_on_db,
            write_units,
        )
        from ..processes import ProcessError, tool

        s, o = self.setup, self.o
        try:
            worker_bin = tool("gpum-worker")
        except ProcessError:
            from ..onboarding import NO_WORKER_PACKAGE

            raise OnboardingError(NO_WORKER_PACKAGE) from None
        units = systemd_units(s, worker_bin, reprice=self._reprice_argv())
        outcome: dict[str, Any] = {"mode": self.mode}
        parts = []
        if not o["no_systemd"]:
            folder = Path(o["systemd_dir"])
            try:
                changed = write_units(folder, units)
            except OnboardingError as e:
                if self.mode == "systemd":
                    raise
                changed = None
                parts.append(f"systemd units not written ({e})")
            if changed is not None:
                outcome.update(units_dir=str(folder), units=sorted(units), units_changed=changed)
                cmds = enable_commands(sorted(units), restart=True)
                if self.mode == "systemd":
                    enable_units(sorted(units), restart=bool(changed) or self.config_changed)
                    parts.append(f"systemd: {', '.join(sorted(units))} enabled and started")
                else:
                    howto = " && ".join(" ".join(c) for c in cmds[:2])
                    outcome["enable_with"] = howto
                    parts.append(f"units written to {folder} (systemd does not run here; "
                                 f"once it does: `{howto}`)")
        if self.mode == "process":
            rec = started_worker(s)
            if rec is not None and rec.get("config_sha256") == self.config_sha256:
                self.started_pid = int(rec["pid"])
                parts.append(f"the worker runs (pid {self.started_pid}, log {s.log_file})")
            else:
                if rec is not None:
                    stop_worker(int(rec["pid"]), s.config_file)
                elif worker_on_db(s):
                    raise OnboardingError(f"a worker not started by `gpum provider init` runs "
                                          f"on {s.db}: stop it (this command starts the worker "
                                          "with the new configuration), or pass "
                                          "--no-start-worker and restart it yourself")
                self.started_pid = start_worker(s, worker_bin, self.config_sha256)
                parts.append(f"worker started (pid {self.started_pid}, log {s.log_file}); it "
                             "is not supervised: use the systemd units to keep it running")
            outcome["pid"] = self.started_pid
        elif self.mode == "none":
            parts.append("the worker is yours to start: "
                         f"`{' '.join(s.argv(worker_bin))}`")
        return "done", {}, outcome, "; ".join(parts)

    def step_endpoint(self) -> tuple[str, dict, dict, str]:
        from ..onboarding_machine import _alive, log_tail, wait_endpoint

        s = self.setup

        def problem() -> str:
            if self.started_pid is not None and not _alive(self.started_pid, s.config_file):
                return f"the worker exited: {log_tail(s.log_file)}"
            return ""

        why, waited = wait_endpoint(self.endpoint, str(self.worker_key),
                                    self.o["endpoint_timeout"], problem=problem)
        if why:
            where = {"process": f"its log {s.log_file}",
                     "systemd": "`journalctl -u gpum-worker -n 50`",
                     "none": "the worker you started"}[self.mode]
            raise OnboardingError(
                f"the worker does not answer at {self.endpoint}/v1/health within "
                f"{format_span(int(self.o['endpoint_timeout']))} ({why}): check {where}, that "
                f"the worker listens on {s.listen} and that {self.endpoint} reaches this "
                "machine from outside (firewall, port forwarding); nothing was published on "
                "chain")
        return "done", {}, {"endpoint": self.endpoint, "waited_s": round(waited, 3)}, \
            f"{self.endpoint} answers as worker {self.worker_key}"

    def _stake_needed(self) -> tuple[int, int, int]:
        from ..accounts import effective_params

        per_gpu = effective_params(self.m, self.client.chain_time()).min_stake_per_gpu
        return per_gpu, per_gpu * self.gpus.count, self.client.mint_decimals(self.m.stake_mint)

    def _too_little_stake(self, need: int, staked: int, held: int, account: Any,
                          registered: bool) -> OnboardingError:
        per_gpu, total, sd = self._stake_needed()
        fmt = lambda v: format_ui_amount(v, sd)
        tail = "" if registered else "; nothing was registered"
        return OnboardingError(
            f"staking the minimum for {self.gpus.count} GPU(s) needs {fmt(total)} stake tokens "
            f"(the market's min_stake_per_gpu {fmt(per_gpu)} x {self.gpus.count}); {fmt(staked)} "
            f"are staked and your stake-mint account {account} holds {fmt(held)}: add "
            f"{fmt(need - held)} there, then run `gpum provider init` again (it continues"
            f"{tail})")

    def step_register(self) -> tuple[str, dict, dict, str]:
        g = self.gpus
        spec = {"gpu_model": g.model, "gpu_count": g.count, "vram_mib": g.vram_mib,
                "region": self.o["region"]}
        view = self.client.fetch_provider(self.address)
        if view is None:
            _per, total, _sd = self._stake_needed()
            account, held = token_holding(self.env, self.m.stake_mint)
            if held < total:
                raise self._too_little_stake(total, 0, held, account, registered=False)
            self._declared_now()
            sig = self.client.register_provider(self.kp, self.worker_key, spec, self.price,
                                                self.market, endpoint=self.endpoint)
            return "done", {}, {"action": "registered", "provider": str(self.address),
                                "signature": str(sig)}, \
                f"provider {self.address} registered with its endpoint"
        if view.worker_key != self.worker_key:
            raise OnboardingError(
                f"provider {self.address} exists with worker key {view.worker_key}, not this "
                f"machine's {self.worker_key}: pass --worker-key with that key's file, or move "
                f"to this one with `gpum provider rotate-key {self.worker_key}`")
        ch = provider_changes(view, spec=spec, price=self.price, endpoint=self.endpoint)
        note = "" if view.status == "active" else (
            f"; it is {view.status}: validators challenge only Active providers "
            "(`gpum provider update --accepting-jobs`)")
        if ch.empty:
            return "done", {}, {"action": "unchanged", "provider": str(self.address)}, \
                f"provider {self.address} already registered as declared{note}"
        if ch.spec or ch.endpoint is not None:
            self._declared_now()
        sig = self.client.update_provider(self.kp, self.address, ch.price, ch.spec or None,
                                          None, endpoint=ch.endpoint)
        changed = [*ch.spec, *(["price"] if ch.price is not None else []),
                   *(["endpoint"] if ch.endpoint is not None else [])]
        return "done", {}, {"action": "updated", "changed": changed, "signature": str(sig),
                            "provider": str(self.address)}, \
            f"provider {self.address} already registered; updated {', '.join(changed)}{note}"

    def _declared_now(self) -> None:
        """Record, before the transaction, that the declaration validators judge changes now:
        a failed verdict older than this is not about it."""
        assert self.state is not None
        self.state.set(declared_since=int(time.time()))

    def step_stake(self) -> tuple[str, dict, dict, str]:
        per_gpu, total, sd = self._stake_needed()
        view = self.client.fetch_provider(self.address)
        if view is None:
            raise OnboardingError(f"provider {self.address} is not on chain: run `gpum provider "
                                  "init` again (the register step comes first)")
        need = stake_to_add(per_gpu, self.gpus.count, view.stake)
        outcome = {"min_stake_per_gpu": per_gpu, "needed": total, "staked_before": view.stake,
                   "added": need}
        if need == 0:
            return "done", {}, outcome, (f"{format_ui_amount(view.stake, sd)} staked, "
                                         f"{format_ui_amount(total, sd)} needed: nothing to add")
        account, held = token_holding(self.env, self.m.stake_mint)
        if held < need:
            raise self._too_little_stake(need, view.stake, held, account, registered=True)
        outcome["signature"] = str(self.client.stake(self.kp, self.market, need))
        return "done", {}, outcome, (f"staked {format_ui_amount(need, sd)} "
                                     f"({format_ui_amount(per_gpu, sd)} per GPU x "
                                     f"{self.gpus.count})")

    def step_verified(self) -> tuple[str, dict, dict, str]:
        from ..onboarding_verify import wait_verified

        timeout = self.o["wait_verified"]
        if timeout == 0:
            return "skipped", {}, {}, "not waited for (--wait-verified 0)"
        assert self.state is not None
        view = self.client.fetch_provider(self.address)
        since = int(self.state.data.get("declared_since") or
                    (view.registered_at if view is not None else time.time()))
        return wait_verified(self.client, self.market, self.address, self.gpus, since,
                             timeout, self._say)

    # ------------------------------------------------------------------ summary

    def summary(self, stopped_after: str | None) -> None:
        from ..offers import list_offers
        from .offers import _table, offer_row

        total = time.monotonic() - self.started
        offer = None
        if stopped_after is None:
            offer = next((o for o in list_offers(self.client, self.market, include_full=True,
                                                 probe=True) if o.provider == self.address), None)
        pdec = self.client.mint_decimals(self.m.payment_mint)
        sdec = self.client.mint_decimals(self.m.stake_mint)
        if self.env.output == "json":
            self.env.emit({"provider": str(self.address), "market": str(self.market),
                           "owner": str(self.kp.pubkey()),
                           "worker_key": str(self.worker_key or ""),
                           "data_dir": str(self.data_dir), "steps": self.results,
                           "stopped_after": stopped_after, "total_seconds": round(total, 3),
                           "offer": offer and offer_row(offer, pdec, sdec)})
            return
        head = (f"provider {self.address} of market {self.market}: "
                + (f"stopped after {stopped_after} as asked; `gpum provider init` again "
                   "continues" if stopped_after else f"done in {format_span(int(total))}"))
        lines = [head] + [f"  {r['step']:<14} {r['message']}" for r in self.results]
        if offer is not None:
            lines += ["", "as `gpum offers` shows it:", *_table([offer], pdec, sdec)]
        lines.append(f"state: {self.data_dir / 'init-state.json'}")
        self.env.emit({}, lines)


@click.command("init")
@_common
@_market_option
@click.option("--endpoint", required=True, metavar="HOST:PORT",
              help="Where users reach this worker's API from outside (HOST:PORT or "
                   "http(s)://HOST[:PORT]); probed before anything is published.")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Where the worker's API listens (default 0.0.0.0 on the endpoint's port).")
@click.option("--simulate", default=None, metavar="N[:MODEL]",
              help="Simulated GPUs instead of NVML (machines without GPUs, tests): N GPUs "
                   "declared as MODEL (default 'simulated').")
@click.option("--gpu-model", default=None, help="Declare this model instead of the detected one "
                                                "(<= 32 bytes).")
@click.option("--region", default="", help="e.g. 'eu-west' (<= 16 bytes).")
@click.option("--price", default=None, help="Price per GPU-hour (payment-mint tokens); default: "
                                            "the median of the market's offers of the model.")
@click.option("--default-price", default=DEFAULT_PRICE_PER_GPU_HOUR, show_default=True,
              help="Price per GPU-hour when the market has no offer of the model.")
@click.option("--auto-price", is_flag=True, help="Follow the market's median within "
              "--min-price..--max-price (`gpum provider reprice`, a systemd timer).")
@click.option("--min-price", default=None, help="Auto-pricing's lowest price per GPU-hour.")
@click.option("--max-price", default=None, help="Auto-pricing's highest price per GPU-hour.")
@click.option("--reprice-threshold", default="5", callback=_percent_bps, show_default=True,
              metavar="PERCENT", help="Auto-pricing changes the price on chain only when the "
                                      "market moved it by more than this.")
@click.option("--data-dir", default=None, type=click.Path(file_okay=False),
              help="The provider's folder (state, worker key and config) [default: "
                   "$GPUM_DATA_DIR/providers/MARKET/OWNER].")
@click.option("--worker-key", default=None, type=click.Path(dir_okay=False),
              help="The worker key file (default: DATA_DIR/worker-key.json, created once).")
@click.option("--runtime", type=click.Choice(["auto", "podman", "docker"]), default="auto",
              show_default=True, help="The worker's container runtime.")
@click.option("--containers-conf", default=None, type=click.Path(dir_okay=False),
              help="podman's containers.conf for the worker.")
@click.option("--systemd-dir", default="/etc/systemd/system", show_default=True,
              type=click.Path(file_okay=False), help="Where the systemd units are written.")
@click.option("--no-systemd", is_flag=True, help="Write no systemd unit.")
@click.option("--start-worker/--no-start-worker", default=True, show_default=True,
              help="Start the worker (systemd, else a process); off: you start it.")
@click.option("--endpoint-timeout", type=Duration(low=1, high=3600), default="60",
              show_default=True, metavar="DURATION",
              help="How long the worker has to answer at --endpoint.")
@click.option("--wait-verified", type=DURATION, default="5m", show_default=True,
              metavar="DURATION", help="How long to wait for the validators' verdict (0: not).")
@click.option("--until", type=click.Choice(STEPS), default=None,
              help="Stop after this step (run again to continue).")
def provider_init(env: Env, market: Pubkey, **o: Any) -> None:
    """Make this machine a provider of MARKET in one command: detect the GPUs (NVML), run the
    hardware challenge locally, price from the market, write the worker's key, configuration
    and systemd units and start it, check that --endpoint reaches it, register (with the
    endpoint), stake the minimum for the GPUs, and wait until the validators verified the
    hardware; then print the offer as `gpum offers` shows it.

    Every step is recorded in DATA_DIR/init-state.json: run it again after an interruption
    or a fixed error and it continues; the chain is read before every transaction, so it
    never registers or stakes twice.
    """
    InitRun(env, market, o).run()


@click.command("reprice")
@_common
@_market_option
@click.option("--data-dir", default=None, type=click.Path(file_okay=False),
              help="The provider's folder, with auto-price.json [default: "
                   "$GPUM_DATA_DIR/providers/MARKET/OWNER].")
@click.option("--dry-run", is_flag=True, help="Say what would change; send nothing.")
def provider_reprice(env: Env, market: Pubkey, data_dir: str | None, dry_run: bool) -> None:
    """Follow the median price per GPU-hour of the market's other offers of your model,
    within your auto-pricing bounds (`gpum provider init --auto-price`); the price on chain
    changes only when the target moved by more than the threshold, or the current price is
    outside the bounds. A systemd timer written by `init` runs it every 10 minutes."""
    from .. import pda
    from ..challenge_verdict import load_bounds
    from ..offers import list_offers
    from ..onboarding_machine import provider_data_dir, read_auto_price

    owner = env.keypair.pubkey()
    folder = Path(data_dir) if data_dir else provider_data_dir(market, owner)
    try:
        auto = read_auto_price(folder)
    except OnboardingError as e:
        raise CliError(str(e)) from None
    address = pda.provider_pda(market, owner, env.client.program_id)
    p = env.client.fetch_provider(address)
    if p is None:
        raise CliError(f"{owner} is not a provider of market {market}: run `gpum provider init`")
    offers = list_offers(env.client, market, include_full=True, probe=True)
    prices = market_prices(offers, p.spec.gpu_model, exclude=address, table=load_bounds())
    d = reprice(p.price_per_gpu_second, prices, auto)
    sig = None
    if d.update and not dry_run:
        sig = str(env.client.update_provider(env.keypair, address, d.target))
    pdec = env.client.mint_decimals(_market(env, market).payment_mint)
    if env.output == "json":
        env.emit({"provider": str(address), **asdict(d), "dry_run": dry_run, "signature": sig})
        return
    hour = lambda v: "-" if v is None else format_price_per_hour(v, pdec)
    env.emit({"provider": str(address),
              "price_per_gpu_hour": hour(d.current) if not sig else
              f"{hour(d.current)} -> {hour(d.target)}",
              "market_median_per_gpu_hour": f"{hour(d.median)} ({d.offers} offer(s))",
              "bounds": f"{hour(auto.min_per_second)} .. {hour(auto.max_per_second)}",
              "updated": "yes" if sig else ("would" if d.update else "no"), "why": d.why})
