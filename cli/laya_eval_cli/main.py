"""The ``laya-eval`` command group and its one error boundary.

Every user error — a click usage error or a :class:`laya_eval.LayaEvalError`
raised by the library — ends in a single ``Error: ...`` line on stderr and exit
code 2, never a traceback. With ``LAYA_EVAL_DEBUG=1`` in the environment the
traceback of a library error (and of the exception it was raised from, such as
the one a ``py:`` module raised) is printed before that line.
"""

from __future__ import annotations

import os
import sys
import warnings

import click

from laya_eval.version import __version__  # no torch: the package's names load lazily
from laya_eval_cli import commands


#: Set to 1 to print the traceback behind an ``Error:`` line (docs/install.md).
DEBUG_VAR = "LAYA_EVAL_DEBUG"


class LayaGroup(click.Group):
    """A click group that turns user errors into one line and exit code 2."""

    command: str | None = None

    def resolve_command(self, ctx, args):  # noqa: D102
        name, cmd, rest = super().resolve_command(ctx, args)
        LayaGroup.command = cmd.name if cmd is not None else None
        return name, cmd, rest

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: D102
        from laya_eval.errors import LayaEvalError

        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            click.echo(f"Error: {exc.format_message()}", err=True)
            sys.exit(2 if exc.exit_code in (1, 2) else exc.exit_code)
        except LayaEvalError as exc:
            from laya_eval_cli.options import flag_spelling

            if os.environ.get(DEBUG_VAR) == "1":  # the whole story: the chained cause (a py: module's own frames)
                import traceback

                click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
            click.echo(f"Error: {flag_spelling(exc, LayaGroup.command)}", err=True)
            sys.exit(2)
        except OSError as exc:
            # A write that failed outside the library's writers (a full disk, a quota, a read-only folder): one
            # line naming the path, as the writers say it (laya_eval.output.files.storage_error).
            from pathlib import Path

            from laya_eval.output.files import STORAGE_ERRNOS, storage_error

            if exc.errno not in STORAGE_ERRNOS:
                raise
            folder = Path(exc.filename).parent if exc.filename else Path.cwd()
            click.echo(f"Error: {storage_error(exc, folder, 0, intact=False)}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("Interrupted; nothing half-written was left behind.", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def _one_line_warnings(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
    """laya-eval's own warnings (a damaged cache entry recomputed, ...) as one ``Warning: ...`` line."""
    from laya_eval.errors import DefaultedWarning, RecomputedWarning

    if issubclass(category, (RecomputedWarning, DefaultedWarning)):
        click.echo(f"Warning: {message}", err=True)
    else:
        _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning
warnings.showwarning = _one_line_warnings


# More threads than cores only slows torch down; 100000 of them exhausted the process ids (SIGSEGV).
MAX_THREADS = os.cpu_count() or 1


@click.group(cls=LayaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="laya-eval")
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=MAX_THREADS),
    default=None,
    envvar="LAYA_EVAL_THREADS",
    show_envvar=True,
    help="CPU threads for torch, at most the machine's cores (default: torch's "
    "choice). 1 is often fastest on a machine shared with other jobs.",
)
def cli(threads: int | None) -> None:
    """How faithful are layer attributions? Train, evaluate and report on layer-aggregating heads."""
    if threads is None:
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    else:
        # torch is imported only inside commands, so that --help stays instant (also with
        # LAYA_EVAL_THREADS set); it takes its thread count from these when it loads.
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)


for _command in commands.ALL:
    cli.add_command(_command)


if __name__ == "__main__":  # python -m laya_eval_cli.main
    cli(prog_name="laya-eval")
