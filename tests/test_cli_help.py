"""Help shows every default, -h works like --help everywhere, --version prints the version."""
import re

import pytest
import typer
from typer.testing import CliRunner

import sepbench
from sepbench.cli import app

runner = CliRunner()
COMMANDS = sorted(typer.main.get_command(app).commands)


def help_text(*args: str) -> str:
    """The rendered help with the panel borders and line wrapping taken out."""
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", result.output))


@pytest.mark.parametrize("command, option, default", [
    ("run", "--store", "[default: ./sepbench.db]"),
    ("run", "--progress", "[default: when on a terminal]"),
    ("construct", "--code-width", "[default: the smallest accepted]"),
    ("sweep", "--address", "[default: a local instance]"),
    ("softmax-vs-linear", "--trials", "[default: the config's, 100]"),
    ("softmax-vs-linear", "--config-dir", "[default: the packaged configs/deng2023]"),
    ("table2", "--dims", "[default: the widths Table 2 implies for the three Transformers]"),
])
def test_hand_written_defaults_survive_the_help_rendering(command, option, default):
    text = help_text(command)
    assert option in text and default in text


def test_every_default_written_in_a_help_string_is_shown():
    for name, command in typer.main.get_command(app).commands.items():
        written = [m for p in command.params for m in re.findall(r"\[default: [^]]*\]", p.help or "")]
        text = help_text(name)
        assert [d for d in written if d not in text] == [], name


@pytest.mark.parametrize("args", [[], *([c] for c in COMMANDS)], ids=lambda a: a[0] if a else "app")
def test_dash_h_is_help(args):
    short, long = runner.invoke(app, [*args, "-h"]), runner.invoke(app, [*args, "--help"])
    assert short.exit_code == 0 and short.output == long.output and "Usage:" in short.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"sepbench {sepbench.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", sepbench.__version__)


@pytest.mark.parametrize("args, problem", [
    (["reproduce", "--scale", "huge"], "Invalid value for '--scale': 'huge' is not one of 'quick', 'cpu', 'paper'."),
    (["results", "--format", "xml"], "'xml' is not one of 'table', 'csv', 'json', 'parquet'"),
    (["run", "--bogus"], "No such option: --bogus"),
    (["nosuch"], "No such command 'nosuch'"),
])
def test_the_console_script_gives_a_bad_option_as_one_line(args, problem, monkeypatch, capsys):
    from sepbench.cli import main

    monkeypatch.setattr("sys.argv", ["sepbench", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    printed = capsys.readouterr()
    assert stop.value.code == 2 and printed.out == ""
    assert printed.err.count("\n") == 1 and printed.err.startswith("error: ") and problem in printed.err, printed.err
    assert "-h` lists what is allowed" in printed.err


def test_the_console_script_exits_as_its_command_does(monkeypatch, capsys):
    from sepbench.cli import main

    for args, code in ((["--version"], 0), (["bounds", "--task", "dyck", "--length", "0"], 2), ([], 2)):
        monkeypatch.setattr("sys.argv", ["sepbench", *args])
        with pytest.raises(SystemExit) as stop:
            main()
        assert stop.value.code == code, args
    printed = capsys.readouterr()
    assert printed.out.count("Usage: ") == 1
    assert printed.err == "error: --length expects an even task size >= 2, got 0\n"
