"""Worker configuration: TOML file < environment (GPUM_WORKER_*) < command-line flags.

``resolve`` is pure (it takes the parsed file, the environment mapping and the flags) and
raises ``ConfigError`` with a one-line, actionable message. See worker/README.md for the
full list of keys.

``validators`` is optional: without it each chain job's proofs go to the members of its
committee, their endpoints read from chain. When set (a static list) it overrides that for
every job; ``--job`` jobs (no chain account, no committee) need it.

TOML layout::

    key_file = "/etc/gpum-worker/worker-key.json"
    db = "/var/lib/gpum-worker/outbox.sqlite"
    validators = ["https://validator-1.example:8080"]   # optional override, see below
    window_seconds = 60
    sample_interval_ms = 1000
    poll_seconds = 10
    log_level = "info"
    [chain]
    rpc_url = "http://127.0.0.1:8899"
    program_id = "<base58>"
    market = "<base58>"
    provider = "<base58 Provider PDA>"
    [health]
    temp_warn_c = 85
    temp_critical_c = 95
    fan_warn_pct = 95
    power_over_limit_pct = 105
    ecc_uncorrected_max = 0
    [sender]
    timeout_seconds = 10
    backoff_base_seconds = 1
    backoff_cap_seconds = 60
    rejected_retry_seconds = 3600
    [workload]
    runtime = "auto"                  # or "podman" / "docker"
    containers_conf = "/etc/gpum-worker/containers.conf"   # optional, for podman
    publish_host = "0.0.0.0"          # host address container ports are published on
    memory_mib = 491520               # RAM jobs share (default and most: the host's)
    cpus = 62                         # CPU cores jobs share (default and most: the host's)
    scratch_mib = 4194304             # disk for all /scratch volumes (default: free disk)
    ended_logs_seconds = 86400        # an ended job's status and last logs stay readable
    reaper = true                     # the worker spawns ``gpum-worker reaper`` (reaper.py)
    reaper_poll_seconds = 15          # how often the reaper compares containers with chain
    [api]
    listen = "0.0.0.0:8090"           # the worker API (off when unset)
    [challenges]                      # validators' hardware challenges on the API
    enabled = true                    # (challenge_api.py; only on GPUs with no job)
    min_interval_seconds = 60         # one accepted challenge per validator this often
    [committee]                       # which jobs' committees this provider serves
    allow = []                        # validator authorities (base58); empty: any
    deny = []                         # never serve a job naming one of these
    min_bond = 0                      # at least the market's validator_min_bond anyway
    require_health = true             # every member answers GET /health with 200
    health_timeout_seconds = 3
    health_grace_seconds = 60         # then a job whose member stays silent is declined
    [cluster]                         # serve cluster nodes (mesh.py; needs root, podman)
    enabled = false
    public_host = "203.0.113.7"       # the address peers send the mesh's UDP to
    udp_ports = "51820-51899"         # one port per cluster node; open them to the internet
    wireguard = "auto"                # "kernel", "userspace" (wireguard-go) or "auto"

Without ``[api] listen`` (or ``--api-listen``) there is no worker API, so no user can
deliver a workload spec and jobs with a workload are never accepted.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomllib

from .committee import CommitteePolicy
from .errors import ConfigError
from .health import DEFAULT_THRESHOLDS, Thresholds
from .keys import decode_pubkey
from .mesh import DEFAULT_UDP_PORTS, MeshSettings, check_public_host, parse_port_range
from .reaper import REAPER_POLL_S
from .sender import DEFAULT_RETRY, RetryPolicy
from .workload_store import ENDED_LOGS_S

DEFAULT_COMMITTEE_POLICY = CommitteePolicy()
DEFAULT_MESH_SETTINGS = MeshSettings()

ENV_PREFIX = "GPUM_WORKER_"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpum-worker"


def default_key_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpum-worker" / "worker-key.json"


# (toml path, env var suffix, flag name, type)
_SCALARS: tuple[tuple[str, str, str, type], ...] = (
    ("key_file", "KEY_FILE", "key_file", str),
    ("db", "DB", "db", str),
    ("window_seconds", "WINDOW_SECONDS", "window_seconds", int),
    ("sample_interval_ms", "SAMPLE_INTERVAL_MS", "sample_interval_ms", int),
    ("poll_seconds", "POLL_SECONDS", "poll_seconds", float),
    ("log_level", "LOG_LEVEL", "log_level", str),
    ("chain.rpc_url", "RPC_URL", "rpc_url", str),
    ("chain.program_id", "PROGRAM_ID", "program_id", str),
    ("chain.market", "MARKET", "market", str),
    ("chain.provider", "PROVIDER", "provider", str),
    ("workload.runtime", "RUNTIME", "runtime", str),
    ("workload.containers_conf", "CONTAINERS_CONF", "containers_conf", str),
    ("workload.publish_host", "PUBLISH_HOST", "publish_host", str),
    ("workload.memory_mib", "MEMORY_MIB", "memory_mib", int),
    ("workload.cpus", "CPUS", "cpus", float),
    ("workload.scratch_mib", "SCRATCH_MIB", "scratch_mib", int),
    ("workload.ended_logs_seconds", "ENDED_LOGS_SECONDS", "ended_logs_seconds", int),
    ("workload.reaper_poll_seconds", "REAPER_POLL_SECONDS", "reaper_poll_seconds", float),
    ("api.listen", "API_LISTEN", "api_listen", str),
)
RUNTIMES = ("auto", "podman", "docker")


@dataclass(frozen=True)
class WorkerConfig:
    key_file: Path
    db: Path
    validators: tuple[str, ...] = ()
    """Static override of every job's destinations; empty: each job's committee (chain)."""
    window_seconds: int = 60
    sample_interval_ms: int = 1000
    poll_seconds: float = 10.0
    log_level: str = "info"
    rpc_url: str | None = None
    program_id: bytes | None = None
    market: bytes | None = None
    provider: bytes | None = None
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    retry: RetryPolicy = DEFAULT_RETRY
    runtime: str = "auto"
    """Container runtime for workloads: "auto" (podman, else docker), "podman", "docker"."""
    containers_conf: Path | None = None
    """Passed to the runtime as CONTAINERS_CONF (podman's containers.conf)."""
    publish_host: str = "0.0.0.0"
    """Host address the containers' ports are published on."""
    memory_mib: int | None = None
    """RAM the provider lets all jobs share (None: the host's; never more than it)."""
    cpus: float | None = None
    """CPU cores the provider lets all jobs share (None: the host's; never more)."""
    scratch_mib: int | None = None
    """Disk for every job's /scratch together (None: the free disk less a reserve)."""
    ended_logs_seconds: int = ENDED_LOGS_S
    """How long an ended job's workload status and last logs stay readable in the API."""
    reaper: bool = True
    """``gpum-worker run`` spawns the reaper (``reaper``) unless one runs for its database;
    off for operators who run ``gpum-worker reaper`` as a service of its own."""
    reaper_poll_seconds: float = REAPER_POLL_S
    """How often the reaper compares this provider's containers with the chain."""
    api_listen: str | None = None
    """HOST:PORT of the worker API; None: no API (no job with a workload is accepted)."""
    committee: CommitteePolicy = DEFAULT_COMMITTEE_POLICY
    """Which committees this provider serves (``[committee]``, ``--committee-*``)."""
    challenges: bool = True
    """Answer validators' hardware challenges on the API (``[challenges] enabled``)."""
    challenge_min_interval_seconds: float = 60.0
    """One accepted challenge per validator at most this often."""
    cluster: MeshSettings = DEFAULT_MESH_SETTINGS
    """``[cluster]``: whether and where this worker serves cluster nodes' meshes."""


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None


def _get(d: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _convert(name: str, value: Any, typ: type) -> Any:
    if typ is str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{name} must be a non-empty string")
        return value.strip()
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        return typ(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


def check_url(url: str) -> str:
    """An http(s) URL with a host; ConfigError otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"bad validator URL {url!r}: expected http(s)://host[:port]")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"bad validator URL {url!r}: invalid port") from None
    return url.strip().rstrip("/")


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; port 0 picks a free one) -> (host, port)."""
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"bad API listen address {text!r}: expected HOST:PORT, e.g. "
                          "127.0.0.1:8090 or 0.0.0.0:8090 ([::]:8090 for IPv6)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def _pubkey(name: str, value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return decode_pubkey(value, name)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _section(file: Mapping[str, Any], name: str, cls: type, mapping: dict[str, str]) -> Any:
    sec = file.get(name, {})
    if not isinstance(sec, Mapping):
        raise ConfigError(f"[{name}] must be a table")
    unknown = set(sec) - set(mapping)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{name}]: {', '.join(sorted(unknown))}")
    kwargs = {}
    types = {f.name: f.type for f in fields(cls)}
    for key, attr in mapping.items():
        if key in sec:
            typ = float if types[attr] in (float, "float") else int
            kwargs[attr] = _convert(f"{name}.{key}", sec[key], typ)
    return cls(**kwargs)


_KNOWN_TOP = {"key_file", "db", "validators", "window_seconds", "sample_interval_ms",
              "poll_seconds", "log_level", "chain", "health", "sender", "workload", "api",
              "committee", "challenges", "cluster"}
_KNOWN_COMMITTEE = {"allow", "deny", "min_bond", "require_health", "health_timeout_seconds",
                    "health_grace_seconds"}
_KNOWN_CHAIN = {"rpc_url", "program_id", "market", "provider"}
_KNOWN_WORKLOAD = {"runtime", "containers_conf", "publish_host", "memory_mib", "cpus",
                   "scratch_mib", "ended_logs_seconds", "reaper", "reaper_poll_seconds"}
_KNOWN_API = {"listen"}


def resolve(file: Mapping[str, Any], env: Mapping[str, str], flags: Mapping[str, Any]
            ) -> WorkerConfig:
    """Merge defaults < file < env < flags (flags with value None are unset)."""
    unknown = set(file) - _KNOWN_TOP
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(sorted(unknown))}")
    chain = file.get("chain", {})
    if not isinstance(chain, Mapping) or set(chain) - _KNOWN_CHAIN:
        raise ConfigError(f"[chain] accepts only: {', '.join(sorted(_KNOWN_CHAIN))}")
    for name, known in (("workload", _KNOWN_WORKLOAD), ("api", _KNOWN_API)):
        sec = file.get(name, {})
        if not isinstance(sec, Mapping) or set(sec) - known:
            raise ConfigError(f"[{name}] accepts only: {', '.join(sorted(known))}")
    vals: dict[str, Any] = {}
    for toml_key, env_key, flag, typ in _SCALARS:
        v = _get(file, toml_key)
        src = toml_key
        if env.get(ENV_PREFIX + env_key):
            v, src = env[ENV_PREFIX + env_key], ENV_PREFIX + env_key
        if flags.get(flag) is not None:
            v, src = flags[flag], "--" + flag.replace("_", "-")
        if v is not None:
            vals[flag] = _convert(src, v, typ)

    validators: list[str] = []
    file_v = file.get("validators")
    if file_v is not None:
        if not isinstance(file_v, list) or not all(isinstance(u, str) for u in file_v):
            raise ConfigError("validators must be a list of URLs")
        validators = list(file_v)
    if env.get(ENV_PREFIX + "VALIDATORS"):
        validators = [u for u in env[ENV_PREFIX + "VALIDATORS"].split(",") if u.strip()]
    if flags.get("validators"):
        validators = list(flags["validators"])
    validators = list(dict.fromkeys(check_url(u) for u in validators))

    window = vals.get("window_seconds", 60)
    if not 1 <= window <= 3600:
        raise ConfigError(f"window_seconds must be between 1 and 3600, got {window}")
    interval = vals.get("sample_interval_ms", 1000)
    if not 100 <= interval <= 1000 or 1000 % interval:
        raise ConfigError("sample_interval_ms must divide 1000 and be at least 100 "
                          f"(e.g. 1000, 500, 250), got {interval}")
    poll = vals.get("poll_seconds", 10.0)
    if not 0.1 <= poll <= 3600:
        raise ConfigError(f"poll_seconds must be between 0.1 and 3600, got {poll}")
    level = vals.get("log_level", "info").lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level must be one of debug, info, warning, error")

    thresholds = _section(file, "health", Thresholds, {
        "temp_warn_c": "temp_warn_c", "temp_critical_c": "temp_critical_c",
        "fan_warn_pct": "fan_warn_pct", "power_over_limit_pct": "power_over_limit_pct",
        "ecc_uncorrected_max": "ecc_uncorrected_max"})
    try:
        thresholds.validate()
    except ValueError as e:
        raise ConfigError(f"[health]: {e}") from None
    runtime = vals.get("runtime", "auto").lower()
    if runtime not in RUNTIMES:
        raise ConfigError(f"workload runtime must be one of {', '.join(RUNTIMES)}, got "
                          f"{runtime!r}")
    publish_host = vals.get("publish_host", "0.0.0.0")
    try:
        ipaddress.ip_address(publish_host)
    except ValueError:
        raise ConfigError(f"publish_host must be an IP address (e.g. 0.0.0.0 or 127.0.0.1), "
                          f"got {publish_host!r}") from None
    api_listen = vals.get("api_listen")
    if api_listen is not None:
        parse_listen(api_listen)
    for name in ("memory_mib", "cpus", "scratch_mib", "ended_logs_seconds"):
        if name in vals and not vals[name] > 0:
            raise ConfigError(f"[workload] {name} must be positive, got {vals[name]}")
    reaper_poll = vals.get("reaper_poll_seconds", REAPER_POLL_S)
    if not 0.1 <= reaper_poll <= 3600:
        raise ConfigError(f"[workload] reaper_poll_seconds must be between 0.1 and 3600, got "
                          f"{reaper_poll}")
    retry = _section(file, "sender", RetryPolicy, {
        "timeout_seconds": "timeout_s", "backoff_base_seconds": "base_s",
        "backoff_cap_seconds": "cap_s", "rejected_retry_seconds": "rejected_retry_s",
        "probe_seconds": "probe_s", "probe_timeout_seconds": "probe_timeout_s"})
    if not (0 < retry.base_s <= retry.cap_s and retry.timeout_s > 0
            and retry.rejected_retry_s > 0 and retry.probe_s > 0
            and retry.probe_timeout_s > 0):
        raise ConfigError("[sender]: need 0 < backoff_base_seconds <= backoff_cap_seconds and "
                          "positive timeout_seconds / rejected_retry_seconds / probe_seconds "
                          "/ probe_timeout_seconds")

    committee = _committee_policy(file.get("committee", {}), env, flags)

    return WorkerConfig(
        key_file=Path(vals.get("key_file") or default_key_file()).expanduser(),
        db=Path(vals.get("db") or default_state_dir() / "outbox.sqlite").expanduser(),
        validators=tuple(validators),
        window_seconds=window,
        sample_interval_ms=interval,
        poll_seconds=poll,
        log_level=level,
        rpc_url=vals.get("rpc_url"),
        program_id=_pubkey("program_id", vals.get("program_id")),
        market=_pubkey("market", vals.get("market")),
        provider=_pubkey("provider", vals.get("provider")),
        thresholds=thresholds,
        retry=retry,
        runtime=runtime,
        containers_conf=(Path(vals["containers_conf"]).expanduser()
                         if vals.get("containers_conf") else None),
        publish_host=publish_host,
        memory_mib=vals.get("memory_mib"),
        cpus=vals.get("cpus"),
        scratch_mib=vals.get("scratch_mib"),
        ended_logs_seconds=vals.get("ended_logs_seconds", ENDED_LOGS_S),
        reaper=_reaper_on(file, env, flags),
        reaper_poll_seconds=reaper_poll,
        api_listen=api_listen,
        committee=committee,
        **_challenges(file.get("challenges", {})),
        cluster=_cluster(file.get("cluster", {})),
    )


def _cluster(sec: Any) -> MeshSettings:
    """``[cluster]``: ``enabled`` (false), ``public_host`` (needed when enabled),
    ``udp_ports`` ("51820-51899"), ``wireguard`` ("auto")."""
    known = {"enabled", "public_host", "udp_ports", "wireguard"}
    if not isinstance(sec, Mapping) or set(sec) - known:
        raise ConfigError(f"[cluster] accepts only: {', '.join(sorted(known))}")
    enabled = sec.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError("[cluster] enabled must be true or false")
    try:
        ports = parse_port_range(sec.get("udp_ports", "{}-{}".format(*DEFAULT_UDP_PORTS)))
        host = check_public_host(sec["public_host"]) if "public_host" in sec else ""
    except ValueError as e:
        raise ConfigError(f"[cluster] {e}") from None
    if enabled and not host:
        raise ConfigError("[cluster] enabled needs public_host: the address (or DNS name) "
                          "other providers send this worker's mesh traffic to")
    wireguard = sec.get("wireguard", "auto")
    if wireguard not in ("auto", "kernel", "userspace"):
        raise ConfigError('[cluster] wireguard must be "auto", "kernel" or "userspace"')
    return MeshSettings(enabled=enabled, udp_ports=ports, public_host=host, wireguard=wireguard)


def _challenges(sec: Any) -> dict[str, Any]:
    """``[challenges]``: ``enabled`` (true) and ``min_interval_seconds`` (60, 0..86400)."""
    if not isinstance(sec, Mapping) or set(sec) - {"enabled", "min_interval_seconds"}:
        raise ConfigError("[challenges] accepts only: enabled, min_interval_seconds")
    enabled = sec.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("[challenges] enabled must be true or false")
    interval = _convert("challenges.min_interval_seconds", sec.get("min_interval_seconds", 60),
                        float)
    if not 0 <= interval <= 86_400:
        raise ConfigError("[challenges] min_interval_seconds must be between 0 and 86400")
    return {"challenges": enabled, "challenge_min_interval_seconds": interval}


def _reaper_on(file: Mapping[str, Any], env: Mapping[str, str],
               flags: Mapping[str, Any]) -> bool:
    """``[workload] reaper`` < ``GPUM_WORKER_REAPER`` (true/false) < ``--[no-]reaper``."""
    on: Any = _get(file, "workload.reaper")
    raw = env.get(ENV_PREFIX + "REAPER", "").strip().lower()
    if raw:
        if raw not in ("true", "false", "1", "0"):
            raise ConfigError(f"{ENV_PREFIX}REAPER must be true or false, got {raw!r}")
        on = raw in ("true", "1")
    if flags.get("reaper") is not None:
        on = flags["reaper"]
    if on is None:
        return True
    if not isinstance(on, bool):
        raise ConfigError("[workload] reaper must be true or false")
    return on


def _committee_policy(sec: Any, env: Mapping[str, str], flags: Mapping[str, Any]
                      ) -> CommitteePolicy:
    """``[committee]`` < ``GPUM_WORKER_COMMITTEE_*`` < ``--committee-*`` (lists replace)."""
    if not isinstance(sec, Mapping) or set(sec) - _KNOWN_COMMITTEE:
        raise ConfigError(f"[committee] accepts only: {', '.join(sorted(_KNOWN_COMMITTEE))}")

    def keys(name: str) -> frozenset[bytes]:
        raw: Any = sec.get(name, [])
        if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
            raise ConfigError(f"[committee] {name} must be a list of validator authorities "
                              "(base58)")
        env_v = env.get(f"{ENV_PREFIX}COMMITTEE_{name.upper()}")
        if env_v:
            raw = [k for k in env_v.split(",") if k.strip()]
        if flags.get(f"committee_{name}"):
            raw = list(flags[f"committee_{name}"])
        out = set()
        for k in raw:
            key = _pubkey(f"committee {name} entry", k.strip())
            assert key is not None
            out.add(key)
        return frozenset(out)

    allow, deny = keys("allow"), keys("deny")
    if allow & deny:
        raise ConfigError("[committee]: a validator is on both the allow and the deny list")
    min_bond: Any = sec.get("min_bond")
    for src, v in ((f"{ENV_PREFIX}COMMITTEE_MIN_BOND",
                    env.get(f"{ENV_PREFIX}COMMITTEE_MIN_BOND") or None),
                   ("--committee-min-bond", flags.get("committee_min_bond"))):
        if v is not None:
            min_bond = _convert(src, v, int)
    if min_bond is not None and (isinstance(min_bond, bool) or not isinstance(min_bond, int)
                                 or min_bond < 0):
        raise ConfigError("[committee] min_bond must be a whole number >= 0 (base units)")
    health = sec.get("require_health", True)
    if flags.get("committee_require_health") is not None:
        health = flags["committee_require_health"]
    if not isinstance(health, bool):
        raise ConfigError("[committee] require_health must be true or false")
    timeout = _convert("committee.health_timeout_seconds",
                       sec.get("health_timeout_seconds", 3.0), float)
    grace = _convert("committee.health_grace_seconds", sec.get("health_grace_seconds", 60.0),
                     float)
    if not (timeout > 0 and grace >= 0):
        raise ConfigError("[committee]: health_timeout_seconds must be positive and "
                          "health_grace_seconds >= 0")
    return CommitteePolicy(allow=allow, deny=deny, min_bond=min_bond, require_health=health,
                           health_timeout_s=timeout, health_grace_s=grace)
