"""Container runtime: argv building, output parsing and detection (pure), then real podman.

The real-podman tests never skip: a machine without podman fails them (see runtimetestkit).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import tarfile
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from gpum_worker import runtime as rtmod
from gpum_worker import runtime_argv, runtime_cli
from gpum_worker.errors import ContainerRuntimeError, WorkerError
from gpum_worker.limits import JobLimits
from gpum_worker.localimage import (
    APPLETS,
    INDEX_HTML,
    build_busybox_image,
    is_static_elf,
    write_rootfs,
)
from gpum_worker.runtime import (
    JOB_LABEL,
    NO_RUNTIME_MESSAGE,
    RUNTIME_NAMES,
    ContainerSpec,
    ContainerState,
    PortBinding,
    PublishedPort,
)
from gpum_worker.runtime_argv import parse_inspect, parse_top_pids, run_argv, split_env
from gpum_worker.runtime_cli import DockerRuntime, PodmanRuntime, detect_runtime
from runtimetestkit import RealPodman, container, real_podman, unique_name, wait_for

GPU_A = "GPU-5f3c1a9e-0b7d-4c2e-9a61-2d8f0e4b7c13"
GPU_B = "GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789"


def spec(**kw: Any) -> ContainerSpec:
    base: dict[str, Any] = {"name": "gpum-JobAddr1", "image": "docker.io/library/python:3.12"}
    base.update(kw)
    return ContainerSpec(**base)


def test_public_api() -> None:
    assert RUNTIME_NAMES == ("podman", "docker")
    assert JOB_LABEL == "gpum.job"
    assert set(rtmod.__all__) | set(runtime_cli.__all__) >= {
        "RUNTIME_NAMES", "JOB_LABEL", "PortBinding", "ContainerSpec", "PublishedPort",
        "ContainerState", "ContainerRuntime", "detect_runtime", "PodmanRuntime",
        "DockerRuntime"}
    assert issubclass(ContainerRuntimeError, WorkerError)


# ------------------------------------------------------------------------------ run_argv


def test_podman_argv_full_spec() -> None:
    s = spec(command=("python", "-m"), args=("http.server", "8000"),
             env=(("A", "1"),), ports=(PortBinding(8000, "tcp"), PortBinding(53, "udp")),
             gpu_uuids=(GPU_A, GPU_B), labels=((JOB_LABEL, "JobAddr1"), ("x", "y=z")),
             shm_size_mib=512, scratch_mib=1024, publish_host="127.0.0.1")
    argv = run_argv("podman", s, env_file="/dev/shm/gpum-env-1", env_names=("PEM",),
                    stop_timeout_s=7, scratch_path="/var/lib/gpum/scratch/gpum-JobAddr1")
    assert argv == [
        "run", "-d", "--name", "gpum-JobAddr1",
        "--label", "gpum.job=JobAddr1", "--label", "x=y=z",
        "--security-opt", "no-new-privileges", "--stop-timeout", "7",
        "--env-file", "/dev/shm/gpum-env-1", "-e", "PEM",
        "-e", "NVIDIA_VISIBLE_DEVICES=void",
        "--device", f"nvidia.com/gpu={GPU_A}", "--device", f"nvidia.com/gpu={GPU_B}",
        "-p", "127.0.0.1::8000/tcp", "-p", "127.0.0.1::53/udp",
        "--oom-score-adj", "1000", "--log-opt", "max-size=16m",
        "--shm-size", "512m", "-v", "/var/lib/gpum/scratch/gpum-JobAddr1:/scratch:rw",
        "--entrypoint", '["python", "-m"]', "docker.io/library/python:3.12",
        "http.server", "8000",
    ]
    assert "--privileged" not in argv
    # With limits, they replace the spec's shm and scratch sizes.
    lim = JobLimits(memory_mib=4096, cpus=1.5, pids=500, shm_mib=256, scratch_mib=2048,
                    log_max_mib=8)
    argv = run_argv("podman", replace(s, limits=lim), scratch_path="/s/gpum-JobAddr1")
    i = argv.index("--memory")
    assert argv[i:argv.index("--entrypoint")] == [
        "--memory", "4096m", "--memory-swap", "4096m", "--cpus", "1.50", "--pids-limit", "500",
        "--oom-score-adj", "1000", "--log-opt", "max-size=8m", "--shm-size", "256m",
        "-v", "/s/gpum-JobAddr1:/scratch:rw"]
    with pytest.raises(ContainerRuntimeError, match="scratch volume"):
        run_argv("podman", s)
    with pytest.raises(ContainerRuntimeError, match="scratch volume"):
        run_argv("podman", s, scratch_path="relative/dir")


def test_docker_argv_gpus_is_one_quoted_element_and_entrypoint_is_split() -> None:
    s = spec(command=("python", "-m"), args=("http.server",), gpu_uuids=(GPU_A, GPU_B))
    argv = run_argv("docker", s)
    i = argv.index("--gpus")
    assert argv[i + 1] == f'"device={GPU_A},{GPU_B}"'
    assert f"NVIDIA_VISIBLE_DEVICES={GPU_A},{GPU_B}" in argv
    assert "--device" not in argv
    # docker takes one program as --entrypoint; the rest of the command leads the args.
    assert argv[argv.index("--entrypoint") + 1] == "python"
    assert argv[argv.index("docker.io/library/python:3.12"):] == [
        "docker.io/library/python:3.12", "-m", "http.server"]
    assert "--env-file" not in argv
    assert argv[:4] == ["run", "-d", "--name", "gpum-JobAddr1"]
    assert ["--security-opt", "no-new-privileges"] == argv[argv.index("--security-opt"):][:2]


@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
def test_no_gpus_means_none_even_with_an_nvidia_hook(runtime: str) -> None:
    argv = run_argv(runtime, spec())
    assert "NVIDIA_VISIBLE_DEVICES=void" in argv
    assert "--gpus" not in argv and "--device" not in argv
    # no command: the image's own entrypoint and CMD
    assert "--entrypoint" not in argv
    assert argv[-1] == "docker.io/library/python:3.12"


@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
def test_args_without_command_keep_the_image_entrypoint(runtime: str) -> None:
    argv = run_argv(runtime, spec(args=("--epochs", "3")))
    assert "--entrypoint" not in argv
    assert argv[-3:] == ["docker.io/library/python:3.12", "--epochs", "3"]


def test_ipv6_publish_host_is_bracketed() -> None:
    argv = run_argv("podman", spec(ports=(PortBinding(80, "tcp"),), publish_host="::1"))
    assert "[::1]::80/tcp" in argv
    argv = run_argv("docker", spec(ports=(PortBinding(80, "tcp"),)))
    assert "0.0.0.0::80/tcp" in argv


@pytest.mark.parametrize("kw, needle", [
    ({"name": "-rm"}, "invalid container name"),
    ({"name": "a b"}, "invalid container name"),
    ({"name": ""}, "invalid container name"),
    ({"image": "--privileged"}, "invalid image"),
    ({"image": "img name"}, "invalid image"),
    ({"gpu_uuids": (f"{GPU_A},{GPU_B}",)}, "invalid GPU UUID"),
    ({"gpu_uuids": ("0",)}, "invalid GPU UUID"),
    ({"gpu_uuids": ("all",)}, "invalid GPU UUID"),
    ({"gpu_uuids": (GPU_A, GPU_A)}, "twice"),
    ({"ports": (PortBinding(0, "tcp"),)}, "invalid container port"),
    ({"ports": (PortBinding(70000, "tcp"),)}, "invalid container port"),
    ({"ports": (PortBinding(80, "sctp"),)}, "invalid protocol"),
    ({"ports": (PortBinding(80, "tcp"), PortBinding(80, "tcp"))}, "listed twice"),
    ({"publish_host": "example.com"}, "invalid publish host"),
    ({"shm_size_mib": 0}, "shm_size_mib"),
    ({"scratch_mib": -1}, "scratch_mib"),
    ({"scratch_mib": True}, "scratch_mib"),
    ({"labels": (("k", "a\nb"),)}, "label k"),
    ({"labels": (("k=v", "x"),)}, "invalid label key"),
    ({"command": ("",)}, "command[0]"),
    ({"args": ("a\x00b",)}, "NUL"),
])
@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
def test_invalid_specs_are_refused(runtime: str, kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ContainerRuntimeError) as e:
        run_argv(runtime, spec(**kw))
    assert needle in str(e.value)


def test_checkpoint_directory_is_bind_mounted_read_write() -> None:
    mount = ("/var/lib/gpum/checkpoints/JobAddr1/data", "/checkpoint")
    for runtime in RUNTIME_NAMES:
        argv = run_argv(runtime, spec(checkpoint_mount=mount))
        i = argv.index("/var/lib/gpum/checkpoints/JobAddr1/data:/checkpoint:rw")
        assert argv[i - 1] == "-v" and i < argv.index("docker.io/library/python:3.12")
    assert "-v" not in run_argv("podman", spec())
    for bad in (("relative", "/checkpoint"), ("/h", "checkpoint"), ("/h", "/"),
                ("/h:/etc", "/c"), ("/h", "/c,ro"), ("/h/../x", "/c"), ("/h", "/scratch"),
                ("/h", "/scratch/x"), ("/h",), "/h:/c"):
        with pytest.raises(ContainerRuntimeError, match="invalid checkpoint mount"):
            run_argv("podman", spec(checkpoint_mount=bad))


def test_mig_uuids_are_accepted() -> None:
    mig = "MIG-7d5b9c2a-1f3e-5a4b-8c6d-0e1f2a3b4c5d"
    assert f"nvidia.com/gpu={mig}" in run_argv("podman", spec(gpu_uuids=(mig,)))


# ------------------------------------------------------------------------------ split_env


def test_split_env_keeps_values_out_of_argv() -> None:
    env = (("TOKEN", "s3cr3t-value"), ("PEM", "-----BEGIN\nabc\n-----END"),
           ("TOKEN", "s3cr3t-final"), ("EMPTY", ""), ("SPACES", "  a b  "))
    by_file, by_name = split_env(env, {"PATH": "/usr/bin"})
    assert by_file == (("TOKEN", "s3cr3t-final"), ("EMPTY", ""), ("SPACES", "  a b  "))
    assert by_name == (("PEM", "-----BEGIN\nabc\n-----END"),)
    assert runtime_argv.env_file_text(by_file) == "TOKEN=s3cr3t-final\nEMPTY=\nSPACES=  a b  \n"
    for runtime in RUNTIME_NAMES:
        argv = run_argv(runtime, spec(env=env), env_file="/dev/shm/f",
                        env_names=[n for n, _ in by_name])
        joined = "\x00".join(argv)
        for _, value in env:
            if value.strip():
                assert value not in joined
        assert ["-e", "PEM"] == argv[argv.index("PEM") - 1:argv.index("PEM") + 1]


def test_split_env_long_values_go_by_name_and_huge_ones_are_refused() -> None:
    by_file, by_name = split_env((("BIG", "x" * 70_000),))
    assert by_file == () and by_name == (("BIG", "x" * 70_000),)
    with pytest.raises(ContainerRuntimeError, match="BIG: value too long"):
        split_env((("BIG", "x" * 200_000),))


def test_split_env_drops_gpu_selection_variables() -> None:
    by_file, by_name = split_env((("NVIDIA_VISIBLE_DEVICES", "all"), ("A", "1")))
    assert by_file == (("A", "1"),) and by_name == ()
    argv = run_argv("docker", spec(env=(("NVIDIA_VISIBLE_DEVICES", "all"),)))
    assert "NVIDIA_VISIBLE_DEVICES=void" in argv
    assert "NVIDIA_VISIBLE_DEVICES=all" not in argv


@pytest.mark.parametrize("env, needle", [
    ((("PATH", "a\nb"),), "runtime's own command reads PATH"),
    ((("XDG_RUNTIME_DIR", "a\nb"),), "XDG_RUNTIME_DIR"),
    ((("MY_VAR", "a\nb"),), "MY_VAR"),  # set in the CLI's own environment below
    ((("A=B", "x"),), "invalid environment variable name"),
    ((("A B", "x"),), "invalid environment variable name"),
    ((("", "x"),), "invalid environment variable name"),
    ((("#A", "x"),), "invalid environment variable name"),
    ((("A", "x\x00y"),), "NUL"),
    ((("A", 5),), "must be a string"),
    (("AB",), "pairs"),
])
def test_split_env_errors_name_the_variable_never_the_value(env: Any, needle: str) -> None:
    with pytest.raises(ContainerRuntimeError) as e:
        split_env(env, {"MY_VAR": "host"})
    assert needle in str(e.value)
    assert "a\nb" not in str(e.value)


# -------------------------------------------------------------------------------- parsing

PODMAN_RUNNING = {
    "Id": "d2722fa162321d35dd85b7cc5f323443f1c4f17242aafbc5c2c4e6cd4098c718",
    "Name": "gpum-x",
    "State": {"OciVersion": "1.0.2-dev", "Status": "running", "Running": True,
              "Paused": False, "Restarting": False, "OOMKilled": False, "Dead": False,
              "Pid": 11421, "ConmonPid": 11411, "ExitCode": 0, "Error": "",
              "StartedAt": "2026-11-23T11:21:45.037627776Z",
              "FinishedAt": "0001-01-01T00:00:00Z"},
    "NetworkSettings": {"Ports": {"8080/tcp": [{"HostIp": "", "HostPort": "36513"}],
                                  "8081/tcp": [{"HostIp": "::1", "HostPort": "33085"}]}},
}

DOCKER_EXITED_OOM = {
    "Id": "4c4ae3b155e6",
    "State": {"Status": "exited", "Running": False, "Paused": False, "Restarting": False,
              "OOMKilled": True, "Dead": False, "Pid": 0, "ExitCode": 137, "Error": "",
              "StartedAt": "2026-11-23T12:00:00.5+01:00",
              "FinishedAt": "2026-11-23T12:00:05Z"},
    "NetworkSettings": {"Ports": {}},
}

DOCKER_RUNNING = {
    "State": {"Status": "running", "Pid": 4242, "ExitCode": 0,
              "StartedAt": "2026-11-23T11:21:45.123456789Z"},
    "NetworkSettings": {"Ports": {
        "80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "49153"},
                   {"HostIp": "::", "HostPort": "49153"}],
        "443/tcp": None,
        "53/udp": [{"HostIp": "127.0.0.1", "HostPort": "40000"}]}},
}


def test_parse_podman_running() -> None:
    st = parse_inspect(PODMAN_RUNNING)
    assert st.status == "running" and st.pid == 11421 and st.exit_code is None
    assert st.error is None
    assert st.started_at == pytest.approx(1795432905.037628, abs=1e-5)
    assert st.ports == (PublishedPort(8080, "tcp", "0.0.0.0", 36513),
                        PublishedPort(8081, "tcp", "::1", 33085))


def test_parse_docker_running_dual_stack_and_unpublished() -> None:
    st = parse_inspect(DOCKER_RUNNING)
    assert st.status == "running" and st.pid == 4242
    assert st.ports == (PublishedPort(53, "udp", "127.0.0.1", 40000),
                        PublishedPort(80, "tcp", "0.0.0.0", 49153),
                        PublishedPort(80, "tcp", "::", 49153))


def test_parse_docker_exited_oom_with_offset_time() -> None:
    st = parse_inspect(DOCKER_EXITED_OOM)
    assert st == ContainerState(status="exited", exit_code=137, pid=None, ports=(),
                                started_at=pytest.approx(1795431600.5),
                                error="out of memory: the container was OOM-killed")


@pytest.mark.parametrize("obj", [{}, {"State": None}, {"State": {}, "NetworkSettings": None},
                                 {"State": {"Status": "running", "Pid": "x"}},
                                 {"State": {"StartedAt": "yesterday"}}, []])
def test_parse_tolerates_missing_and_malformed_fields(obj: Any) -> None:
    st = parse_inspect(obj)
    assert st.status in rtmod.STATUSES
    assert st.ports == () and st.started_at is None and st.pid is None


@pytest.mark.parametrize("raw, status", [
    ("running", "running"), ("paused", "running"), ("stopping", "running"),
    ("exited", "exited"), ("stopped", "exited"), ("dead", "exited"), ("removing", "exited"),
    ("created", "created"), ("configured", "created"), ("initialized", "created"),
    ("restarting", "restarting"), ("Running", "running")])
def test_status_mapping(raw: str, status: str) -> None:
    assert parse_inspect({"State": {"Status": raw, "ExitCode": 2}}).status == status
    st = parse_inspect({"State": {"Status": raw, "ExitCode": 2}})
    assert st.exit_code == (2 if status == "exited" else None)
    assert st.error is None


def test_unknown_status_is_exited_with_a_note() -> None:
    st = parse_inspect({"State": {"Status": "unknown", "Error": "runc said no"}})
    assert st.status == "exited"
    assert st.error == "unexpected container status 'unknown'; runc said no"


def test_parse_top_pids() -> None:
    assert parse_top_pids("HPID\n13446\n13457\n13458\n") == {13446, 13457, 13458}
    assert parse_top_pids("PID\n 4242 \n\n4243\n") == {4242, 4243}
    assert parse_top_pids("UID PID PPID\nroot 12 1\n") == frozenset()
    assert parse_top_pids("") == frozenset()
    assert parse_top_pids("HPID  COMMAND\n77  sleep 100\n0\n") == {77}


# --------------------------------------------------------------------- detection, fakes


def _script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_detect_without_any_runtime_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ContainerRuntimeError) as e:
        detect_runtime("auto", extra_env={"PATH": str(tmp_path)})
    msg = str(e.value)
    assert msg.startswith(NO_RUNTIME_MESSAGE)
    assert "install podman (with runc) or docker" in msg
    assert "never runs a workload outside a container" in msg
    assert "podman: not found on PATH" in msg and "docker: not found on PATH" in msg
    with pytest.raises(ContainerRuntimeError, match="podman: not found on PATH"):
        detect_runtime("podman", extra_env={"PATH": str(tmp_path)})


def test_detect_docker_without_daemon_is_a_clear_error(tmp_path: Path) -> None:
    _script(tmp_path, "docker", "echo 'Cannot connect to the Docker daemon at "
            "unix:///var/run/docker.sock. Is the docker daemon running?' >&2\nexit 1\n")
    with pytest.raises(ContainerRuntimeError) as e:
        detect_runtime("docker", extra_env={"PATH": str(tmp_path)})
    msg = str(e.value)
    assert "container runtime docker does not work" in msg
    assert "Cannot connect to the Docker daemon" in msg
    assert "systemctl start docker" in msg
    assert "choose podman" in msg
    assert "never runs a workload outside a container" in msg


def test_detect_auto_falls_back_to_docker_and_rejects_unknown(tmp_path: Path) -> None:
    _script(tmp_path, "podman", "echo 'Error: cannot set up namespace' >&2\nexit 125\n")
    _script(tmp_path, "docker", "exit 0\n")
    rt = detect_runtime("auto", extra_env={"PATH": str(tmp_path)})
    assert isinstance(rt, DockerRuntime) and rt.name == "docker"
    assert rt.binary == str(tmp_path / "docker")
    with pytest.raises(ContainerRuntimeError, match="choose auto, podman or docker"):
        detect_runtime("lxc")


def test_detect_times_out_on_a_hung_runtime(tmp_path: Path) -> None:
    _script(tmp_path, "podman", "exec /bin/sleep 30\n")
    t0 = time.monotonic()
    with pytest.raises(ContainerRuntimeError, match="did not answer within 0.5 s"):
        detect_runtime("podman", extra_env={"PATH": str(tmp_path)}, probe_timeout_s=0.5)
    assert time.monotonic() - t0 < 5


def test_runtime_constructor_needs_the_binary(tmp_path: Path) -> None:
    with pytest.raises(ContainerRuntimeError, match="'podman' not found on PATH"):
        PodmanRuntime(extra_env={"PATH": str(tmp_path)})


FAKE_DOCKER = """\
echo "ARGV $*" >> "$FAKE_LOG"
case "$1" in
container) echo "Error: No such container: $3" >&2; exit 1 ;;
stop) echo "Error response from daemon: No such container: $4" >&2; exit 1 ;;
rm) exit 0 ;;
run)
  prev=""
  for a in "$@"; do
    if [ "$prev" = "--env-file" ]; then
      echo "MODE $(stat -c %a "$a")" >> "$FAKE_LOG"
      echo "FILE $(cat "$a" | tr '\\n' ' ')" >> "$FAKE_LOG"
      envfile="$a"
    fi
    prev="$a"
  done
  echo "PEM_ENV $(printf '%s' "$PEM" | tr '\\n' '|')" >> "$FAKE_LOG"
  if [ -n "$FAIL" ]; then echo "docker: invalid env $(cat "$envfile")" >&2; exit 125; fi
  echo 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef ;;
esac
"""


def test_docker_run_flow_with_a_fake_cli(tmp_path: Path) -> None:
    """DockerRuntime end to end against a fake docker: env file 0600 and deleted, values by
    name through the child environment, never on a command line, redacted from errors."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir, "docker", FAKE_DOCKER)
    logf = tmp_path / "log"
    envdir = tmp_path / "envdir"
    envdir.mkdir()
    extra = {"PATH": f"{bindir}:/usr/bin:/bin", "FAKE_LOG": str(logf)}
    rt = DockerRuntime(extra_env=extra, env_file_dir=str(envdir))
    s = spec(env=(("TOKEN", "s3cr3t-token"), ("PEM", "line1\nline2")), gpu_uuids=(GPU_A,))
    cid = rt.run(s)
    assert cid == "0123456789abcdef" * 4
    log_text = logf.read_text()
    argv_lines = [ln for ln in log_text.splitlines() if ln.startswith("ARGV ")]
    assert "s3cr3t-token" not in "\n".join(argv_lines) and "line1" not in "\n".join(argv_lines)
    assert "MODE 600" in log_text
    assert "FILE TOKEN=s3cr3t-token" in log_text
    assert "PEM_ENV line1|line2" in log_text
    assert f'"device={GPU_A}"' in log_text
    assert list(envdir.iterdir()) == []  # env file deleted after run

    extra["FAIL"] = "1"
    rt = DockerRuntime(extra_env=extra, env_file_dir=str(envdir))
    with pytest.raises(ContainerRuntimeError) as e:
        rt.run(s)
    assert "s3cr3t-token" not in str(e.value) and "TOKEN=***" in str(e.value)
    assert "docker run gpum-JobAddr1" in str(e.value)
    assert list(envdir.iterdir()) == []
    rt.remove("gpum-JobAddr1")  # missing: no error
    assert rt.state("gpum-JobAddr1").status == "missing"


# ------------------------------------------------------------------------------ localimage


def test_busybox_checks(tmp_path: Path) -> None:
    assert is_static_elf("/bin/busybox")
    assert not is_static_elf("/bin/ls")
    text = tmp_path / "busybox"
    text.write_text("#!/bin/sh\n")
    for path, needle in ((tmp_path / "nope", "not found"), (text, "not a usable busybox"),
                         (Path("/bin/ls"), "dynamically linked")):
        with pytest.raises(ContainerRuntimeError) as e:
            build_busybox_image("localhost/gpum-never:0", runtime_bin="false", busybox=path)
        assert needle in str(e.value) and "install Debian's busybox-static" in str(e.value)


def test_rootfs_tarball(tmp_path: Path) -> None:
    dest = tmp_path / "rootfs.tar"
    write_rootfs(dest)
    with tarfile.open(dest) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["bin/busybox"].mode == 0o755 and members["bin/busybox"].isfile()
        for applet in ("sh", "echo", "cat", "sleep", "httpd", "nc", "ls", "env", "date",
                       "true", "false", "printf", "wget"):
            assert applet in APPLETS
            assert members[f"bin/{applet}"].issym()
            assert members[f"bin/{applet}"].linkname == "busybox"
        assert members["tmp"].mode == 0o1777
        f = tar.extractfile("www/index.html")
        assert f is not None and f.read() == INDEX_HTML
        assert {m.mtime for m in members.values()} == {0}
    again = tmp_path / "again.tar"
    write_rootfs(again)
    assert again.read_bytes() == dest.read_bytes()  # reproducible


# ------------------------------------------------------------------------- real podman


@pytest.fixture(scope="session")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealPodman:
    return real_podman(tmp_path_factory.mktemp("podman"))


def busybox(real: RealPodman, script: str, **kw: Any) -> ContainerSpec:
    kw.setdefault("labels", ((JOB_LABEL, "TestJob" + unique_name("")[-10:]),))
    return ContainerSpec(name=unique_name(), image=real.image, args=("sh", "-c", script), **kw)


def test_detect_picks_podman_here(real: RealPodman) -> None:
    rt = detect_runtime("auto", extra_env=real.extra_env)
    assert isinstance(rt, PodmanRuntime) and rt.name == "podman"


def test_image_build_is_idempotent(real: RealPodman) -> None:
    t0 = time.monotonic()
    assert build_busybox_image(real.image, extra_env=real.extra_env) == real.image
    assert time.monotonic() - t0 < 5


def test_running_container_state_logs_tail_labels_and_idempotent_run(real: RealPodman
                                                                      ) -> None:
    rt = real.runtime
    s = busybox(real, "echo line1; echo line2 >&2; sleep 0.5; echo line3; exec sleep 60")
    s = replace(s, labels=(*s.labels, ("gpum.provider", "ProvA")))
    with container(rt, s) as name:
        early = rt.state(name)
        st = wait_for(lambda: (x := rt.state(name)).status == "running" and x, what="running")
        assert st.pid is not None and st.pid > 0 and st.exit_code is None
        assert st.started_at is not None and abs(st.started_at - time.time()) < 60
        assert early.status in ("running", "created")
        logs = wait_for(lambda: (b := rt.logs(name)).count(b"\n") >= 3 and b, what="3 lines")
        # stdout and stderr reach the runtime through two pipes: only each one's order holds
        assert sorted(logs.splitlines()) == [b"line1", b"line2", b"line3"]
        assert logs.index(b"line1") < logs.index(b"line3")
        assert rt.logs(name, tail=1) == b"line3\n"
        assert rt.logs(name, tail=0) == b""
        assert st.pid in rt.pids(name)
        # labels
        jobs = rt.list_job_containers()
        assert jobs[name] == dict(s.labels)[JOB_LABEL]
        assert name in rt.list_job_containers({"gpum.provider": "ProvA"})
        assert name not in rt.list_job_containers({"gpum.provider": "ProvB"})
        # idempotent: same id, still one container of that name
        first = rt.run(s)
        assert rt.run(s) == first
        out = subprocess.run(["podman", "ps", "-a", "-q", "--filter", f"name=^{name}$"],
                             env={**os.environ, **real.extra_env}, capture_output=True,
                             check=True).stdout.split()
        assert len(out) == 1 and first.startswith(out[0].decode())
    assert rt.state(name).status == "missing"


def test_follow_logs_streams_and_close_kills_the_child(real: RealPodman) -> None:
    rt = real.runtime
    # "second" is written only once the test connects to the published port, so the
    # stream provably yields "first" while the container is still running.
    s = busybox(real, "echo first; nc -l -p 9000 </dev/null; echo second; exec sleep 60",
                ports=(PortBinding(9000, "tcp"),), publish_host="127.0.0.1")
    with container(rt, s) as name:
        stream = rt.follow_logs(name)
        assert next(stream) == b"first\n"
        assert b"second" not in rt.logs(name)
        (pub,) = wait_for(lambda: rt.state(name).ports, what="published port")

        def poke() -> bool:
            try:
                socket.create_connection(("127.0.0.1", pub.host_port), timeout=2).close()
            except OSError:
                return False
            return b"second" in rt.logs(name)

        wait_for(poke, what="the container to write its second line")
        assert next(stream) == b"second\n"
        child = stream.pid
        assert child is not None and Path(f"/proc/{child}").exists()
        stream.close()
        assert not Path(f"/proc/{child}").exists()
        assert stream.pid is None and list(stream) == []
        # tail, and closing by the with block
        with rt.follow_logs(name, tail=1) as tailed:
            assert next(tailed) == b"second\n"
            child = tailed.pid
        assert child is not None and not Path(f"/proc/{child}").exists()


def test_follow_logs_ends_when_the_container_stops(real: RealPodman) -> None:
    rt = real.runtime
    s = busybox(real, "echo a; sleep 0.3; echo b >&2; sleep 1; echo c")
    with container(rt, s) as name:
        got: list[bytes] = []
        stream = rt.follow_logs(name)
        worker = threading.Thread(target=lambda: got.extend(stream), daemon=True)
        worker.start()
        worker.join(15)
        alive = worker.is_alive()
        stream.close()
        assert not alive, "follow_logs did not end when the container stopped"
        assert b"".join(got).splitlines() == [b"a", b"b", b"c"]


def test_exit_code_is_reported(real: RealPodman) -> None:
    rt = real.runtime
    with container(rt, busybox(real, "echo bye; exit 3")) as name:
        st = wait_for(lambda: (x := rt.state(name)).status == "exited" and x, what="exit")
        assert st.exit_code == 3 and st.pid is None and st.ports == ()
        assert rt.pids(name) == frozenset()
        assert rt.logs(name) == b"bye\n"
        assert name in rt.list_job_containers()  # exited containers are listed too


def test_published_port_serves_http_and_remove_forces_a_sigterm_ignorer(real: RealPodman
                                                                         ) -> None:
    rt = real.runtime
    s = busybox(real, "exec httpd -f -p 8080 -h /www", ports=(PortBinding(8080, "tcp"),),
                publish_host="127.0.0.1")
    with container(rt, s) as name:
        st = wait_for(lambda: (x := rt.state(name)).status == "running" and x, what="running")
        (pub,) = st.ports
        assert (pub.port, pub.protocol, pub.host) == (8080, "tcp", "127.0.0.1")
        assert pub.host_port > 0

        def fetch() -> bytes | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{pub.host_port}/",
                                            timeout=2) as r:
                    return bytes(r.read())
            except OSError:
                return None

        assert wait_for(fetch, what="httpd") == INDEX_HTML
        t0 = time.monotonic()
        rt.remove(name, timeout_s=1)  # busybox httpd as PID 1 ignores SIGTERM
        assert time.monotonic() - t0 < 8  # not the 10 s default stop timeout
        assert rt.state(name).status == "missing"
        rt.remove(name)  # second time: no-op


def test_env_reaches_the_container_but_no_command_line(real: RealPodman,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    rt = real.runtime
    calls: list[tuple[list[str], dict[str, str]]] = []
    env_files: list[tuple[str, int]] = []
    original = subprocess.run

    def spy(argv: list[str], *a: Any, **kw: Any) -> Any:
        calls.append((list(argv), dict(kw.get("env") or {})))
        if "--env-file" in argv:
            path = argv[argv.index("--env-file") + 1]
            env_files.append((path, stat.S_IMODE(os.stat(path).st_mode)))
        return original(argv, *a, **kw)

    monkeypatch.setattr(runtime_cli.subprocess, "run", spy)
    secret, pem = "v4lue-0f-the-secret", "-----BEGIN KEY-----\nAAAA\n-----END KEY-----"
    s = busybox(real, "env; exec sleep 60", env=(("GPUM_SECRET", secret), ("PEM", pem)))
    with container(rt, s) as name:
        logs = wait_for(lambda: (b := rt.logs(name)) and b"PWD=" in b and b, what="env")
        assert f"GPUM_SECRET={secret}".encode() in logs
        assert f"PEM={pem}".encode() in logs
        assert b"NVIDIA_VISIBLE_DEVICES=void" in logs
    assert calls and all(secret not in " ".join(argv) and "BEGIN KEY" not in " ".join(argv)
                         for argv, _ in calls)
    (path, mode), = env_files
    assert mode == 0o600 and not os.path.exists(path)
    run_envs = [env for argv, env in calls if argv[1] == "run"]
    assert run_envs[0].get("PEM") == pem and "GPUM_SECRET" not in run_envs[0]


def test_pids_lists_every_process(real: RealPodman) -> None:
    rt = real.runtime
    with container(rt, busybox(real, "sleep 60 & sleep 60 & wait")) as name:
        st = wait_for(lambda: (x := rt.state(name)).status == "running" and x, what="running")
        pids = wait_for(lambda: len(p := rt.pids(name)) >= 3 and p, what="3 processes")
        assert st.pid in pids
        comms = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids
                 if Path(f"/proc/{p}/comm").exists()}
        assert "sleep" in comms
        assert os.getpid() not in pids


def test_missing_containers(real: RealPodman) -> None:
    rt = real.runtime
    name = unique_name("never")
    assert rt.state(name) == rtmod.MISSING
    assert rt.pids(name) == frozenset()
    rt.remove(name)
    with pytest.raises(ContainerRuntimeError, match=f"no container named {name}"):
        rt.logs(name)
    with pytest.raises(ContainerRuntimeError, match=f"no container named {name}"):
        rt.follow_logs(name)
    assert name not in rt.list_job_containers()


def test_a_failed_run_leaves_nothing_behind(real: RealPodman) -> None:
    rt = real.runtime
    s = ContainerSpec(name=unique_name(), image=real.image, command=("/nonexistent",))
    try:
        with pytest.raises(ContainerRuntimeError, match="podman run .*/nonexistent"):
            rt.run(s)
        assert rt.state(s.name).status == "missing"
    finally:
        rt.remove(s.name, timeout_s=0)


def test_an_unknown_gpu_is_refused_with_the_cdi_hint(real: RealPodman) -> None:
    rt = real.runtime
    s = ContainerSpec(name=unique_name(), image=real.image, args=("true",),
                      gpu_uuids=("GPU-00000000-0000-0000-0000-000000000000",))
    try:
        with pytest.raises(ContainerRuntimeError) as e:
            rt.run(s)
        assert "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000" in str(e.value)
        assert "nvidia-ctk cdi generate" in str(e.value)
        assert rt.state(s.name).status == "missing"
    finally:
        rt.remove(s.name, timeout_s=0)


def test_unlabelled_containers_are_not_job_containers(real: RealPodman) -> None:
    rt = real.runtime
    s = busybox(real, "exec sleep 60", labels=(("other", "x"),))
    with container(rt, s) as name:
        assert rt.state(name).status in ("running", "created")
        assert name not in rt.list_job_containers()


def test_inspect_json_shape_matches_parser(real: RealPodman) -> None:
    """Guard against a podman upgrade changing the fields parse_inspect reads."""
    rt = real.runtime
    with container(rt, busybox(real, "exec sleep 60")) as name:
        wait_for(lambda: rt.state(name).status == "running", what="running")
        raw = subprocess.run(["podman", "container", "inspect", name],
                             env={**os.environ, **real.extra_env}, capture_output=True,
                             check=True).stdout
        (obj,) = json.loads(raw)
        for key in ("Status", "ExitCode", "Pid", "StartedAt", "Error", "OOMKilled"):
            assert key in obj["State"]
        assert "Ports" in obj["NetworkSettings"]
