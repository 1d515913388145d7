import json
import re
import shutil
import sqlite3
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sepbench import RunConfig, Store
from sepbench.cli import app
from sepbench.config import apply_overrides
from sepbench.report.bounds import BoundCurve, theory_bounds
from sepbench.report.figures import figure_data, heatmaps, min_width_vs_length, size_cells
from sepbench.report.page import flops_table, not_trained_table
from sepbench.sweep.search import SolvedRule, select_lr
from sepbench.train.result import EvalPoint, RunResult

runner = CliRunner()
LENGTHS, WIDTHS = [12, 24, 48], [4, 8, 16, 32]
LAWS = {"transformer": lambda n: 8, "lstm": lambda n: n // 2, "linear_transformer": lambda n: n}
FIGURES = ["heatmaps", "accuracy_vs_length_index_lookup", "validation_curves_index_lookup", "min_width_index_lookup",
           "softmax_vs_linear_index_lookup", "deng_fig4a"]

CHECK = """<script>
window.__problems = [];
addEventListener("error", e => __problems.push(e.message || ("failed to load " + String(e.target.src || e.target.href).slice(0, 80))), true);
addEventListener("load", async () => {
  const svgs = [...document.querySelectorAll('a[href$=".svg"]')].map(a => {
    const img = new Image(); img.src = a.href; return img.decode().then(() => img.naturalWidth, () => 0);
  });
  const figures = [...document.querySelectorAll("figure")];
  const report = {problems: __problems, images: [...document.images].map(i => i.naturalWidth),
                  figures: figures.map(f => f.id), svg: await Promise.all(svgs),
                  axes: Object.fromEntries(figures.map(f => [f.id, JSON.parse(f.dataset.axes)]))};
  document.body.insertAdjacentHTML("beforeend", "<pre id='browser-check'>" + JSON.stringify(report) + "</pre>");
});
</script>"""


def law_results(lengths=LENGTHS, widths=WIDTHS) -> list[RunResult]:
    """Seeds 0 and 1 solve from each model's known smallest width on; seed 2 never does."""
    results = []
    for model, law in LAWS.items():
        for n in lengths:
            for w in widths:
                for seed in range(3):
                    accuracy = 1.0 if w >= law(n) and seed < 2 else 0.25
                    cfg = RunConfig.build(apply_overrides({}, {"task.name": "index_lookup", "model.name": model,
                                                               "task.length": n, "model.width": w, "seed": seed,
                                                               "train.steps": 40, "device": "cpu"}))
                    curve = [EvalPoint(step=s, loss=1.0, accuracy=accuracy * s / 40, seconds=s / 10.0)
                             for s in (10, 20, 30, 40)]
                    results.append(RunResult(config=cfg, config_hash=cfg.config_hash(), metrics={"accuracy": accuracy},
                                             status="solved" if accuracy >= 0.99 else "completed", curve=curve,
                                             steps=40))
    return results


def run(model: str, n: int, w: int, seed: int, accuracy: float | None, status: str | None = None,
        error: str | None = None) -> RunResult:
    cfg = RunConfig.build(apply_overrides({}, {"task.name": "index_lookup", "model.name": model, "task.length": n,
                                               "model.width": w, "seed": seed, "train.steps": 40, "device": "cpu"}))
    return RunResult(config=cfg, config_hash=cfg.config_hash(), steps=40, error=error,
                     metrics={} if accuracy is None else {"accuracy": accuracy},
                     status=status or ("solved" if accuracy >= 0.99 else "completed"))


def diverged_results() -> list[RunResult]:
    """Every seed of lstm at width 64, N = 48 diverged: a failed cell above the solving width 32."""
    return [run("lstm", 48, 64, seed, None, "diverged", "non-finite loss at step 9") for seed in range(3)]


@pytest.fixture
def report_dir(tmp_path):
    root = tmp_path
    store = Store(root / "runs.db")
    for result in law_results() + diverged_results():
        store.put(result)
    store.put_softmax_vs_linear([{"point_key": f"fig4a-{v}", "figure": "fig4a", "parameter": "m", "value": v,
                                  "model": "self", "successes": s, "trials": 100, "seed": 0, "exp_d0_zero": 100,
                                  "exp_d1_positive": s, "lin_d0_zero": 100, "lin_d1_zero": 100, "seconds": 0.1,
                                  "setting": "{}", "created_at": ""} for v, s in [(1, 40), (2, 70), (4, 95)]])
    done = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(root / "out")], terminal_width=300)
    assert done.exit_code == 0, done.output
    assert f"report of {len(store)} runs: {len(FIGURES)} figures" in done.stdout and str(root / "out" / "index.html") in done.stdout
    return root / "out"


def test_report_writes_every_figure_as_png_and_svg_and_loads_in_headless_chromium(report_dir, tmp_path):
    page = (report_dir / "index.html").read_text()
    for slug in FIGURES:
        assert (report_dir / "figures" / f"{slug}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert ET.parse(report_dir / "figures" / f"{slug}.svg").getroot().tag.endswith("svg")
        assert re.search(f'<figure id="{slug}" data-axes="[^"]+"><img src="data:image/png;base64,', page)
        assert json.loads((report_dir / "figures" / f"{slug}.json").read_text())
    for mirrored in ["Yang et al. 2024, Fig. 1", "Bhattamishra et al. 2024, Fig. 2 (left)",
                     "Bhattamishra et al. 2024, Fig. 2 (middle, right)", "Bhattamishra et al. 2024, Fig. 3",
                     "Yang et al. 2024, Table 2"]:
        assert mirrored in page
    assert "No stored runs" not in page and "Deng et al., Figs. 3-5 and 7" in page
    assert '<td class="failed">diverged</td>' in page and "non-finite loss at step 9" in page
    assert "failed cell" in page
    assert "Deng et al., Fig. 4 (a)" in page
    flops = pd.read_csv(report_dir / "min_flops.csv", index_col="row")
    assert list(flops.columns) == ["12", "24", "48"]
    assert [cell.split(" ")[2:] for cell in flops.loc["index_lookup / lstm"]] == [["(1,", f"{w})"] for w in (8, 16, 32)]
    assert [cell.split(" ")[2:] for cell in flops.loc["index_lookup / transformer"]] == [["(1,", "8)"]] * 3
    assert [cell.split(" ")[2:] for cell in flops.loc["index_lookup / linear_transformer"][:2]] == [["(1,", "16)"],
                                                                                                   ["(1,", "32)"]]
    assert flops.loc["index_lookup / linear_transformer", "48"] == "not solved"
    check_in_browser(report_dir, tmp_path)


def test_min_width_plot_fits_the_known_law_and_draws_bounds_from_the_hook():
    calls = []

    def bounds(task, series, lengths):
        calls.append((task, [(s.name, {c.heads for c in s.configs}) for s in series], tuple(lengths)))
        return [BoundCurve("lstm, 1 layer", "lstm, 1 layer: RNN >= N / p", [n / 2 for n in lengths])]

    (figure,) = min_width_vs_length(law_results(), SolvedRule(), bounds=bounds)
    lines = {line.get_label(): line for line in figure.figure.axes[0].get_lines()}
    assert calls == [("index_lookup", [("linear_transformer, 1 layer", {4}), ("lstm, 1 layer", {4}),
                                       ("transformer, 1 layer", {4})], tuple(LENGTHS))]
    lstm, bound = lines["lstm, 1 layer: alpha = 1.00 [1.00, 1.00]"], lines["bound: lstm, 1 layer: RNN >= N / p"]
    assert bound.get_linestyle() == "--" and bound.get_color() == lstm.get_color()
    labels = list(lines)
    (flat,) = [label for label in labels if label.startswith("transformer, 1 layer: alpha = ")]
    alpha, low, high = map(float, re.findall(r"-?\d+\.\d+", flat))
    assert abs(alpha) < 0.005 and abs(low) < 0.005 and abs(high) < 0.005


def check_in_browser(report_dir, tmp_path):
    """Load the page in headless Chromium: no load errors, every figure drawn, every SVG file decodes."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    checked = report_dir / "checked.html"
    checked.write_text((report_dir / "index.html").read_text().replace("<head>", "<head>" + CHECK, 1))
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chromium-profile'}",
               "--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()]
    for _ in range(2):  # the check is written once the page's images decode; a loaded machine can dump the DOM first
        dom = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        if "<pre id=\"browser-check\">" in dom.stdout:
            break
    assert "<pre id=\"browser-check\">" in dom.stdout, f"the page never wrote its check: {dom.stdout[-2000:]}"
    report = json.loads(dom.stdout.split("<pre id=\"browser-check\">")[1].split("</pre>")[0])
    assert report["problems"] == []
    assert report["figures"] == FIGURES
    assert len(report["images"]) == len(FIGURES) and all(width > 300 for width in report["images"])
    assert len(report["svg"]) == len(FIGURES) and all(width > 300 for width in report["svg"])
    for slug, axes in report["axes"].items():
        assert axes, slug
        for ax in axes:
            assert_axes_hold_their_points(ax, slug)
    return report


def assert_axes_hold_their_points(ax: dict, where: str) -> None:
    """Every drawn point lies inside the axis limits, and at least two y ticks are visible."""
    (x0, x1), (y0, y1) = sorted(ax["xlim"]), sorted(ax["ylim"])
    outside = [(s["label"], p) for s in ax["series"] for p in s["points"]
               if not (x0 <= p[0] <= x1 and y0 <= p[1] <= y1)]
    assert outside == [], f"{where} {ax['title']}: points outside x {ax['xlim']}, y {ax['ylim']}: {outside[:3]}"
    assert len(ax["yticks"]) >= 2, f"{where} {ax['title']}: y ticks {ax['yticks']} in {ax['ylim']}"


@pytest.mark.parametrize("args, fragment", [
    (["--store", "{tmp}/missing.db"], "no store at"),
    (["--k", "5"], "--threshold, --k, --m: "),
    (["--flops-threshold", "0"], "--flops-threshold: threshold must be in (0, 1]"),
    (["--out", "{tmp}/file.txt"], "file.txt is a file, not a folder"),
    (["--out", "{tmp}/file.txt/sub"], "file.txt is a file, not a folder"),
    (["--out", "/proc/sepbench-report"], "/proc cannot be written"),
])
def test_report_bad_input_exits_2(tmp_path, args, fragment):
    store = Store(tmp_path / "runs.db")
    store.put(law_results([12], [8])[0])
    (tmp_path / "file.txt").write_text("x")
    base = {"--store": str(store.path), "--out": str(tmp_path / "out")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value.format(tmp=tmp_path)
    result = runner.invoke(app, ["report", *[x for kv in base.items() for x in kv]])
    assert result.exit_code == 2 and fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_store_with_nothing_to_report_exits_1_and_writes_nothing(tmp_path):
    store = Store(tmp_path / "runs.db")
    store.put(law_results([12], [8])[0])
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM runs")
    result = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "nothing to report, nothing written" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("blocked, made", [("figures", "file"), ("index.html", "folder"), ("min_flops.csv", "folder")])
def test_a_report_file_blocked_in_its_folder_is_one_line_and_nothing_written(tmp_path, blocked, made):
    store = Store(tmp_path / "runs.db")
    store.put(law_results([12], [8])[0])
    out = tmp_path / "out"
    out.mkdir()
    (out / blocked).write_text("") if made == "file" else (out / blocked).mkdir()
    result = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(out)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert str(out / blocked) in result.stderr
    assert [p.name for p in out.iterdir()] == [blocked]


def test_a_store_whose_only_run_was_cut_reports_its_cell_undecided(tmp_path):
    store = Store(tmp_path / "runs.db")
    pruned = law_results([12], [8])[0].model_copy(update={"status": "pruned", "metrics": {}})
    store.put(pruned)
    result = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "report of 1 run: 1 figure (heatmaps)" in result.stdout
    assert "every learning rate of 1 was cut by a search on some seed" in (tmp_path / "out" / "index.html").read_text()


def tiny_demo_spec(tmp_path: Path) -> Path:
    """The demo's sweep in miniature: Transformer and LSTM, 2 seeds, 10 steps (4 runs)."""
    spec = tmp_path / "demo.yaml"
    spec.write_text("name: tiny\nbase: {task: {name: index_lookup, length: 12, options: {alphabet_size: 4}},\n"
                    "  model: {layers: 1, width: 8}, train: {steps: 10, eval_every: 5, eval_samples: 50, batch_size: 8},"
                    " device: cpu}\ngrid: {model.name: [transformer, lstm]}\nlr_grid: [0.001]\nseeds: [0, 1]\n")
    return spec


def test_demo_sweeps_then_reports_and_reuses_its_runs(tmp_path, capsys):
    from sepbench.demo import main

    spec = tiny_demo_spec(tmp_path)
    page = main(spec, tmp_path / "demo.db", tmp_path / "report", workers=1)
    printed = capsys.readouterr().out
    assert page == tmp_path / "report" / "index.html" and page.exists()
    assert "4 runs, 0 already in" in printed and "[4/4]" in printed and "transformer-(1, 8)" in printed and "lstm-(1, 8)" in printed
    assert str(page.resolve()) in printed.replace("\n", "")
    budget = "10 steps of batch 8, learning rate 0.001 (the best per cell by mean accuracy), 2 seeds; alphabet of 4"
    assert budget in " ".join(printed.split())
    assert budget in " ".join(page.read_text().split())
    first = {r.config_hash: r.created_at for r in Store(tmp_path / "demo.db").results()}
    assert len(first) == 4
    main(spec, tmp_path / "demo.db", tmp_path / "report", workers=1)
    assert "[1/4]" not in capsys.readouterr().out
    assert {r.config_hash: r.created_at for r in Store(tmp_path / "demo.db").results()} == first


def test_ctrl_c_in_the_demo_s_sweep_says_what_is_stored_exits_130_and_the_rerun_resumes(tmp_path, monkeypatch,
                                                                                       capsys):
    from sepbench import demo

    spec, path = tiny_demo_spec(tmp_path), tmp_path / "demo.db"
    sweep = demo.run_sweep

    def ctrl_c_after_the_first_run(todo, store, on_result, **options):
        def stop(result: RunResult) -> None:
            on_result(result)
            raise KeyboardInterrupt  # as a Ctrl-C right after the first run is stored

        return sweep(todo, store, on_result=stop, **options)

    monkeypatch.setattr(demo, "run_sweep", ctrl_c_after_the_first_run)
    assert demo.run(spec, path, tmp_path / "report", workers=1) == 130
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err and "[1/4]" in printed.out
    assert printed.err.splitlines() == [f"interrupted: 1 of 4 runs finished and stored in {path}; rerun the same "
                                        "command to resume"]
    (kept,) = Store(path).results()
    assert not (tmp_path / "report").exists()
    monkeypatch.setattr(demo, "run_sweep", sweep)
    assert demo.run(spec, path, tmp_path / "report", workers=1) == 0
    assert "4 runs, 1 already in" in capsys.readouterr().out and (tmp_path / "report" / "index.html").exists()
    assert Store(path).get(kept.config_hash).created_at == kept.created_at


@pytest.mark.parametrize("where, kept", [
    ("sepbench.demo.pending", "nothing new is stored in {path}"),
    ("sepbench.report.write_report", "all 4 runs are stored in {path}, the report is not written"),
], ids=["before the sweep", "in the report"])
def test_ctrl_c_in_the_demo_outside_its_sweep_says_what_is_stored(tmp_path, monkeypatch, capsys, where, kept):
    from sepbench import demo

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, ctrl_c)
    path = tmp_path / "demo.db"
    assert demo.run(tiny_demo_spec(tmp_path), path, tmp_path / "report", workers=1) == 130
    assert capsys.readouterr().err == f"interrupted: {kept.format(path=path)}; rerun the same command to resume\n"
    assert len(Store(path)) == (0 if "pending" in where else 4)


def test_demo_cells_take_the_best_learning_rate_and_show_the_seeds_range():
    from sepbench.demo import accuracy_cells

    def run(model: str, lr: float, seed: int, accuracy: float, status: str = "completed") -> RunResult:
        cfg = RunConfig.model_validate({"task": {"name": "index_lookup", "length": 10},
                                        "model": {"name": model, "layers": 1, "width": 8},
                                        "train": {"lr": lr}, "seed": seed})
        return RunResult(config=cfg, config_hash=cfg.config_hash(), status=status, metrics={"accuracy": accuracy},
                         error="out of memory" if status == "failed" else None)

    cells = accuracy_cells([run("lstm", 1e-3, 0, 0.5), run("lstm", 1e-3, 1, 0.7), run("lstm", 5e-3, 0, 0.9),
                            run("lstm", 5e-3, 1, 0.96), run("mamba", 1e-3, 0, 0.0, "failed"),
                            run("transformer", 1e-3, 0, 1.0), run("transformer", 1e-3, 1, 0.2, "failed")])
    assert cells == {("lstm", 10): "0.93 (0.90-0.96)", ("mamba", 10): "failed", ("transformer", 10): "1.00 (1.00-1.00)"}


def test_min_width_plot_draws_no_bound_that_rules_out_no_width_at_its_lengths():
    """At p = 32 Thm 3 asks m >= N / 32 <= 1.5 state floats at these lengths: the smallest model of every series
    holds that, so no width is ruled out and no curve is drawn."""
    (figure,) = min_width_vs_length(law_results(), SolvedRule())
    assert not [line for line in figure.figure.axes[0].get_lines() if line.get_label().startswith("bound: ")]
    assert "rules out a width of" in figure.caption and "at these lengths, so none is drawn" in figure.caption


def test_min_width_plot_draws_each_recurrent_bound_as_its_series_state_width():
    """At p = 1 Thm 3 asks m >= N numbers: an LSTM's 2w floats need w = N / 2, linear attention's H (d^2 + d)
    with H = 4, d = w / 4 need w = 8, 8, 12 at N = 12, 24, 48; softmax attention has no recurrent bound."""
    (figure,) = min_width_vs_length(law_results(), SolvedRule(),
                                    bounds=lambda task, series, lengths: theory_bounds(task, series, lengths, 1))
    lines = {line.get_label().split(": Thm")[0]: line for line in figure.figure.axes[0].get_lines()}
    assert list(lines["bound: lstm, 1 layer"].get_ydata()) == [n / 2 for n in LENGTHS]
    assert list(lines["bound: linear_transformer, 1 layer"].get_ydata()) == [8, 8, 12]
    assert not any(name.startswith("bound: transformer") for name in lines)


def single_seed_results(first: dict[int, int], widths=(4, 8, 16)) -> list[RunResult]:
    """Seed 0 only: solves from the given width on at each length."""
    return [run("transformer", n, w, 0, 1.0 if w >= low else 0.1) for n, low in first.items() for w in widths]


def test_single_seed_runs_say_what_the_rule_needs_instead_of_no_runs(tmp_path):
    store = Store(tmp_path / "runs.db")
    for result in single_seed_results({10: 8, 20: 8, 40: 16}):
        store.put(result)
    strict = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(tmp_path / "strict")])
    assert strict.exit_code == 0, strict.output
    page = (tmp_path / "strict" / "index.html").read_text()
    assert "No stored runs" not in page and 'id="min_width_index_lookup"' not in page
    assert "index_lookup: no width is solved (accuracy &gt;= the cell&#x27;s own train.threshold in &gt;= 2 of 3 " \
           "seeds (0.99)): 9 undecided cells (needs 3 seeds, has 1)" in page
    loose = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(tmp_path / "loose"), "--k", "1",
                                "--m", "1"])
    assert loose.exit_code == 0 and "min_width_index_lookup" in loose.stdout
    (ax,) = json.loads((tmp_path / "loose" / "figures" / "min_width_index_lookup.json").read_text())
    (series,) = [s for s in ax["series"] if s["label"].startswith("transformer")]
    assert series["points"] == [[10, 8], [20, 8], [40, 16]] and "alpha = " in series["label"]
    assert_axes_hold_their_points(ax, "min_width")


def test_min_width_plot_of_censored_widths_has_ticks_and_no_fit():
    """Every length solves at the smallest width tried: each width is only an upper bound, so nothing is fitted."""
    (figure,) = min_width_vs_length(single_seed_results({10: 4, 20: 4, 40: 4}), SolvedRule(k=1, m=1))
    (ax,) = figure_data(figure.figure)
    labels = [s["label"] for s in ax["series"]]
    assert labels == ["transformer, 1 layer: at most this width; no fit (0 exact widths, needs 3)"]
    assert_axes_hold_their_points(ax, "min_width")
    assert ax["ylim"][0] < 4 < ax["ylim"][1] and 4.0 in ax["yticks"]
    assert ("no lower bound of Bhattamishra et al. 2024 rules out a width of transformer, 1 layer on index_lookup"
            in figure.caption)


def test_a_fit_needs_three_exact_widths():
    (figure,) = min_width_vs_length(law_results(), SolvedRule())
    labels = [line.get_label() for line in figure.figure.axes[0].get_lines()]
    assert "linear_transformer, 1 layer: no fit (2 exact widths, needs 3)" in labels
    assert "linear_transformer, 1 layer: none solved up to this width" in labels
    assert sum(not label.startswith(("_", "bound")) for label in labels) == 4


def test_failed_cells_are_drawn_and_tabled_as_failed_never_as_zero():
    results = law_results([12, 24], [4, 8, 16]) + [run("lstm", 48, w, s, None, "diverged", "non-finite loss at step 2")
                                                   for w in (4, 8, 16) for s in range(3)]
    cells = size_cells(results, SolvedRule())
    lstm48 = cells[(cells.model == "lstm") & (cells.length == 48)]
    assert lstm48.failed.all() and lstm48.accuracy.isna().all() and set(lstm48.failure) == {"diverged"}
    (figure,) = heatmaps(cells)
    ax = [a for a in figure.figure.axes if a.get_title() == "index_lookup / lstm"][0]
    hatched = [p for p in ax.patches if p.get_hatch() == "///"]
    assert len(hatched) == 3 and [t.get_text() for t in ax.texts].count("diverged") == 3
    assert ax.images[0].get_array().mask[0].all() and not ax.images[0].get_array().mask[1:].any()  # row 0: N = 48
    flops = flops_table(results, SolvedRule(0.9))
    assert flops.loc["index_lookup / lstm", 48] == "failed: 3 diverged (non-finite loss at step 2)"
    assert flops.loc["index_lookup / lstm", 12] != "not solved"
    rows = not_trained_table(results, SolvedRule())
    assert len(rows) == 3 and set(rows["counts as"]) == {"failed cell"} and set(rows.seeds) == {"0, 1, 2"}
    shorter = [run("lstm", n, 4, 0, None, "failed", "out of memory") for n in (100, 20, 10)]
    assert list(not_trained_table(results + shorter, SolvedRule()).length) == [10, 20, 48, 48, 48, 100]


def test_a_length_with_a_size_undecided_or_failed_is_undecided_in_the_flops_table_never_not_solved():
    one_seed = [run("lstm", 12, 8, 0, 0.25)]  # needs 3 seeds, has 1
    broken = [run("lstm", 12, 16, s, None, "diverged", "non-finite loss at step 2") for s in range(3)]
    flops = flops_table(one_seed + broken, SolvedRule(0.9))
    cell = flops.loc["index_lookup / lstm", 12]
    assert cell.startswith("undecided; 1 undecided cell (needs 3 seeds, has 1), 1 failed cell"), cell
    unsolved = [run("lstm", 12, 8, s, 0.25) for s in range(3)]
    cell = flops_table(unsolved + broken, SolvedRule(0.9)).loc["index_lookup / lstm", 12]
    assert cell.startswith("undecided; 1 unsolved cell, 1 failed cell"), cell  # the failed wider size might solve
    assert flops_table(unsolved, SolvedRule(0.9)).loc["index_lookup / lstm", 12] == "not solved"


def test_headline_names_both_rules_when_they_differ(report_dir):
    page = (report_dir / "index.html").read_text()
    headline = page.split('id="solved-rule">')[1].split("</p>")[0]
    assert "solved means accuracy &gt;= the cell&#x27;s own train.threshold in &gt;= 2 of 3 seeds (0.99)" in headline
    assert "minimum-FLOPs table alone uses accuracy &gt;= 0.9 in &gt;= 2 of 3 seeds" in headline
    assert "Solved here means accuracy &gt;= 0.9 in &gt;= 2 of 3 seeds" in page


def early_stopped_results(threshold: float) -> list[RunResult]:
    """Runs that stop early at ``threshold`` (as Yang et al.'s at 0.9): width 16 reaches 0.92, width 8 reaches 0.4."""
    results = []
    for w, accuracy in ((8, 0.4), (16, 0.92)):
        for seed in range(3):
            cfg = RunConfig.build(apply_overrides({}, {"task.name": "index_lookup", "model.name": "transformer",
                                                       "task.length": 10, "model.width": w, "seed": seed,
                                                       "train.steps": 40, "train.threshold": threshold,
                                                       "device": "cpu"}))
            results.append(RunResult(config=cfg, config_hash=cfg.config_hash(), steps=40,
                                     metrics={"accuracy": accuracy},
                                     status="solved" if accuracy >= threshold else "completed"))
    return results


def test_report_judges_each_cell_at_its_own_threshold_unless_one_is_given(tmp_path):
    """Runs stopped early at 0.9 are solved at 0.9 by default, as ``sepbench results`` counts them; --threshold
    overrides it for every cell."""
    store = Store(tmp_path / "runs.db")
    for result in early_stopped_results(0.9):
        store.put(result)
    own = select_lr(early_stopped_results(0.9), SolvedRule(None))
    assert list(own.verdict) == ["unsolved", "solved"]
    assert list(select_lr(early_stopped_results(0.9), SolvedRule(0.99)).verdict) == ["unsolved", "unsolved"]
    for flags, headline, drawn in (([], "the cell&#x27;s own train.threshold in &gt;= 2 of 3 seeds (0.9)", True),
                                   (["--threshold", "0.99"], "0.99 in &gt;= 2 of 3 seeds", False)):
        out = tmp_path / f"out{len(flags)}"
        done = runner.invoke(app, ["report", "--store", str(store.path), "--out", str(out), *flags])
        assert done.exit_code == 0, done.output
        page = (out / "index.html").read_text()
        assert f"solved means accuracy &gt;= {headline}" in page.split('id="solved-rule">')[1].split("</p>")[0]
        assert ('id="min_width_index_lookup"' in page) is drawn
        assert ("The minimum-FLOPs table uses the same rule." in page) is drawn  # its own rule: 0.9, 2 of 3
