"""What sepbench holds: its tasks and models (with their costs at one size), FLOP counts, and plugin checks."""
from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from sepbench.cli.app import bad_input_exits, out, print_whole
from sepbench.cli.options import LONGEST, model_call, parse_lengths
from sepbench.config import ConfigError
from sepbench.registry import MODELS, TASKS, Registry


def list_tasks() -> None:
    """List the registered tasks."""
    out.print(_listing("task", TASKS))


def list_models(
    details: bool = typer.Option(False, "--details", help="add parameters, state size and FLOPs at the given size"),
    width: int = typer.Option(64, min=1, help="hidden size for --details"),
    layers: int = typer.Option(2, min=1, help="number of blocks for --details"),
    heads: int = typer.Option(4, min=1, help="attention heads for --details"),
    length: int = typer.Option(512, min=1, max=LONGEST, help="sequence length for --details"),
    vocab: int = typer.Option(32, min=1, max=LONGEST, help="vocabulary size for --details"),
) -> None:
    """List the registered architectures (with --details: what each costs at one size)."""
    if not details:
        out.print(_listing("model", MODELS))
        return
    from sepbench.models.accounting import model_cost

    title = f"width {width}, {layers} layers, {heads} heads, length {length}, vocabulary {vocab}"
    table = Table(title=title)
    table.add_column("model", no_wrap=True)
    for column in ("parameters", "state", "FLOPs", "Table-2 FLOPs"):
        table.add_column(column, justify="right", no_wrap=True)
    with bad_input_exits():
        for entry in MODELS:
            cost = model_call(f"--details for {entry.name}", lambda: model_cost(
                entry.name, width, layers, length, vocab_size=vocab, heads=heads))
            table.add_row(entry.name, f"{cost.parameters:,}", f"{cost.state_floats:,}", f"{cost.flops:.4g}",
                          f"{cost.paper_flops:.4g}")
    print_whole(table)
    out.print("state: floats per example after `length` tokens; FLOPs: matrix products of one forward pass "
              "(2 per multiply-add); Table-2 FLOPs: Yang et al.'s convention over the same tokens, "
              "length x (24 layers d^2 + 1.4e4), length = L + 2 for CoT length L")


def _listing(kind: str, registry: Registry) -> Table:
    """The registered names with their descriptions, then one row per installed plugin (entry point) of the
    registry's kind; plugins are not imported to list them."""
    table = Table(kind, "description")
    for entry in registry:
        table.add_row(Text(entry.name), Text(entry.description))  # as written: "u[sep]v" is no markup
    for name, point in sorted(registry.plugins.installed().items()):
        if name not in registry:
            table.add_row(Text(name), Text(f"plugin {point.value}" + (f" ({point.dist.name})" if point.dist else "")))
    return table


def flops(
    model: str = typer.Option(..., help="model name (see `sepbench models`)"),
    width: int = typer.Option(..., min=1, help="hidden size d"),
    layers: int = typer.Option(3, min=1, help="number of blocks"),
    length: int = typer.Option(..., min=1, max=LONGEST,
                               help="CoT length L; the sequence holds L + 2 tokens (Table 2's convention)"),
    heads: int = typer.Option(4, min=1, help="attention heads"),
    vocab: int = typer.Option(21, min=1, max=LONGEST, help="vocabulary size (21: Arithmetic)"),
) -> None:
    """Forward FLOPs of one CoT sequence: Yang et al.'s Table 2 convention and the true count."""
    from sepbench.models.flops_table import sequence_flops

    with bad_input_exits():
        cost = model_call("flops", lambda: sequence_flops(model, width, layers, length, heads=heads, vocab_size=vocab))
    out.print(f"{model}, width {width}, {layers} layers, CoT length {length} ({cost.tokens} tokens)")
    out.print(f"paper convention (Table 2): {cost.paper / 1e9:.4f} GFLOPs")
    out.print(f"true count:                 {cost.true / 1e9:.4f} GFLOPs")


def table2(
    dims: list[str] = typer.Option([], "--dims", help="MODEL=d1,d2,...: smallest solving width per length "
                                   "[default: the widths Table 2 implies for the three Transformers]"),
    lengths: str = typer.Option("87,221,355,505", help="CoT lengths, comma-separated"),
    layers: int = typer.Option(3, min=1, help="number of blocks"),
) -> None:
    """Yang et al. 2024 Table 2: minimum GFLOPs to reach 90%, from the smallest solving widths."""
    from sepbench.models.flops_table import PAPER_LENGTHS, PAPER_MIN_WIDTHS, table2 as build_table

    with bad_input_exits():
        columns = tuple(parse_lengths(lengths, "--lengths"))
        if not dims and columns != PAPER_LENGTHS:
            raise ConfigError(f"the default widths are Table 2's, for the lengths {','.join(map(str, PAPER_LENGTHS))} "
                              f"only; for --lengths {lengths} give the widths: --dims MODEL=d1,d2,... (one per length)")
        if len(set(columns)) < len(columns):
            raise ConfigError(f"--lengths {lengths} names a length more than once; each is one column")
        parsed = [_parse_dims(item) for item in dims]
        named = [model for model, _ in parsed]
        if twice := sorted({model for model in named if named.count(model) > 1}):
            raise ConfigError(f"--dims names {', '.join(twice)} more than once; give each model once")
        widths = dict(parsed) if dims else dict(PAPER_MIN_WIDTHS)
        rows = model_call("--dims", lambda: build_table(widths, columns, layers))
    for convention in ("paper", "true"):
        title = "GFLOPs, Table 2 convention" if convention == "paper" else "GFLOPs, true count (attention included)"
        table = Table("model", *(f"L={n}" for n in columns), title=title)
        for model, cells in rows.items():
            table.add_row(model, *(f"{getattr(c, convention) / 1e9:.3f}" for c in cells))
        print_whole(table)


def _parse_dims(item: str) -> tuple[str, tuple[int, ...]]:
    model, sep, values = item.partition("=")
    try:
        if not sep:
            raise ValueError
        return model.strip(), tuple(int(v) for v in values.split(","))
    except ValueError:
        raise ConfigError(f"--dims expects MODEL=d1,d2,... (e.g. transformer=64,128,128,128), got '{item}'") from None


CHECK_LENGTH = 12


def _refuse_size(plugin: str, length: int) -> None:
    """ConfigError when the task ``plugin`` refuses size ``length`` (ValueError) but builds at the default size:
    the size asked for is at fault. A task that fails at both is left to its 'builds' check, reported failed."""
    from sepbench.tasks import build_task

    try:
        build_task(plugin, length)
    except ValueError as problem:
        try:
            build_task(plugin, CHECK_LENGTH)
        except Exception:  # noqa: BLE001 - any failure here is the task's, which its build check reports
            return
        raise ConfigError(f"--length {length}: {plugin} refuses it: {problem}") from None
    except Exception:  # noqa: BLE001 - as above
        return


def check_plugin(
    ctx: typer.Context,
    plugin: str = typer.Argument(..., help="a mixer or task: package.module:Class, an installed plugin's name, or a "
                                 "built-in name"),
    learn_steps: int = typer.Option(1500, "--learn-steps", min=0,
                                    help="most steps of a mixer's learning check (0 skips it)"),
    length: int = typer.Option(CHECK_LENGTH, min=2, max=LONGEST, help="task size N a task is checked at"),
    samples: int = typer.Option(2000, min=1, help="rows of a task's sampling check"),
) -> None:
    """Run on a plugin the checks every built-in mixer (or task) passes; exit 1 when one fails.

    A mixer without a step path (``step`` raising NotImplementedError) or without a closed-form state size or
    FLOP count is reported as absent, not failed: it trains, but cannot be scored by generation.
    """
    import torch

    from sepbench.conformance import kind_of
    from sepbench.train.environment import default_threads

    with bad_input_exits():
        kind = kind_of(plugin)
        found = (MODELS if kind == "model" else TASKS).get(plugin)
        torch.set_num_threads(default_threads())
        if kind == "task" and getattr(ctx.get_parameter_source("length"), "name", "") == "COMMANDLINE":
            _refuse_size(plugin, length)
    if kind == "model":
        from sepbench.conformance.mixers import all_checks

        checks = all_checks(plugin, learn_steps=learn_steps)
    else:
        from sepbench.conformance.tasks import all_checks

        checks = all_checks(plugin, length, samples)
    table = Table("check", "result", "detail", title=f"{kind} {plugin} ({found.__module__}.{found.__name__})")
    style = {"pass": "green", "fail": "bold red", "absent": "yellow"}
    for check in checks:
        table.add_row(check.name, f"[{style[check.status]}]{check.status}[/]", Text(check.detail))
    print_whole(table)
    counts = {status: sum(c.status == status for c in checks) for status in style}
    out.print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['absent']} absent", highlight=False)
    if counts["fail"]:
        raise typer.Exit(1)
