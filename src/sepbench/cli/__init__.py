"""The ``sepbench`` command line: each command parses its options, makes one library call, and prints.

One module per family of commands; this module joins them to the app, in the order ``sepbench -h`` lists them.
Every module imports only light things at load (no torch), so ``sepbench -h`` starts fast.
"""
from sepbench.cli import catalogue, claims, report, results, runs, sweeps, theory
from sepbench.cli.app import app, err, main, out

COMMANDS = {
    "tasks": catalogue.list_tasks,
    "models": catalogue.list_models,
    "flops": catalogue.flops,
    "table2": catalogue.table2,
    "run": runs.run,
    "results": results.results,
    "construct": theory.construct,
    "bounds": theory.bounds,
    "sweep": sweeps.sweep,
    "minwidth": sweeps.minwidth,
    "report": report.report,
    "softmax-vs-linear": theory.softmax_vs_linear,
    "reproduce": claims.reproduce,
    "check-plugin": catalogue.check_plugin,
}
for _name, _command in COMMANDS.items():
    app.command(_name)(_command)

__all__ = ["app", "err", "main", "out"]
