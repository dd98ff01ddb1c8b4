"""``gpum job exec`` and ``gpum job cp``: a command (or a shell) in a Running job's container,
and files in and out of it, through the provider's worker API, signed by your wallet
(:mod:`gpu_market.exec_api`).

``job exec JOB -- CMD...`` prints the command's stdout and stderr and exits with its exit
status; ``-i`` forwards this terminal's input, ``-t`` gives the command a terminal (this
one in raw mode, its size on start and on every resize), ``-it`` together is an interactive
shell like ``docker exec -it``. ``job cp SRC DEST``: one side is ``JOB:/path`` (a job
address or name, then an absolute path in the container), the other a local path.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from typing import Any

import click
from solders.pubkey import Pubkey

from .base import JOB, CliError, Env, common, job_view, resolve_job

__all__ = ["job_cp", "job_exec"]


def _target(env: Env, job_address: Pubkey) -> tuple[str, Any]:
    """The worker endpoint of a job you own that has a workload; CliError otherwise."""
    j = job_view(env, job_address)
    if j.workload_hash == bytes(32):
        raise CliError(f"job {job_address} has no container (it was created without --image)")
    if env.keypair.pubkey() != j.user:
        raise CliError(f"only the job's user ({j.user}) may run commands in it; pass --keypair "
                       "with that wallet")
    p = env.client.fetch_provider(j.provider)
    if p is None or not p.endpoint:
        raise CliError(f"provider {j.provider} publishes no worker endpoint; its containers "
                       "cannot be reached")
    return p.endpoint, j


@click.command("exec", context_settings={"allow_interspersed_args": False,
                                         "ignore_unknown_options": True})
@common
@click.option("--interactive", "-i", is_flag=True, help="Forward this terminal's input.")
@click.option("--tty", "-t", is_flag=True,
              help="Give the command a terminal (-it: an interactive shell).")
@click.option("--timeout", type=click.FloatRange(1), default=10.0, show_default=True,
              help="Seconds to wait for the worker to answer.")
@click.argument("job_address", metavar="JOB", type=JOB)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
def job_exec(env: Env, interactive: bool, tty: bool, timeout: float, job_address: Pubkey,
             cmd: tuple[str, ...]) -> None:
    """Run CMD in the job's running container; exit with its exit status."""
    from ..workload_api import WorkerApiError

    if cmd and cmd[0] == "--":  # options end at JOB, so click leaves the separator
        cmd = cmd[1:]
    if not cmd:
        raise click.UsageError("name the command after JOB: gpum job exec JOB -- CMD...")
    endpoint, _ = _target(env, job_address)
    if tty and not _stdin_is_a_terminal():
        raise CliError("-t needs a terminal on stdin; drop -t to pipe input with -i")
    try:
        if tty or interactive:
            code = _relay(endpoint, bytes(job_address), list(cmd), bytes(env.keypair), tty,
                          timeout)
        else:
            code = _run(endpoint, bytes(job_address), list(cmd), bytes(env.keypair), timeout)
    except WorkerApiError as e:
        raise CliError(str(e)) from None
    sys.stdout.flush()
    # SystemExit, not click's Exit: ``gpum``'s main returns 0 for the latter.
    raise SystemExit(code)


def _stdin_is_a_terminal() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):  # no file descriptor behind stdin
        return False


def _run(endpoint: str, job: bytes, cmd: list[str], secret: bytes, timeout: float) -> int:
    from ..exec_api import exec_stream

    out, err = sys.stdout.buffer, sys.stderr.buffer
    for kind, payload in exec_stream(endpoint, job, cmd, secret, timeout=timeout):
        if kind == b"o":
            out.write(payload)
            out.flush()
        elif kind == b"e":
            err.write(payload)
            err.flush()
        elif kind == b"!":
            click.echo(f"gpum: {payload.decode('utf-8', 'replace')}", err=True)
        elif kind == b"x":
            return int(payload)
    return 1


def _winsize() -> tuple[int, int]:
    size = os.get_terminal_size(sys.stdin.fileno())
    return size.lines, size.columns


def _relay(endpoint: str, job: bytes, cmd: list[str], secret: bytes, tty: bool,
           timeout: float) -> int:
    """Input from stdin to the command, its output here, until it exits; with ``tty`` this
    terminal is in raw mode meanwhile (restored however it ends)."""
    from ..exec_api import open_exec_tunnel

    tunnel = open_exec_tunnel(endpoint, job, cmd, secret, tty=tty, stdin=True,
                              winsize=_winsize() if tty else None, timeout=timeout)
    stdin = sys.stdin.fileno()
    out, err = sys.stdout.buffer, sys.stderr.buffer
    restore: Any = None
    old_winch: Any = None
    if tty:
        import termios
        import tty as ttymod

        saved = termios.tcgetattr(stdin)
        restore = lambda: termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        ttymod.setraw(stdin)
        old_winch = signal.signal(signal.SIGWINCH,
                                  lambda *_: tunnel.send_winsize(*_winsize()))
    reading = True
    try:
        while True:
            wanted = [tunnel.fileno()] + ([stdin] if reading else [])
            try:
                ready, _, _ = select.select(wanted, [], [])
            except InterruptedError:  # a resize
                continue
            if stdin in ready:
                data = os.read(stdin, 1 << 16)
                if data:
                    tunnel.send_input(data)
                else:
                    reading = False
                    tunnel.send_eof()
            if tunnel.fileno() in ready:
                frames = tunnel.receive()
                if not frames:
                    break
                for kind, payload in frames:
                    if kind == b"o":
                        out.write(payload)
                        out.flush()
                    elif kind == b"e":
                        err.write(payload)
                        err.flush()
                    elif kind == b"!":
                        err.write(b"\r\ngpum: " + payload + b"\r\n")
                        err.flush()
                    elif kind == b"x":
                        return int(payload)
    except OSError as e:
        raise CliError(f"the session with the worker at {endpoint} broke: "
                       f"{e.strerror or e}") from None
    finally:
        if restore is not None:
            restore()
        if old_winch is not None:
            signal.signal(signal.SIGWINCH, old_winch)
        tunnel.close()
    raise CliError(f"the worker at {endpoint} ended the session without an exit status")


def _split(env: Env, text: str) -> tuple[Pubkey | None, str]:
    """``JOB:/path`` -> (the job, "/path"); a local path -> (None, path)."""
    head, sep, tail = text.partition(":")
    if not sep or not head or "/" in head:
        return None, text
    try:
        ref = JOB.convert(head, None, None)
    except click.BadParameter:
        return None, text
    return resolve_job(env, ref), tail


@click.command("cp")
@common
@click.argument("src")
@click.argument("dest")
def job_cp(env: Env, src: str, dest: str) -> None:
    """Copy files between here and a job's running container. One of SRC and DEST is
    JOB:/path (an absolute path in the container), the other a local path; directories
    are copied whole (like `docker cp`): gpum job cp ./data JOB:/scratch/data,
    gpum job cp JOB:/scratch/out ./out."""
    from ..exec_api import download, upload
    from ..workload_api import WorkerApiError

    src_job, src_path = _split(env, src)
    dest_job, dest_path = _split(env, dest)
    if (src_job is None) == (dest_job is None):
        raise CliError("name the container side as JOB:/path on exactly one side, e.g. "
                       "`gpum job cp ./data JOB:/scratch/data`")
    job = src_job or dest_job
    assert job is not None
    endpoint, _ = _target(env, job)
    try:
        if dest_job is not None:
            done = upload(endpoint, bytes(job), src_path, dest_path, bytes(env.keypair))
            where = f"{job}:{done['path']}"
            size = done["bytes"]
        else:
            where = download(endpoint, bytes(job), src_path, dest_path, bytes(env.keypair))
            size = None
    except ValueError as e:
        raise CliError(str(e)) from None
    except WorkerApiError as e:
        raise CliError(str(e)) from None
    if env.output == "json":
        click.echo(json.dumps({"copied_to": where, "bytes": size}))
    else:
        click.echo(f"copied {src} -> {where}")
