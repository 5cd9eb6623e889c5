"""The ``ha`` command: run, watch and operate elections on any backend.

Every error is one line on stderr and a non-zero exit code (``--debug`` shows the traceback).
``--url``, ``--debug``, ``--config``, ``--log-format`` and ``--log-level`` go before or after the
command's name; a config file (``config.py``) holds any option's value, which flags and the
environment override. Commands that only read (``status``, ``watch``, ``history``, ``jobs
list``, ``jobs status``) create nothing, not even the embedded file.
Exit codes: 0 ok; 1 error; 2 usage; 3 no active (``status``, ``failover``); 4 overlapping
leadership found (``report``); 130 interrupted (Ctrl-C, quietly, under asyncio and trio:
``_signals.py`` on the event loop, ``HaGroup`` elsewhere).

The commands live by subject: ``run``, ``election`` (status, history, pause, resume, watch,
failover, format), ``jobs``, ``report``, ``demo``; ``_run`` is how each one runs and fails,
``_show`` what it prints, ``_watch`` how watch survives outages, ``_dns`` the early lookup,
``_reach`` how ``ha run`` waits for a backend that is down at start.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from .._install import version
from . import demo, election, jobs, report, run
from ._logs import LOG_FORMATS, LOG_LEVELS
from ._run import CONTEXT, Failure, Interrupted, Options, add_global_options
from .config import ConfiguredGroup

__all__ = ("cli", "main")


def _show_version(ctx: click.Context, _param: click.Parameter, asked: bool) -> None:
    # looked up when asked (not at every start), and a line even when nothing is installed
    if asked and not ctx.resilient_parsing:
        click.echo(f"ha, version {version()}")
        ctx.exit()


class HaGroup(ConfiguredGroup):
    """``ha``: Ctrl-C in a command's own code, off the event loop (a prompt, an import), exits
    130 quietly too, where click would say "Aborted!" and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None
        except click.exceptions.Abort as exc:  # click.confirm turns Ctrl-C into Abort
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise Interrupted("interrupted") from None
            raise


@click.group(cls=HaGroup, context_settings=CONTEXT)
@click.option(
    "--url",
    envvar="HA_URL",
    metavar="URL",
    help="Backend URL (env HA_URL): sqlite:///path/ha.db, zk://host:2181/chroot,"
    " etcd://host:2379/prefix, k8s://namespace/name, memory://NAME."
    " Default: the embedded file under your state directory.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--config",
    metavar="FILE",
    expose_value=False,
    help="Config file (TOML; env HA_CONFIG). Default: the first of ./ha.toml,"
    " ~/.config/ha/config.toml, /etc/ha/config.toml. Flags and environment win over it.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    envvar="HA_LOG_FORMAT",
    default="text",
    show_default=True,
    help="Logs on stderr as text or JSON lines (env HA_LOG_FORMAT).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    envvar="HA_LOG_LEVEL",
    help="Level of ha's logs (env HA_LOG_LEVEL). Default: warnings, and the story of"
    " `ha run` and job managers at info.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and exit.",
)
@click.pass_context
def cli(
    ctx: click.Context, url: str | None, debug: bool, log_format: str, log_level: str | None
) -> None:
    """High availability for services: active/standby leader election with fencing.

    \b
    Examples:
      ha demo                                  # see failover happen, no server needed
      ha run /myapp --id host-a -- ./serve.sh  # run serve.sh only while active
      ha status /myapp
      ha demo --pipeline                       # the PySpark job manager (ha-elector[spark])
    """
    source = ctx.get_parameter_source("url")
    ctx.obj = Options(url, source is click.core.ParameterSource.COMMANDLINE, debug)
    ctx.obj.log_level, ctx.obj.log_format = log_level, log_format
    ctx.obj.setup_logging()


cli.add_command(run.run)
cli.add_command(election.status)
cli.add_command(election.watch)
cli.add_command(election.failover)
cli.add_command(election.format_)
cli.add_command(election.history)
cli.add_command(election.pause)
cli.add_command(election.resume)
cli.add_command(jobs.jobs)
cli.add_command(report.report)
cli.add_command(demo.demo)
for _command in cli.commands.values():
    add_global_options(_command)


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script: ``ha``."""
    try:
        cli.main(args=argv, prog_name="ha", standalone_mode=True)
    except Failure as exc:  # raised outside click's handling (e.g. by main's callers)
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(0)
