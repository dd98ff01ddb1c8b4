"""``gpum``: command-line client of gpu-market.

Solana CLI conventions: ``--url/-u`` (``localnet``, ``devnet``, ``testnet``, ``mainnet-beta``
or a URL), ``--keypair/-k`` (Solana JSON keypair file, default ``~/.config/solana/id.json``);
both default to the Solana CLI config file when it exists. Common options work before or
after the subcommand. Token amounts are in UI units of the mint (``1.5`` = 1.5 tokens),
parsed exactly. ``--output json`` prints one JSON object per command.

Every expected failure prints one line ``error: ...`` saying what to do, and exits with 2
(bad input) or 1 (chain, RPC or file problems); never a traceback (set ``GPUM_DEBUG=1`` to
see one for unexpected errors).

One module per command group, as ``gpum --help`` lists them:

- :mod:`~gpu_market.cli.market`: ``gpum market ...`` (create, inspect, govern a market);
- :mod:`~gpu_market.cli.provider`: ``gpum provider ...``; ``provider init`` (onboarding a GPU
  machine) and ``provider reprice`` (auto-pricing) in :mod:`~gpu_market.cli.provider_init`;
- :mod:`~gpu_market.cli.validator`: ``gpum validator ...``;
- :mod:`~gpu_market.cli.job`: ``gpum job ...`` and the committee choice of ``job create``;
  its workload commands (``job deliver``, ``job logs``, the ``--image`` options) are in
  :mod:`~gpu_market.cli.workload`, ``job watch`` in :mod:`~gpu_market.cli.watch`; ``job
  list``, ``job stop``, ``job close``, ``job cancel`` and job names (``--name``) in
  :mod:`~gpu_market.cli.job_control`; ``job exec`` and ``job cp`` in
  :mod:`~gpu_market.cli.exec`;
- :mod:`~gpu_market.cli.offers`: ``gpum offers``;
- :mod:`~gpu_market.cli.run`: ``gpum run``; its ``--template`` and ``-f/--file``, and ``gpum
  templates``, in :mod:`~gpu_market.cli.task_file`; ``--managed`` and the checkpoint options,
  ``job watch --managed``, ``job migrate`` and what ``job status/list/stop/watch`` show or do
  for a managed job in :mod:`~gpu_market.cli.managed`;
- :mod:`~gpu_market.cli.cluster`: ``gpum cluster ...`` (several nodes on one private network);
- :mod:`~gpu_market.cli.base`: what they all share (common options and :class:`Env`, argument
  types, ``--output`` formatting, keypair and URL resolution, small chain reads).

This package assembles the command tree and runs it (:func:`main`, the ``gpum`` entry point).

Where a new command goes: in the module of its group, as ``@<group>.command("name")`` with
the common options (``common`` of :mod:`~gpu_market.cli.base`, and ``market_option`` when it
acts on a market). It reads and sends through ``env.client`` (a
:class:`gpu_market.client.GpuMarketClient`; the instruction's pure builder lives in
:mod:`gpu_market.instructions`), prints with ``env.emit`` (text or ``--output json``), and
fails with :class:`~gpu_market.cli.base.CliError` (one line saying what to do next) or
``click.BadParameter``. A new group gets its own module, its ``click.group()`` added to
:data:`cli` below. A program error the command does not answer itself gets its hint in
:data:`PROGRAM_ERROR_HINTS`. Tests: ``clients/py/tests/test_cli*.py`` with the chain answered
locally, and end to end under ``tests/``.
"""

from __future__ import annotations

import os

import click

from . import cluster, job, market, offers, provider, provider_init, run, task_file, validator
from .base import Env, common, load_keypair, one_line, resolve_url

__all__ = ["cli", "load_keypair", "main", "resolve_url"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common
def cli(env: Env) -> None:
    """gpu-market: rent out and rent GPUs, paid from on-chain escrow."""


cli.add_command(market.market)
cli.add_command(provider.provider)
provider.provider.add_command(provider_init.provider_init)
provider.provider.add_command(provider_init.provider_reprice)
cli.add_command(validator.validator)
cli.add_command(job.job)
cli.add_command(offers.offers)
cli.add_command(run.run)
cli.add_command(task_file.templates)
cli.add_command(cluster.cluster)


PROGRAM_ERROR_HINTS = {
    "PriceAboveLimit": "the provider raised its price before your job landed; nothing was "
                       "charged: check `gpum provider status` and retry with a higher --max-price",
    "NothingToWithdrawFees": "no settlement has paid fees since the last withdrawal",
    "InvalidFeeVault": "pass the market's fee_vault (see `gpum market status`)",
    "InvalidCommittee": "name 1..5 distinct active validators of this market, not the provider "
                        "(see `gpum validator status AUTHORITY`)",
    "InvalidJobQuorum": "pass --quorum between the market's min_quorum (`gpum market status`) "
                        "and min(3, committee size)",
    "MemberStillActive": "only a member that exited or closed can be replaced",
    "NothingToClaim": "no settlement you attested has credited rewards since your last claim",
    "BondTooSmall": "bond at least the market's validator_min_bond (`gpum market status`)",
}
"""What to do next, appended to the program's message for errors a command does not answer
itself."""


def main(argv: list[str] | None = None) -> int:
    """Run ``gpum``; returns (and, as a script, exits with) the exit code."""
    from ..errors import GpuMarketError, SdkError
    from ..idl import IdlConversionError, IdlNotFound

    prog = "gpum"
    try:
        cli.main(args=argv, prog_name=prog, standalone_mode=False)
        return 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.Abort:
        click.echo("error: aborted", err=True)
        return 1
    except click.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else prog
        click.echo(f"error: {one_line(e.format_message())} (see `{cmd} --help`)", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"error: {one_line(e.format_message())}", err=True)
        return e.exit_code
    except GpuMarketError as e:
        hint = PROGRAM_ERROR_HINTS.get(e.name)
        tail = f"; {hint}" if hint else ""
        click.echo(f"error: program error {e.name} ({e.code}): {one_line(e.message)}{tail}", err=True)
        return 1
    except (SdkError, IdlNotFound, IdlConversionError) as e:
        click.echo(f"error: {one_line(str(e))}", err=True)
        return 1
    except ValueError as e:
        click.echo(f"error: {one_line(str(e))}", err=True)
        return 2
    except Exception as e:
        if os.environ.get("GPUM_DEBUG"):
            raise
        click.echo(
            f"error: unexpected {type(e).__name__}: {one_line(str(e))} "
            "(set GPUM_DEBUG=1 for a traceback)",
            err=True,
        )
        return 1
