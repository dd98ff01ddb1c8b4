"""A real S3-compatible server for tests: SeaweedFS's ``weed server -s3`` on 127.0.0.1.

The one launcher of the repository's tests (``tests/``, ``clients/py/tests`` and
``worker/tests`` import it; see the ``s3_server`` fixture below). ``start_s3_server`` runs
``weed`` (``$GPUM_WEED_BIN``, else what ``scripts/build-seaweedfs.sh`` builds or finds in its
cache) with its master, volume, filer and S3 gateway on free loopback ports and data in a
temporary directory, with two identities in its S3 config: an administrator (every action)
and a reader (``Read``/``List`` only), so wrong credentials and missing write permission are
refused as by a real store. It returns once the gateway accepted a write (at most
``START_TIMEOUT_S``), with the bucket ``BUCKET`` created; ``S3Server.stop`` ends the process
group (SIGTERM, SIGKILL after ``STOP_GRACE_S``).

``s3_server`` is a session fixture: every conftest that imports it shares one server per test
session (reference-counted here), so running several test folders together starts one.
Without ``GPUM_WEED_BIN`` and without a way to build ``weed`` (Go), it fails, never skips.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpu_market.processes import ProcessError, Processes, free_port

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "scripts" / "build-seaweedfs.sh"
BUCKET = "gpum-tests"
REGION = "us-east-1"
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 3.0
BUILD_TIMEOUT_S = 1800.0
ADMIN = ("GPUMTESTADMINKEY", "gpum-test-admin-secret-4f1c9a")
READER = ("GPUMTESTREADERKEY", "gpum-test-reader-secret-83be20")


class S3ServerError(RuntimeError):
    """weed cannot be found, built or started; the message says what to do."""


@dataclass
class S3Server:
    """A running ``weed server -s3``: its S3 endpoint, the administrator's and the reader's
    access keys, and the bucket made at start."""

    endpoint: str
    access_key_id: str
    secret_access_key: str
    reader_access_key_id: str
    reader_secret_access_key: str
    bucket: str
    region: str
    workdir: Path
    procs: Processes
    ports: dict[str, int]

    def client(self, access_key_id: str | None = None, secret_access_key: str | None = None
               ) -> Any:
        """A boto3 S3 client of this server (the administrator unless keys are given)."""
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(
            aws_access_key_id=access_key_id or self.access_key_id,
            aws_secret_access_key=secret_access_key or self.secret_access_key,
            region_name=self.region)
        return session.client("s3", endpoint_url=self.endpoint, config=Config(
            s3={"addressing_style": "path"}, retries={"max_attempts": 2, "mode": "standard"},
            connect_timeout=5, read_timeout=30))

    def new_bucket(self, prefix: str = "b") -> str:
        """A fresh bucket of its own for one test."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def store_url(self, prefix: str | None = None, bucket: str | None = None) -> str:
        """``s3://<bucket>/<prefix>`` with a fresh prefix unless one is given."""
        return f"s3://{bucket or self.bucket}/{prefix or 'p-' + uuid.uuid4().hex[:12]}"

    def keys(self, prefix: str, bucket: str | None = None) -> list[str]:
        """Every key under ``prefix`` (sorted)."""
        c = self.client()
        out: list[str] = []
        for page in c.get_paginator("list_objects_v2").paginate(
                Bucket=bucket or self.bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return sorted(out)

    def tail(self, lines: int = 30) -> str:
        return self.procs.tail("weed", lines)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace_s`` (weed's graceful stop
        takes longer than its data in a temporary directory is worth)."""
        for _name, proc in self.procs.children:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in self.procs.children:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.stop_all()  # closes the log files

    def restart(self) -> None:
        """Start a stopped server again: same ports, same data, same endpoint."""
        fresh = start_s3_server(self.workdir, ports=self.ports)
        self.procs = fresh.procs


def weed_binary() -> str:
    """``$GPUM_WEED_BIN``, else the cached build of ``scripts/build-seaweedfs.sh`` (which
    builds it once, with Go, when it is not cached)."""
    path = os.environ.get("GPUM_WEED_BIN")
    if path:
        if not os.access(path, os.X_OK):
            raise S3ServerError(f"GPUM_WEED_BIN={path} is not an executable file: run "
                                "`make seaweedfs` and point GPUM_WEED_BIN at what it prints")
        return path
    try:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise S3ServerError(f"{BUILD_SCRIPT} did not build weed within {BUILD_TIMEOUT_S:.0f}s"
                            ) from None
    built = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if not built or not os.access(built[0], os.X_OK):
        raise S3ServerError(
            "the checkpoint tests need SeaweedFS's weed (a real S3 server): GPUM_WEED_BIN is "
            f"unset and {BUILD_SCRIPT.relative_to(REPO)} failed (exit status "
            f"{proc.returncode}): {proc.stderr.strip()[-1500:]}\nInstall Go and run `make "
            "seaweedfs`, or set GPUM_WEED_BIN to a weed binary")
    return built[0]


def _s3_config() -> dict[str, Any]:
    return {"identities": [
        {"name": "admin", "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}],
         "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
        {"name": "reader", "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
         "actions": ["Read", "List"]},
    ]}


def start_s3_server(workdir: Path, timeout_s: float = START_TIMEOUT_S,
                    ports: dict[str, int] | None = None) -> S3Server:
    """Start ``weed server -s3`` with its data under ``workdir`` (see the module docstring),
    on free ports unless ``ports`` are given (``S3Server.ports``: to start it again)."""
    binary = weed_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "data").mkdir(exist_ok=True)
    config = workdir / "s3.json"
    config.write_text(json.dumps(_s3_config()))
    config.chmod(0o600)
    if ports is None:
        ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        ports.update({f"{name}.grpc": free_port() for name in list(ports)})
    argv = [binary, "server", f"-dir={workdir / 'data'}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", "-filer", "-s3", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64",
            "-volume.max=32", "-volume.preStopSeconds=0", "-master.telemetry=false",
            f"-filer.localSocket={workdir / 'filer.sock'}",
            f"-s3.localSocket={workdir / 's3.sock'}"]
    for name in ("master", "volume", "filer", "s3"):
        argv += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={ports[name + '.grpc']}"]
    procs = Processes(workdir)
    server = S3Server(endpoint=f"http://127.0.0.1:{ports['s3']}", access_key_id=ADMIN[0],
                      secret_access_key=ADMIN[1], reader_access_key_id=READER[0],
                      reader_secret_access_key=READER[1], bucket=BUCKET, region=REGION,
                      workdir=workdir, procs=procs, ports=ports)
    procs.start("weed", argv)
    try:
        _wait_ready(server, timeout_s)
    except BaseException:
        server.stop(0)
        raise
    return server


def _wait_ready(server: S3Server, timeout_s: float) -> None:
    """Until the bucket exists and took a write (a volume is allocated on the first one)."""
    from botocore.exceptions import BotoCoreError, ClientError

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            server.procs.check_alive()
        except ProcessError as e:
            raise S3ServerError(f"weed exited while starting: {e}") from None
        try:
            c = server.client()
            try:
                c.create_bucket(Bucket=server.bucket)
            except ClientError as e:
                if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou",
                                                       "BucketAlreadyExists"):
                    raise
            c.put_object(Bucket=server.bucket, Key="ready", Body=b"ok")
            c.delete_object(Bucket=server.bucket, Key="ready")
            return
        except (BotoCoreError, ClientError) as e:
            last = e
            time.sleep(0.3)
    raise S3ServerError(f"weed's S3 gateway did not take a write within {timeout_s:.0f}s "
                        f"({last}); its log:\n{server.tail()}")


_lock = threading.Lock()
_shared: S3Server | None = None
_users = 0


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The session's S3 server (one per session, whichever conftests import this)."""
    global _shared, _users
    with _lock:
        if _shared is None:
            try:
                _shared = start_s3_server(tmp_path_factory.mktemp("s3server"))
            except S3ServerError as e:
                pytest.fail(str(e), pytrace=False)
        _users += 1
        server = _shared
    try:
        yield server
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _shared is not None:
                _shared.stop()
                _shared = None
