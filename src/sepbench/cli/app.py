"""The typer app every command joins, its two consoles, and the exits every command shares."""
from __future__ import annotations

import gc
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, NoReturn, Sequence

import typer
from rich.console import Console
from rich.table import Table

from sepbench.config import ConfigError
from sepbench.files import NotARegularFile
from sepbench.plugins import PluginError
from sepbench.registry import UnknownNameError
from sepbench.store import Store, StoreError
from sepbench.wording import counted

if TYPE_CHECKING:
    from sepbench.train.result import RunResult

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # rich markup would swallow the "[default: ...]" of hand-written help
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Measure how large each sequence model must be to solve a task as the task grows.",
)
out = Console()
err = Console(stderr=True)

BAD_INPUT = 2
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def _print_version(requested: bool) -> None:
    if requested:
        from sepbench._version import __version__

        out.print(f"sepbench {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    pass


def say(text: str) -> None:
    """One line (or paragraph) on stdout, wrapped by the terminal only; rich markup in ``text`` applies."""
    out.print(text, highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """One line on stderr, as written."""
    err.print(text, markup=False, highlight=False, soft_wrap=True)


def warn_unreadable(store: Store) -> None:
    """One warning line for each run the store's last ``results`` call could not read and left out."""
    for key, reason in store.unreadable:
        warn(f"warning: stored run {key} cannot be read and is left out ({reason})")


def warn_unreadable_rows(unreadable: dict[str, str]) -> None:
    """One note for the stored rows (config hash -> reason) a plan trains again because this code cannot read them."""
    if unreadable:
        key, reason = next(iter(unreadable.items()))
        more = f" and {len(unreadable) - 1} more" if len(unreadable) > 1 else ""
        again = "they are trained again and their rows replaced" if more else "it is trained again and its row replaced"
        warn(f"note: {counted(len(unreadable), 'stored run')} cannot be read by this code (run {key}: {reason}"
             f"{more}); {again}")


def warn_stopped_short(results: Sequence[RunResult], threshold: float | None, option: str) -> None:
    """One warning line when runs stopped early below ``threshold`` (given as ``option``) and so read unsolved
    at it for their own settings."""
    from sepbench.results import stopped_short

    short = [] if threshold is None else stopped_short(results, threshold)
    if short:
        levels = ", ".join(f"{level:g}" for level in sorted({r.config.train.threshold for r in short}))
        warn(f"warning: {counted(len(short), 'run')} stopped early at train.threshold {levels}, below {option} "
             f"{threshold:g}: they read unsolved at {threshold:g} because of their own early stop, not the model's; "
             f"retrain them with --set train.threshold={threshold:g} or --set train.early_stop=false")


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Turn a configuration problem into one line on stderr and exit code 2."""
    try:
        yield
    except (ConfigError, UnknownNameError, PluginError, FileNotFoundError, StoreError, NotARegularFile) as problem:
        warn(f"error: {problem}")
        raise typer.Exit(BAD_INPUT) from None


def exit_on_failures(failed: dict[str, str], command: str, what: str = "run") -> None:
    """List the failed runs (or the ``what`` they are grouped by) of this command, one line each, and exit 1;
    nothing when none failed."""
    if not failed:
        return
    for key, reason in failed.items():
        warn(f"failed: {key}: {reason}")
    warn(f"error: {counted(len(failed), what)} of this {command} failed (listed above); fix the cause and rerun "
         "with --retry-failed")
    raise typer.Exit(1)


def interrupted(finished: str, store: Store, since: float) -> NoReturn:
    """Say what an interrupted command kept: ``finished`` runs, and the checkpoints written since ``since``
    (the runs in training when the interrupt came, and any that saved one on the way)."""
    from sepbench.sweep.interrupts import saved_checkpoints

    saved = saved_checkpoints(store, since)
    if saved:
        many = len(saved) > 1
        warn(f"checkpointed {len(saved)} run{'s' if many else ''} in flight in {store.checkpoints} "
             f"(at step{'s' if many else ''} {', '.join(step for _, step in saved)})")
    warn(f"interrupted: {finished}; rerun the same command to resume")
    raise typer.Exit(INTERRUPTED)


def narrowest(table: Table) -> int:
    """The console width ``table`` needs to give every column its minimum width (rich squeezes columns below it)."""
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update_width(1 << 16), table).minimum


def print_whole(table: Table) -> None:
    """Print ``table`` on a console wide enough for its every column's minimum width (its longest word; a no_wrap
    column's longest value), a value too long for its column folded onto the next line at a space, never cut and
    never split inside a word."""
    ranges = _column_ranges(table)
    for column, (least, _) in zip(table.columns, ranges):
        if column.no_wrap and not column.width:
            column.min_width = least
    needed = narrowest(table)
    console = out if needed <= out.width else Console(width=needed)
    for column, width in zip(table.columns, _column_widths(table, ranges, console.width - needed)):
        column.overflow = "fold"
        column.width = width
    console.print(table)


def _column_ranges(table: Table) -> list[tuple[int, int]]:
    """Each column's (least, most) width: its longest word (a no_wrap column's longest value, a fixed column its
    width) and its longest value, header included where shown; an empty column 0, as rich gives it."""
    from rich.measure import Measurement

    options = out.options.update_width(1 << 16)
    ranges = []
    for column in table.columns:
        if column.width:
            ranges.append((column.width, column.width))
            continue
        cells = [column.header, *column.cells] if table.show_header else list(column.cells)
        measured = [Measurement.get(out, options, cell) for cell in cells]
        most = max([m.maximum for m in measured] + [column.min_width or 0])
        least = most if column.no_wrap else max([m.minimum for m in measured] + [column.min_width or 0])
        ranges.append((least, most))
    return ranges


def _column_widths(table: Table, ranges: list[tuple[int, int]], spare: int) -> list[int | None]:
    """Each column's width: its least of ``ranges`` (``_column_ranges``), then of ``spare`` columns what shows its longest value
    whole, the columns that want least first, and the rest shared evenly by the others; where every value fits
    whole, a fixed column's own width and None for the others. rich's own squeeze can cut below a column's longest
    word, which folding then splits."""
    wants = [most - least for least, most in ranges]
    if sum(wants) <= spare:
        return [column.width or None for column in table.columns]
    shares = [0] * len(wants)
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    while order and wants[order[0]] <= spare:
        shares[order[0]] = wants[order[0]]
        spare -= wants[order.pop(0)]
    for done, i in enumerate(order):
        shares[i] = spare // (len(order) - done)
        spare -= shares[i]
    return [least + share for (least, _), share in zip(ranges, shares)]


def _click_errors() -> tuple[type, type, type | None]:
    """ClickException, UsageError and NoArgsIsHelpError of the click that typer runs on (its own copy in typer
    0.20 and later, click itself before)."""
    family = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    usage = family["UsageError"]
    return family["ClickException"], usage, getattr(sys.modules[usage.__module__], "NoArgsIsHelpError", None)


def main() -> None:
    """The console script: the app, with a bad option or command as one line on stderr (not click's usage box)."""
    failure, usage, no_args = _click_errors()
    try:
        code = app(standalone_mode=False)
    except failure as problem:
        if no_args is not None and isinstance(problem, no_args):
            shown = problem.format_message()  # the help: empty where typer's rich help printed itself already
            if shown.strip():
                typer.echo(shown)
        elif isinstance(problem, usage):
            command = problem.ctx.command_path if problem.ctx is not None else "sepbench"
            shown = problem.format_message().replace(": Value error, ", ": ")  # typer's enum check words it so
            warn(f"error: {shown} (`{command} -h` lists what is allowed)")
        else:
            warn(f"error: {problem.format_message()}")
        code = problem.exit_code
    except typer.Abort:
        warn("aborted")
        code = 1
    finally:
        gc.freeze()  # the interpreter's last collections would otherwise walk every torch object: ~0.3-1.5 s at exit
    sys.exit(code if isinstance(code, int) else 0)
