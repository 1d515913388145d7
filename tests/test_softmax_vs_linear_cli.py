"""The softmax-vs-linear figures, store table and learned counterpart through the command line."""
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.store import Store
from sepbench.theory.softmax_vs_linear import figures
from sepbench.theory.softmax_vs_linear.learned import LearnedConfig, run_learned

runner = CliRunner()
PAPER_PANELS = ["fig3a", "fig3b"] + [f"fig{f}{p}" for f in (4, 5) for p in "abcdef"] + [f"fig7{p}" for p in "abcde"]


def test_every_paper_panel_has_a_valid_config_in_the_paper_layout():
    assert figures.figure_ids() == sorted(PAPER_PANELS)
    models = {panel: figures.load_figure(panel).model for panel in PAPER_PANELS}
    assert {models[p] for p in ("fig3a", "fig3b")} == {"toy"}
    assert {models[p] for p in PAPER_PANELS if p[3] in "45"} == {"self"}
    assert {models[p] for p in PAPER_PANELS if p.startswith("fig7")} == {"cross"}
    variants = {figures.load_figure(p).setting(figures.load_figure(p).grid()[0]).data.variant for p in PAPER_PANELS
                if p[3] == "5"}
    assert variants == {"E"}


def test_figure_writes_csv_png_and_store_rows_and_reruns_identically(tmp_path, store_path):
    out = tmp_path / "out"
    args = ["softmax-vs-linear", "fig3b", "--out", str(out), "--trials", "40", "--device", "cpu"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    csv_lines = (out / "fig3b.csv").read_text().splitlines()
    assert csv_lines[0] == f"# {figures.RECONSTRUCTED}"
    frame = pd.read_csv(out / "fig3b.csv", comment="#")
    assert frame["value"].tolist() == list(range(1, 17)) and set(frame["trials"]) == {40}
    assert frame["successes"].iloc[-1] >= 38 and frame["successes"].iloc[0] <= 30
    assert (out / "fig3b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = Store(store_path).query_softmax_vs_linear(figure="fig3b")
    assert stored["successes"].tolist() == frame["successes"].tolist()
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    restored = Store(store_path).query_softmax_vs_linear(figure="fig3b")
    assert len(restored) == 16 and restored["successes"].tolist() == frame["successes"].tolist()


def test_the_caveat_is_drawn_in_every_figure():
    config = figures.load_figure("fig7c")
    frame = figures.run_figure(config, trials=5)
    texts = [text.get_text() for text in figures.draw_figure(frame, config).texts]
    assert any(figures.RECONSTRUCTED in text for text in texts)
    assert "reconstructed definitions" in figures.RECONSTRUCTED and "chosen by us" in figures.RECONSTRUCTED


def write_config(folder, **changes):
    folder.mkdir(exist_ok=True)
    config = dict(figure="mine", title="t", model="cross", parameter="n", values=[64, 128], fixed={"d": 32}, trials=5)
    (folder / "mine.yaml").write_text(yaml.safe_dump({**config, **changes}))
    return folder


def write_text(folder, text):
    folder.mkdir(exist_ok=True)
    (folder / "mine.yaml").write_text(text)
    return folder


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["fig9z"], "unknown figure 'fig9z'; allowed: fig3a, fig3b, fig4a"),
        (["mine", "--config-dir", "{bad_field}"], "mine.yaml: unknown field 'colour'"),
        (["mine", "--config-dir", "{not_yaml}"], "mine.yaml is not valid YAML at line 2"),
        (["mine", "--config-dir", "{a_list}"], "mine.yaml must hold a mapping of a figure's fields (figure, title"),
        (["mine", "--config-dir", "{empty}"], "mine.yaml: figure: Field required"),
        (["mine", "--config-dir", "{bad_value}"], "k (64) must be at most d (32)"),
        (["mine", "--config-dir", "{two_grids}"], "give exactly one of 'values' and 'range'"),
        (["fig3a", "--device", "cuda:7"], "--device"),
        (["learned", "--lengths", "8,x"], "--lengths expects comma-separated integers"),
        (["learned", "--lengths", "2"], "--lengths expects task sizes from 3 to 1000000, got '2'"),
        (["fig3a", "--device", "banana"], "--device 'banana' is not a device; allowed: auto, cpu, cuda, cuda:N or mps"),
        (["fig3a", "--config-dir", "{tmp}/missing"], "--config-dir {tmp}/missing is not a folder"),
        (["fig3a", "--lengths", "8", "--steps", "5"], "--lengths, --steps apply to the learned comparison only"),
        (["learned", "--trials", "3"], "--trials applies to the figures only, not to the learned comparison"),
        (["learned", "--config-dir", "{tmp}/missing"], "--config-dir applies to the figures only"),
        (["learned", "--store", "{tmp}/mine.db"], "--store applies to the figures only"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, store_path, args, fragment):
    folders = {"{bad_field}": write_config(tmp_path / "a", colour="red"),
               "{bad_value}": write_config(tmp_path / "b", model="self", fixed={"d": 32, "k": 64}),
               "{two_grids}": write_config(tmp_path / "c", range=[1, 2, 1]),
               "{not_yaml}": write_text(tmp_path / "d", "figure: [\n"), "{a_list}": write_text(tmp_path / "e", "- 1\n"),
               "{empty}": write_text(tmp_path / "f", "")}
    args = [str(folders.get(a, a)).format(tmp=tmp_path) for a in args]
    result = runner.invoke(app, ["softmax-vs-linear", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert fragment.format(tmp=tmp_path) in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not store_path.exists()


def test_learned_softmax_and_linear_classifiers_train_on_fresh_samples():
    config = LearnedConfig(lengths=[8], d=16, k=4, steps=150, test_samples=400)
    frame = run_learned(config)
    accuracy = dict(zip(frame["kind"], frame["test_accuracy"]))
    assert set(accuracy) == {"exp", "lin"}
    assert accuracy["lin"] >= 0.9
    assert run_learned(config)["test_accuracy"].tolist() == frame["test_accuracy"].tolist()


def test_learned_command_writes_its_table_and_csv(tmp_path):
    result = runner.invoke(app, ["softmax-vs-linear", "learned", "--lengths", "4,6", "--steps", "3", "--device", "cpu",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(tmp_path / "learned.csv", comment="#")
    assert sorted(zip(frame["n"], frame["kind"])) == [(4, "exp"), (4, "lin"), (6, "exp"), (6, "lin")]
    assert "softmax test acc" in result.stdout and "linear test acc" in result.stdout
