"""Helpers for tests that run real containers with podman (import: ``from runtimetestkit
import ...``; this is not a conftest).

Real-container tests never skip: without a working podman they fail with what to
install. Typical use, one podman and one image per test session::

    @pytest.fixture(scope="session")
    def real(tmp_path_factory):
        return real_podman(tmp_path_factory.mktemp("podman"))

    def test_x(real):
        with container(real.runtime, ContainerSpec(name=unique_name(), image=real.image,
                                                   args=("sh", "-c", "echo hi"))) as name:
            ...
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from gpum_worker.errors import ContainerRuntimeError
from gpum_worker.localimage import build_busybox_image
from gpum_worker.runtime import ContainerRuntime, ContainerSpec
from gpum_worker.runtime_cli import PodmanRuntime, detect_runtime

T = TypeVar("T")

CONTAINERS_CONF = """\
# podman settings for test hosts: crun fails on cgroups v1 hybrid hosts and containers
# may not raise RLIMIT_NPROC in some sandboxes; runc and no default ulimits work there.
[containers]
default_ulimits = []
[engine]
runtime = "runc"
"""

INSTALL_HINT = ("real-container tests need podman, runc and busybox-static: "
                "apt-get install podman runc busybox-static")


def write_containers_conf(directory: Path) -> Path:
    """Write ``CONTAINERS_CONF`` to ``directory``/containers.conf and return its path."""
    path = Path(directory) / "containers.conf"
    path.write_text(CONTAINERS_CONF)
    return path


def podman_env(directory: Path) -> dict[str, str]:
    """``extra_env`` for podman with the test containers.conf written under ``directory``."""
    return {"CONTAINERS_CONF": str(write_containers_conf(directory))}


@dataclass(frozen=True)
class RealPodman:
    runtime: PodmanRuntime
    image: str
    extra_env: dict[str, str]


def real_podman(directory: Path) -> RealPodman:
    """A working ``PodmanRuntime`` and the busybox test image, or ``pytest.fail``."""
    env = podman_env(directory)
    try:
        rt = detect_runtime("podman", extra_env=env, scratch_dir=Path(directory) / "scratch")
    except ContainerRuntimeError as e:
        pytest.fail(f"{INSTALL_HINT} ({e})", pytrace=False)
    assert isinstance(rt, PodmanRuntime)
    try:
        image = build_busybox_image(extra_env=env)
    except ContainerRuntimeError as e:
        pytest.fail(f"{INSTALL_HINT} ({e})", pytrace=False)
    return RealPodman(runtime=rt, image=image, extra_env=env)


def unique_name(prefix: str = "gpumtest") -> str:
    """A container name no other test (or test run) uses."""
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:10]}"


@contextmanager
def container(rt: ContainerRuntime, spec: ContainerSpec) -> Iterator[str]:
    """Run ``spec``; yield its name; always remove it afterwards (SIGKILL at once)."""
    try:
        rt.run(spec)
        yield spec.name
    finally:
        rt.remove(spec.name, timeout_s=0)


def wait_for(probe: Callable[[], T | None], timeout_s: float = 10.0,
             interval_s: float = 0.05, what: str = "condition") -> T:
    """Call ``probe`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
