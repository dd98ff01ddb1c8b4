"""What every attempt of a managed job runs, and where its job lives (pure).

The **template** is the workload as the user gave it, without secret values: image, command,
args, env, the *names* of the secrets, ports, limits, ``finish_on_exit`` and the checkpoint
settings without credentials. It is kept (JSON) in the controller's database. An attempt's
spec is the template with the secrets (and checkpoint credentials) sealed to that attempt's
provider's worker key (:func:`attempt_spec`); the plaintext values live only in the memory of
the process running the controller (from its environment, or from the caller).

An attempt's **job id** is derived from the managed job's random ``uid`` and the attempt's
slot ``idx`` (:func:`attempt_job_id`), so its job address (``job_pda(market, user, job_id)``)
is known before it is created: a controller restarted after a crash finds the job it created
(or its ClosedJob tombstone) at that address instead of creating a second one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TemplateError", "attempt_job_id", "attempt_spec", "make_template", "secret_names"]

_JOB_ID_DOMAIN = b"gpum-managed-attempt-v1"


class TemplateError(ValueError):
    """A workload the controller cannot build; the message says what to do."""


def attempt_job_id(uid: bytes, idx: int) -> int:
    """The job id (u64) of slot ``idx`` of the managed job ``uid``: the first 8 bytes (little
    endian) of ``sha256(domain || uid || idx as u32 le)``."""
    if not 0 <= idx < 2**32:
        raise ValueError(f"slot {idx} out of range")
    digest = hashlib.sha256(_JOB_ID_DOMAIN + bytes(uid) + idx.to_bytes(4, "little")).digest()
    return int.from_bytes(digest[:8], "little")


def make_template(image: str, *, command: Sequence[str] = (), args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None, secrets: Sequence[str] = (),
                  ports: Sequence[str] = (), shm_size_mib: int | None = None,
                  scratch_mib: int | None = None, finish_on_exit: bool = False,
                  checkpoint: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The template (JSON-ready); ``secrets``: names only. ``checkpoint``: the checkpoint
    config fields (no credentials). Validated by building a spec with dummy secrets."""
    t = {"image": image, "command": list(command), "args": list(args),
         "env": sorted([str(k), str(v)] for k, v in (env or {}).items()),
         "secrets": sorted(set(secrets)), "ports": [str(p) for p in ports],
         "shm_size_mib": shm_size_mib, "scratch_mib": scratch_mib,
         "finish_on_exit": bool(finish_on_exit),
         "checkpoint": None if checkpoint is None else dict(checkpoint)}  # fmt: skip
    both = sorted({k for k, _ in t["env"]} & set(t["secrets"]))
    if both:
        raise TemplateError(f"{', '.join(both)} given both as env and as a secret")
    from solders.keypair import Keypair

    attempt_spec(t, bytes(Keypair().pubkey()), {k: "x" for k in t["secrets"]},
                 checkpoint_credentials=("x", "x") if checkpoint is not None else None)  # fmt: skip
    return t


def secret_names(template: Mapping[str, Any]) -> list[str]:
    return list(template.get("secrets") or ())


def attempt_spec(template: Mapping[str, Any], worker_key: bytes, secrets: Mapping[str, str],
                 *, checkpoint_credentials: tuple[str, str] | None = None) -> Any:  # fmt: skip
    """The WorkloadSpec of an attempt on the provider whose worker key is ``worker_key``:
    ``secrets`` (name -> plaintext) and the checkpoint credentials sealed to it.
    TemplateError naming a missing secret or a bad workload."""
    from ..workload import WorkloadSpec, WorkloadSpecError, parse_port_arg, seal_secrets, spec_hash

    names = secret_names(template)
    missing = [n for n in names if n not in secrets]
    if missing:
        raise TemplateError(f"the secret(s) {', '.join(missing)} are not known to this "
                            "controller: export them (e.g. `export "
                            f"{missing[0]}=...`) in the shell that runs `gpum job watch "
                            "--managed`")  # fmt: skip
    checkpoint = None
    if template.get("checkpoint") is not None:
        checkpoint = _checkpoint(template["checkpoint"], worker_key, checkpoint_credentials)
    try:
        spec = WorkloadSpec(
            image=template["image"], command=tuple(template.get("command") or ()),
            args=tuple(template.get("args") or ()),
            env=tuple((k, v) for k, v in template.get("env") or ()),
            secret_env=seal_secrets(worker_key, {n: secrets[n] for n in names}) if names else (),
            ports=tuple(parse_port_arg(p) for p in template.get("ports") or ()),
            shm_size_mib=template.get("shm_size_mib"), scratch_mib=template.get("scratch_mib"),
            finish_on_exit=bool(template.get("finish_on_exit")), checkpoint=checkpoint)  # fmt: skip
        spec_hash(spec)  # validates
    except WorkloadSpecError as e:
        raise TemplateError(f"bad workload: {e}") from None
    return spec


def _checkpoint(config: Mapping[str, Any], worker_key: bytes,
                credentials: tuple[str, str] | None) -> Any:  # fmt: skip
    """The spec's checkpoint value: ``config`` with ``credentials`` (access key id, secret
    access key) sealed to ``worker_key`` (:func:`gpu_market.checkpoint.seal_checkpoint`)."""
    from ..checkpoint import CheckpointError, Credentials, seal_checkpoint
    from ..checkpoint_spec import CheckpointConfig
    from ..workload import WorkloadSpecError

    if credentials is None:
        raise TemplateError("the checkpoint store's credentials are not known to this "
                            "controller: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")  # fmt: skip
    try:
        return seal_checkpoint(CheckpointConfig(**dict(config)), Credentials(*credentials),
                               worker_key)  # fmt: skip
    except (CheckpointError, WorkloadSpecError, TypeError) as e:
        raise TemplateError(f"bad checkpoint settings: {e}") from None
