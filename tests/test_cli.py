import json

import pytest
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.store import Store

runner = CliRunner()
QUICK = ["run", "--task", "index_lookup", "--model", "transformer", "--layers", "1", "--width", "32", "--length", "12",
         "--steps", "40", "--seed", "0", "--device", "cpu", "--set", "train.eval_every=20", "--set", "train.eval_samples=200"]


def test_listings():
    tasks = runner.invoke(app, ["tasks"])
    models = runner.invoke(app, ["models"])
    assert tasks.exit_code == 0 and "index_lookup" in tasks.stdout
    assert "u[sep]v" in tasks.stdout and "dp[i]" in tasks.stdout  # descriptions as registered, not read as markup
    assert models.exit_code == 0 and "transformer" in models.stdout and "lstm" in models.stdout


def test_run_stores_and_force_reproduces(store_path):
    first = runner.invoke(app, QUICK)
    assert first.exit_code == 0, first.output
    store = Store(store_path)
    (stored,) = store.results()
    again = runner.invoke(app, QUICK)
    assert again.exit_code == 0 and "already in" in again.stderr and len(store) == 1
    forced = runner.invoke(app, QUICK + ["--force"])
    assert forced.exit_code == 0 and len(store) == 1
    (reran,) = store.results()
    assert reran.metrics == stored.metrics and [p.loss for p in reran.curve] == [p.loss for p in stored.curve]
    listing = runner.invoke(app, ["results", "--format", "json", "--by-seed"])
    rows = json.loads(listing.stdout)
    assert [r["config_hash"] for r in rows] == [stored.config_hash]
    csv = runner.invoke(app, ["results", "--format", "csv", "--by-seed"])
    assert csv.stdout.splitlines()[0].startswith("config_hash,task,model")
    (cell,) = json.loads(runner.invoke(app, ["results", "--format", "json"]).stdout)
    assert cell["config_hashes"] == stored.config_hash and cell["runs"] == 1


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "--task", "nope", "--model", "transformer"], "unknown task 'nope'; allowed:"),
        (["run", "--model", "nope"], "unknown model 'nope'; allowed:"),
        (["run", "--width", "0"], "model.width"),
        (["run", "--set", "no_such_field=1"], "unknown key 'no_such_field'"),
        (["run", "--set", "train.no_such_field=1"], "allowed in train"),
        (["run", "--eval-lengths", "3,x"], "comma-separated integers"),
        (["run", "--length", "5"], "options.min_length 10 (the shortest sequence drawn) exceeds length 5"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(store_path, args, fragment):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not store_path.exists() or len(Store(store_path)) == 0


def test_run_showing_a_stored_failed_run_exits_1(store_path):
    from sepbench.sweep.runner import failed_result

    assert runner.invoke(app, QUICK).exit_code == 0
    store = Store(store_path)
    (trained,) = store.results()
    store.put(failed_result(trained.config, RuntimeError("boom")))
    shown = runner.invoke(app, QUICK)
    assert shown.exit_code == 1 and "is stored as failed" in shown.stderr and "--force trains it again" in shown.stderr


def test_malformed_yaml_exits_2(store_path, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {width: [\n")
    result = runner.invoke(app, ["run", "--config", str(bad)])
    assert result.exit_code == 2 and "not valid YAML" in result.stderr
    assert not store_path.exists() or len(Store(store_path)) == 0


def test_config_file_and_flags_combine(store_path, tmp_path):
    spec = tmp_path / "run.yaml"
    spec.write_text("task: {length: 12}\nmodel: {name: lstm, width: 16}\ntrain: {steps: 20, eval_every: 10, eval_samples: 100}\n")
    result = runner.invoke(app, ["run", "--config", str(spec), "--width", "24", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    (run,) = Store(store_path).results()
    assert (run.config.model.name, run.config.model.width, run.config.task.length) == ("lstm", 24, 12)


def test_run_takes_one_thread_unless_told(store_path, monkeypatch):
    import torch

    monkeypatch.delenv("SEPBENCH_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert runner.invoke(app, QUICK).exit_code == 0 and torch.get_num_threads() == 1
        assert runner.invoke(app, QUICK + ["--threads", "3"]).exit_code == 0 and torch.get_num_threads() == 3
        monkeypatch.setenv("SEPBENCH_THREADS", "2")
        assert runner.invoke(app, QUICK).exit_code == 0 and torch.get_num_threads() == 2
        assert runner.invoke(app, QUICK + ["--threads", "1"]).exit_code == 0 and torch.get_num_threads() == 1
        monkeypatch.setenv("SEPBENCH_THREADS", "many")
        refused = runner.invoke(app, QUICK)
        assert refused.exit_code == 2 and "SEPBENCH_THREADS must be a whole number" in refused.stderr
    finally:
        torch.set_num_threads(before)


TINY_SPEC = ("name: tiny\nbase: {task: {name: index_lookup, length: 12}, model: {name: lstm, width: 8},\n"
             "  train: {steps: 4, eval_every: 2, eval_samples: 16, batch_size: 4}}\nseeds: [0, 1]\n")
WIDTH_SEARCH = ["minwidth", "--task", "index_lookup", "--model", "lstm", "--lengths", "12", "--widths", "8"]


@pytest.mark.parametrize("args, fragment", [
    (WIDTH_SEARCH + ["--store", "{tmp}/folder"], "is a directory; give a file path"),
    (WIDTH_SEARCH + ["--store", "{tmp}/junk.db"], "is it a sepbench SQLite store?"),
    (["sweep", "{tmp}/folder"], "config file {tmp}/folder is a folder; give a YAML file"),
    (["sweep", "{tmp}/empty.yaml"], "is empty; a spec names at least its base, grid or cases"),
    (["sweep", "{tmp}/named.yaml"], "named.yaml names no runs (name only); a spec names at least its base, grid"),
    (["sweep", "{tmp}/junk.db"], "must hold a mapping of keys (name, base, cases"),
    (WIDTH_SEARCH + ["--lrs", "0.01,,0.001"], "--lrs expects comma-separated positive numbers, got '0.01,,0.001'"),
    (WIDTH_SEARCH + ["--lrs", "0.01,nan"], "--lrs expects comma-separated positive numbers"),
    (WIDTH_SEARCH + ["--lrs", "1e-3,0.001"], "--lrs names 0.001 more than once; each rate is tried once"),
    (WIDTH_SEARCH + ["--threshold", "0.995"], "--threshold 0.995 is above the runs' train.threshold 0.99"),
    (WIDTH_SEARCH + ["--set", "model.width=16"], "--set model.width: minwidth sets model.width for each run; give it "
     "with --widths"),
    (WIDTH_SEARCH + ["--set", "seed=5"], "--set seed: minwidth sets seed for each run; give it with --m"),
    (WIDTH_SEARCH + ["--set", "length=20"], "--set length: minwidth sets task.length for each run"),
    (WIDTH_SEARCH + ["--threshold", "0.95", "--set", "train.threshold=0.9"],
     "--threshold <= 0.9, --set train.threshold=0.95 or"),
    (["construct", "index_lookup", "--length", "16", "--samples", "-1"], "'--samples'"),
    (["construct", "index_lookup", "--length", "16", "--lengths", "8,32"], "give --length N or --lengths"),
    (["construct", "index_lookup", "--length", "16", "--find-min-width", "--code-width", "5"],
     "--code-width and --find-min-width exclude each other"),
    (["results", "--store", "{tmp}/tiny.db", "--out", "{tmp}/junk.db/rows.csv", "--format", "csv"],
     "--out {tmp}/junk.db/rows.csv: {tmp}/junk.db is a file, not a folder"),
    (["results", "--store", "{tmp}/tiny.db", "--out", "/proc/rows.csv", "--format", "csv"],
     "--out /proc/rows.csv: /proc cannot be written"),
    (["flops", "--model", "transformer", "--width", "8", "--length", "99999999999999999999"],
     "'--length': Input should be less than or equal to 1000000"),
    (["softmax-vs-linear", "fig3a", "--seed", "-1"], "'--seed': Input should be greater than or equal to 0"),
    (["table2", "--lengths", "10,10", "--dims", "transformer=8,8"], "--lengths 10,10 names a length more than once"),
    (["table2", "--lengths", "10", "--dims", "transformer=8", "--dims", "transformer=16"],
     "--dims names transformer more than once"),
    (["results", "--store", "{tmp}/tiny.db", "--running", "--by-seed"], "--by-seed and --threshold show stored runs"),
    (["table2", "--lengths", "99999999999999999999", "--dims", "transformer=8"],
     "--lengths expects task sizes from 1 to 1000000, got '99999999999999999999'"),
])
def test_bad_paths_and_options_exit_2_with_one_line(tmp_path, store_path, args, fragment, monkeypatch, capsys):
    from sepbench.cli import main

    (tmp_path / "folder").mkdir()
    (tmp_path / "junk.db").write_text("not a database")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "named.yaml").write_text("name: only\n")
    (tmp_path / "tiny.yaml").write_text(TINY_SPEC)
    assert runner.invoke(app, ["sweep", str(tmp_path / "tiny.yaml"), "--store", str(tmp_path / "tiny.db")]).exit_code == 0
    monkeypatch.setattr("sys.argv", ["sepbench", *[a.format(tmp=tmp_path) for a in args]])
    with pytest.raises(SystemExit) as stop:
        main()
    printed = capsys.readouterr()
    assert stop.value.code == 2 and printed.err.count("\n") == 1, printed
    assert fragment.format(tmp=tmp_path) in printed.err, printed.err
    assert not store_path.exists()


def test_a_width_search_over_a_stored_run_it_cannot_read_trains_it_again_and_says_so_once(tmp_path):
    import sqlite3

    store = tmp_path / "runs.db"
    search = WIDTH_SEARCH + ["--steps", "4", "--m", "1", "--k", "1", "--set", "train.eval_every=2",
                             "--set", "train.eval_samples=16", "--store", str(store)]
    assert runner.invoke(app, search).exit_code == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE runs SET result = '{not json'")
    again = runner.invoke(app, search)
    assert again.exit_code == 0, again.output
    notes = [line for line in again.stderr.splitlines() if "cannot be read" in line]
    assert len(notes) == 1 and "trained again and its row replaced" in notes[0], again.stderr
    assert "trained 1 new run" in again.stdout
    assert Store(store).results()[0].status == "completed"


def test_results_out_writes_through_a_link_and_refuses_a_pipe_it_would_replace(tmp_path):
    import os

    (tmp_path / "tiny.yaml").write_text(TINY_SPEC)
    store = str(tmp_path / "tiny.db")
    assert runner.invoke(app, ["sweep", str(tmp_path / "tiny.yaml"), "--store", store]).exit_code == 0
    (tmp_path / "rows.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "rows.csv")
    linked = runner.invoke(app, ["results", "--store", store, "--format", "csv", "--out", str(tmp_path / "link.csv")])
    assert linked.exit_code == 0 and (tmp_path / "link.csv").is_symlink()
    assert (tmp_path / "rows.csv").read_text().startswith("cell,")
    os.mkfifo(tmp_path / "pipe")
    piped = runner.invoke(app, ["results", "--store", store, "--format", "csv", "--out", str(tmp_path / "pipe")])
    assert piped.exit_code == 2 and len(piped.stderr.splitlines()) == 1
    assert f"--out {tmp_path / 'pipe'} is not a regular file" in piped.stderr
    assert (tmp_path / "pipe").is_fifo()
    assert {p.name for p in tmp_path.iterdir()} == {"link.csv", "pipe", "rows.csv", "tiny.db", "tiny.yaml"}


def test_minwidth_takes_a_threshold_above_the_runs_own_when_they_do_not_stop_early(store_path):
    asked = WIDTH_SEARCH + ["--threshold", "0.995", "--steps", "2", "--m", "1", "--k", "1"]
    searched = runner.invoke(app, [*asked, "--set", "train.early_stop=false", "--set", "train.eval_samples=16",
                                   "--set", "train.eval_every=2"])
    assert searched.exit_code == 0, searched.output
    assert "solved = accuracy >= 0.995 in >= 1 of 1 seeds" in " ".join(searched.stdout.split()), searched.stdout
    assert len(Store(store_path)) == 1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", [["sweep", "{tmp}/tiny.yaml"], WIDTH_SEARCH,
                                     ["reproduce", "--claim", "eq-random", "--set", "train.steps=2"]])
def test_runs_on_a_missing_gpu_are_refused_before_any_is_stored(tmp_path, store_path, command):
    (tmp_path / "tiny.yaml").write_text(TINY_SPEC)
    args = [a.format(tmp=tmp_path) for a in command]
    device = ["--set", "device=cuda"] if command[0] == "reproduce" else ["--device", "cuda"]
    result = runner.invoke(app, [*args, *device])
    assert result.exit_code == 2 and "CUDA is not available; allowed here: auto, cpu" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert not store_path.exists() or len(Store(store_path)) == 0


@pytest.mark.parametrize("width", [80, 20])
def test_a_table_folds_a_long_value_at_its_spaces_and_never_splits_a_word(width, monkeypatch, capsys):
    import importlib
    import io

    from rich.console import Console
    from rich.table import Table

    cli_app = importlib.import_module("sepbench.cli.app")  # the module, not the typer app the package exports
    screen = io.StringIO()
    monkeypatch.setattr(cli_app, "out", Console(file=screen, width=width))
    table = Table("N", "layers", "code width", "model width", "instances", "accuracy", "details")
    table.add_row("8", "2", "32", "146", "5", "100.00%", "eta1=18.6, eta2=11.7, gamma=0.333, coherence=0.312")
    cli_app.print_whole(table)
    shown = screen.getvalue() + capsys.readouterr().out  # a table wider than the screen gets a console of its own
    lines = shown.splitlines()
    assert lines[0].startswith("┏") and lines[0].endswith("┓") and len({len(line) for line in lines}) == 1, shown
    words = {word for line in lines for word in line.replace("│", " ").replace("┃", " ").split()}
    assert {"eta1=18.6,", "eta2=11.7,", "gamma=0.333,", "coherence=0.312", "146", "layers"} <= words, shown
    assert (len(lines[0]) <= width) == (width == 80), shown


def print_on_screen(table, width: int, monkeypatch, capsys) -> list[str]:
    import importlib
    import io

    from rich.console import Console

    cli_app = importlib.import_module("sepbench.cli.app")
    screen = io.StringIO()
    monkeypatch.setattr(cli_app, "out", Console(file=screen, width=width))
    cli_app.print_whole(table)
    return (screen.getvalue() + capsys.readouterr().out).splitlines()


def test_a_no_wrap_column_shows_its_longest_value_whole_on_a_narrow_screen(monkeypatch, capsys):
    from rich.table import Table

    table = Table("run", "finished at", "details")
    table.columns[1].no_wrap = True
    table.add_row("a1", "2026-11-28 15:49:14", "a long remark that can fold at its spaces onto more lines")
    lines = print_on_screen(table, 30, monkeypatch, capsys)
    assert any("2026-11-28 15:49:14" in line for line in lines), "\n".join(lines)
    assert len({len(line) for line in lines}) == 1, "\n".join(lines)


def test_a_column_of_fixed_width_keeps_it_when_every_value_fits(monkeypatch, capsys):
    from rich.table import Table

    table = Table("N", "accuracy")
    table.columns[1].width = 12
    table.add_row("8", "1.00")
    lines = print_on_screen(table, 80, monkeypatch, capsys)
    header = next(line for line in lines if "accuracy" in line)
    assert len(header.split("┃")[2]) == 12 + 2, "\n".join(lines)  # the width and a space each side


def test_an_empty_column_takes_no_width_from_the_words_beside_it(monkeypatch, capsys):
    from rich.table import Table

    table = Table(show_header=False)
    table.add_column()
    table.add_column()
    table.add_row("", "alpha beta gamma delta")
    needed = 3 + 2 * 2 + len("gamma")  # three rules, a space each side of each cell, the longest word
    lines = print_on_screen(table, needed, monkeypatch, capsys)
    words = {word for line in lines[1:-1] for word in line.replace("│", " ").split()}
    assert words == {"alpha", "beta", "gamma", "delta"}, "\n".join(lines)
    assert max(len(line) for line in lines) <= needed, "\n".join(lines)


def test_results_and_report_warn_when_runs_stopped_early_below_the_threshold_asked(store_path, tmp_path):
    stopped = runner.invoke(app, QUICK + ["--set", "train.threshold=0.01"])
    assert stopped.exit_code == 0, stopped.output
    (run,) = Store(store_path).results()
    assert run.status == "solved" and run.steps < 40 and 0.01 <= run.metrics["accuracy"] < 0.5
    warning = ("warning: 1 run stopped early at train.threshold 0.01, below --threshold 0.5: they read unsolved at 0.5 "
               "because of their own early stop, not the model's; retrain them with --set train.threshold=0.5 or "
               "--set train.early_stop=false")
    above = runner.invoke(app, ["results", "--threshold", "0.5", "--format", "json"])
    assert above.exit_code == 0 and warning in above.stderr, above.stderr
    assert [cell["solved"] for cell in json.loads(above.stdout)] == [0]
    for quiet in (["results"], ["results", "--threshold", "0.01"]):
        assert "stopped early" not in runner.invoke(app, quiet).stderr
    report = runner.invoke(app, ["report", "--out", str(tmp_path / "report"), "--threshold", "0.5",
                                 "--flops-threshold", "0.01"])
    assert report.exit_code == 0, report.output
    assert report.stderr.count("stopped early") == 1 and warning in report.stderr
    flops = runner.invoke(app, ["report", "--out", str(tmp_path / "report"), "--flops-threshold", "0.5"])
    assert "below --flops-threshold 0.5" in flops.stderr, flops.stderr
