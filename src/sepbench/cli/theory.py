"""The papers' theory as commands: hand-set constructions, lower bounds, and softmax vs linear attention."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from pydantic import ValidationError
from rich.table import Column, Table

from sepbench.cli.app import bad_input_exits, err, out, print_whole
from sepbench.cli.options import OutputFormat, given_lengths, parse_lengths, require_folder, store_option
from sepbench.config import ConfigError

if TYPE_CHECKING:
    from sepbench.theory.constructions import Construction


def construct(
    name: str = typer.Argument(..., help="index_lookup, equality, eq_one, nearest_neighbor or nearest_neighbor_copy"),
    length: Optional[int] = typer.Option(None, help="task size N"),
    lengths: Optional[str] = typer.Option(None, help="several task sizes, comma-separated"),
    code_width: Optional[int] = typer.Option(None, help="width of the position codes [default: the smallest accepted]"),
    samples: int = typer.Option(1000, min=0, help="random instances to score at each N (0: none)"),
    verify_up_to: int = typer.Option(1000, min=0, help="score instances only at N up to this (longer: codes checked only)"),
    find_min_width: bool = typer.Option(False, "--find-min-width", help="search the smallest code width per N"),
    seed: int = typer.Option(0, min=0, help="seed for the codes and the instances"),
    queries: str = typer.Option("recall", help="nearest-neighbour instances: recall (each query repeats a stored "
                                "point) or margin (any query with one nearest point)"),
    precision: bool = typer.Option(False, "--precision", help="also find the fixed-point bits that keep it exact on "
                                   "the scored instances (App. B.2): p = sign + integer + fraction bits"),
) -> None:
    """Build a hand-set Transformer from the separations paper and score it like a trained model."""
    from sepbench.theory.constructions import CONSTRUCTIONS, construct as build, min_code_width, refuse_unfitting

    with bad_input_exits():
        if name not in CONSTRUCTIONS:
            raise ConfigError(f"unknown construction '{name}'; allowed: {', '.join(CONSTRUCTIONS)}")
        sizes = given_lengths(length, lengths, shortest=4, even=name != "index_lookup")
        if queries not in ("recall", "margin"):
            raise ConfigError(f"--queries must be recall or margin, got '{queries}'")
        if queries != "recall" and not name.startswith("nearest_neighbor"):
            raise ConfigError(f"--queries applies to nearest_neighbor and nearest_neighbor_copy, not {name}")
        if code_width is not None and code_width < 1:
            raise ConfigError(f"--code-width must be >= 1, got {code_width}")
        if code_width is not None and find_min_width:
            raise ConfigError("--code-width and --find-min-width exclude each other: give a width or search for one")
        refuse_unfitting(name, sizes, code_width)
    columns: list[str | Column] = ["N", "layers", "code width", "model width", "instances", "accuracy"]
    columns += [Column("precision", no_wrap=True)] if precision else []
    table = Table(*columns, "details", title=f"{name}: {CONSTRUCTIONS[name]}")
    for n in sizes:
        width = min_code_width(name, n, seed) if find_min_width else code_width
        with bad_input_exits():
            try:
                built = build(name, n, width, seed, queries)
            except ValueError as problem:
                raise ConfigError(str(problem)) from None
        count = samples if n <= verify_up_to else 0
        accuracy = f"{100 * built.accuracy(count, seed):.2f}%" if count else "-"
        details = ", ".join(f"{k}={v:.3g}" for k, v in built.details.items())
        bits = [precision_text(built, count, seed)] if precision else []
        table.add_row(str(n), str(built.model.config.layers), str(built.code_width), str(built.width),
                      str(count), accuracy, *bits, details)
    print_whole(table)


def precision_text(built: Construction, samples: int, seed: int) -> str:
    """'19 bits (1 + 9 + 9)' for a construction exact at 9 fraction bits with values below 2^9; '-' unscored."""
    from sepbench.theory.precision import measure_precision

    if not samples:
        return "-"
    found = measure_precision(built, samples, seed)
    if not found.exact:
        return f"inexact up to {found.fraction_bits} fraction bits"
    return f"{found.bits} bits (1 + {found.integer_bits} + {found.fraction_bits})"


def bounds(
    task: str = typer.Option(..., help="index_lookup, dyck, eq_random, eq_one, equality, nearest_neighbor, mqar, associative_recall"),
    length: Optional[int] = typer.Option(None, help="task size N"),
    lengths: Optional[str] = typer.Option(None, help="several task sizes, comma-separated"),
    precision: int = typer.Option(32, help="bits per number p"),
    output: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table, csv or json"),
) -> None:
    """The paper's lower bounds on model size for a task at size N and precision p."""
    from sepbench.theory.bounds import EVEN_ONLY, SHORTEST, bound_table

    with bad_input_exits():
        sizes = given_lengths(length, lengths, shortest=SHORTEST, even=task in EVEN_ONLY)
        try:
            frame = bound_table(task, sizes, precision)
        except ValueError as problem:
            raise ConfigError(str(problem)) from None
    if output is OutputFormat.csv:
        sys.stdout.write(frame.to_csv(index=False))
    elif output is OutputFormat.json:
        sys.stdout.write(frame.to_json(orient="records", indent=2) + "\n")
    else:
        table = Table("N", "theorem", "architecture", "bounded", "bound", "smallest allowed", "statement",
                      title=f"lower bounds for {task} at p = {precision} bits")
        for row in frame.itertuples(index=False):
            table.add_row(str(row.length), row.theorem, row.architecture, row.quantity, f"{row.value:.4g}",
                          str(row.minimum), row.statement)
        print_whole(table)


def softmax_vs_linear(
    ctx: typer.Context,
    figure: str = typer.Argument(..., help="a figure id (fig3a, fig3b, fig4a-f, fig5a-f, fig7a-e) or 'learned'"),
    out_dir: Path = typer.Option(Path("results/deng2023"), "--out", help="folder for the PNG and CSV"),
    trials: Optional[int] = typer.Option(None, min=1, help="random networks per point [default: the config's, 100]"),
    seed: Optional[int] = typer.Option(None, min=0, help="base seed; point i uses seed + i [default: the config's]"),
    config_dir: Optional[Path] = typer.Option(None, help="folder of figure configs "
                                              "[default: the packaged configs/deng2023]"),
    lengths: Optional[str] = typer.Option(None, help="learned only: comma-separated n values"),
    steps: Optional[int] = typer.Option(None, min=1, help="learned only: training steps per classifier"),
    device: str = typer.Option("auto", help="auto (CUDA when present), cpu, cuda, cuda:N or mps"),
    store: Optional[Path] = store_option(),
) -> None:
    """Deng et al. softmax vs linear attention (definitions reconstructed, ranges ours): one figure's sweep."""
    from sepbench.extras import require
    from sepbench.store import Store
    from sepbench.theory.softmax_vs_linear import figures

    with bad_input_exits():
        unused = ({"--lengths": lengths, "--steps": steps} if figure != "learned" else
                  {"--trials": trials, "--config-dir": config_dir,
                   "--store": store if getattr(ctx.get_parameter_source("store"), "name", "") == "COMMANDLINE"
                   else None})
        given = [flag for flag, value in unused.items() if value is not None]
        if given:
            where = ("the figures only, not to the learned comparison" if figure == "learned" else
                     f"the learned comparison only, not to figure {figure}")
            raise ConfigError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to {where}")
        if config_dir is not None and not config_dir.is_dir():
            raise ConfigError(f"--config-dir {config_dir} is not a folder; allowed: a folder of figure configs "
                              f"such as {figures.CONFIG_DIR}")
        known = figures.figure_ids(config_dir or figures.CONFIG_DIR)
        if figure != "learned" and figure not in known:
            folder = config_dir or figures.CONFIG_DIR
            allowed = f"{', '.join(known)} or learned" if known else f"learned (no figure configs in {folder})"
            raise ConfigError(f"unknown figure '{figure}'; allowed: {allowed}")
        where = _device(device)
        require_folder(out_dir)
        if figure != "learned":
            Store(store).check_writable()
        if figure == "learned":
            learned = _learned_config(lengths, steps, seed)
        else:
            require("matplotlib", "report", "sepbench softmax-vs-linear")
            config = figures.load_figure(figure, config_dir or figures.CONFIG_DIR)
    if figure == "learned":
        _learned(learned, out_dir, where)
        return
    err.print(f"{config.figure}: {config.title} ({figures.RECONSTRUCTED})", markup=False, highlight=False)
    frame = figures.run_figure(config, trials, seed, where, on_point=lambda row: err.print(
        f"  {row['parameter']}={row['value']:g}: E {row['successes']}/{row['trials']} ({row['seconds']:.2f}s)",
        markup=False, highlight=False))
    csv, png = figures.write_outputs(frame, config, out_dir)
    db = Store(store)
    db.put_softmax_vs_linear(figures.store_rows(frame))
    table = Table(config.parameter, "E", "trials", "F_exp(D0)=0", "F_exp(D1)>0", "F_lin(D0)=0", "F_lin(D1)=0",
                  title=f"{config.figure}: {config.title}", caption=figures.RECONSTRUCTED)
    for row in frame.itertuples(index=False):
        table.add_row(f"{row.value:g}", str(row.successes), str(row.trials), str(row.exp_d0_zero),
                      str(row.exp_d1_positive), str(row.lin_d0_zero), str(row.lin_d1_zero))
    print_whole(table)
    out.print(f"wrote {csv} and {png}; {len(frame)} points stored in {db.path}")


def _device(name: str) -> str:
    from sepbench.config import DEVICES, is_device_name
    from sepbench.train.environment import resolve_device

    if not is_device_name(name):
        raise ConfigError(f"--device '{name}' is not a device; allowed: {DEVICES}")
    try:
        return str(resolve_device(name))
    except (ValueError, RuntimeError) as problem:
        raise ConfigError(f"--device: {problem}".splitlines()[0]) from None


def _learned_config(lengths: str | None, steps: int | None, seed: int | None):
    from sepbench.theory.softmax_vs_linear.learned import LearnedConfig

    sizes = parse_lengths(lengths, "--lengths", shortest=3) if lengths else None
    fields = {"lengths": sizes, "steps": steps, "seed": seed}
    try:
        return LearnedConfig(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as problem:
        first = problem.errors()[0]
        raise ConfigError(f"learned {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def _learned(config, out_dir: Path, device: str) -> None:
    from sepbench.theory.softmax_vs_linear.learned import write_learned

    err.print(f"learned classifiers on R2 data ({config.describe()})", markup=False, highlight=False)
    frame, path = write_learned(config, out_dir, device, on_result=lambda row: err.print(
        f"  n={row['n']} {row['kind']}: test accuracy {row['test_accuracy']:.3f} ({row['seconds']:.1f}s)",
        markup=False, highlight=False))
    wide = frame.pivot(index="n", columns="kind", values="test_accuracy")
    table = Table("n", "softmax test acc", "linear test acc", title="learned D0-vs-D1 classifiers (R2 data, reconstructed)")
    for n, row in wide.iterrows():
        table.add_row(str(n), f"{row['exp']:.3f}", f"{row['lin']:.3f}")
    print_whole(table)
    out.print(f"wrote {path}")
