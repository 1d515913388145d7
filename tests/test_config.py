import pytest
import torch

from sepbench.cli.options import base_config
from sepbench.config import ConfigError, RunConfig, apply_overrides, load_yaml, parse_assignments
from sepbench.train.environment import resolve_device


def test_defaults_are_resolved_so_equal_runs_hash_equal():
    implicit = RunConfig.build({})
    explicit = RunConfig.build({"model": {"positions": "learned", "mlp": True}, "train": {"lr": implicit.train.lr},
                                "task": {"options": {"alphabet_size": 64}}})
    assert implicit.config_hash() == explicit.config_hash()
    assert implicit.config_hash() == RunConfig.build({"device": "cpu"}).config_hash()
    assert implicit.config_hash() != RunConfig.build({"seed": 1}).config_hash()


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"bogus": 1}, "unknown field 'bogus'"),
        ({"train": {"bogus": 1}}, "unknown field 'train.bogus'"),
        ({"model": {"width": 0}}, "model.width"),
        ({"model": {"name": "nope"}}, "unknown model 'nope'; allowed: transformer"),
        ({"task": {"name": "nope"}}, "unknown task 'nope'; allowed:"),
        ({"model": {"width": 30, "heads": 4}}, "not divisible"),
        ({"task": {"options": {"alphabet": 3}}}, "allowed: alphabet_size"),
        ({"task": {"options": {"alphabet_size": 1}}}, "alphabet_size"),
        ({"train": {"schedule": "exp"}}, "train.schedule"),
        ({"device": "tpu"}, "device"),
        ({"train": {"batch_size": 2**64}},
         "train.batch_size = 18446744073709551616: Input should be less than or equal to 1000000000"),
        ({"train": {"steps": 10**9 + 1}}, "train.steps"),
        ({"train": {"eval_samples": 2**70}}, "train.eval_samples"),
        ({"model": {"name": "dss", "options": {"dt_min": 0.5, "dt_max": 0.1}}}, "give dt_min <= dt_max"),
        ({"train": {"lr": 1e300}}, "train.lr = 1e+300: should be at most 3.403e+38, the largest float32"),
        ({"train": {"weight_decay": 1e39}}, "train.weight_decay"),
        ({"train": {"betas": [2.0, 0.5]}}, "train.betas.0 = 2.0: Input should be less than 1"),
        ({"train": {"betas": [0.9, -0.1]}}, "train.betas.1"),
    ],
)
def test_bad_configs_give_one_line(data, fragment):
    with pytest.raises(ConfigError) as info:
        RunConfig.build(data)
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_overrides_qualify_bare_leaf_names():
    data = apply_overrides({}, parse_assignments(["warmup_steps=7", "model.width=32", "seed=3", "task.options.alphabet_size=8"]))
    cfg = RunConfig.build(data)
    assert (cfg.train.warmup_steps, cfg.model.width, cfg.seed, cfg.task.options["alphabet_size"]) == (7, 32, 3, 8)


@pytest.mark.parametrize("item, fragment", [("no_such_field=1", "unknown key"), ("name=x", "ambiguous"),
                                             ("train.nope=1", "allowed in train"), ("novalue", "key=value")])
def test_bad_assignments(item, fragment):
    with pytest.raises(ConfigError, match=fragment):
        apply_overrides({}, parse_assignments([item]))


def test_yaml_loading(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("task: {name: index_lookup, length: 30}\nmodel: {name: lstm, width: 16}\nseed: 4\n")
    cfg = RunConfig.from_yaml(good)
    assert (cfg.task.length, cfg.model.name, cfg.seed) == (30, "lstm", 4)
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: {name: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set\n")
    assert load_yaml(empty) == {}  # a sweep's base file may set nothing
    with pytest.raises(ConfigError, match="is empty; allowed: a YAML mapping"):
        base_config(empty, {}, [])


def test_a_key_given_twice_in_one_mapping_is_refused_with_its_line(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("task: {name: index_lookup}\ntrain:\n  lr: 0.001\n  steps: 10\n  lr: 0.01\n")
    with pytest.raises(ConfigError, match=r"at line 5: key 'lr' repeats the key at line 3; give each key once$"):
        load_yaml(twice)
    sections = tmp_path / "sections.yaml"
    sections.write_text("model: {width: 32}\nseed: 1\nmodel: {width: 64}\n")
    with pytest.raises(ConfigError, match="line 3: key 'model' repeats the key at line 1"):
        RunConfig.from_yaml(sections)
    inside_a_merge = tmp_path / "inside_a_merge.yaml"
    inside_a_merge.write_text("train: {<<: {lr: 1, lr: 2}, steps: 3}\n")
    with pytest.raises(ConfigError, match="key 'lr' repeats"):
        load_yaml(inside_a_merge)
    equal = tmp_path / "equal.yaml"
    equal.write_text("1: a\nseed: 2\ntrue: c\n")
    with pytest.raises(ConfigError, match=r"line 3: key True repeats the key at line 1; give each key once$"):
        load_yaml(equal)
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text('"x\\ny": 1\n"x\\ny": 2\n')
    with pytest.raises(ConfigError) as info:
        load_yaml(quoted)
    assert "\n" not in str(info.value)  # the key's newline is escaped, so the error stays one line
    assert str(info.value).endswith("line 2: key 'x\\ny' repeats the key at line 1; give each key once")


def test_a_merged_key_may_be_overridden_and_equal_keys_in_sibling_mappings_are_kept(tmp_path):
    merged = tmp_path / "merged.yaml"
    merged.write_text("shared: &s {lr: 0.1, steps: 10}\ntrain:\n  <<: *s\n  lr: 0.01\nother: {lr: 0.5}\n")
    assert load_yaml(merged) == {"shared": {"lr": 0.1, "steps": 10}, "train": {"lr": 0.01, "steps": 10},
                                 "other": {"lr": 0.5}}
    # a mapping merged from a shallower level than its own: PyYAML flattens it before constructing it
    nested = tmp_path / "nested.yaml"
    nested.write_text("x:\n  y: &b\n    <<: {p: 1}\n    p: 2\nz:\n  <<: *b\n")
    assert load_yaml(nested) == {"x": {"y": {"p": 2}}, "z": {"p": 2}}


def test_a_cuda_ordinal_past_the_machines_devices_is_refused_in_one_line(monkeypatch):
    """On a one-GPU machine ``cuda:7`` is a user's error, not a CUDA crash; CI has no GPU, so one is pretended."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    assert resolve_device("cuda") == torch.device("cuda")
    with pytest.raises(ValueError) as info:
        resolve_device("cuda:7")
    message = str(info.value)
    assert "cuda:7" in message and "1 CUDA device" in message and "cuda:0 to cuda:0" in message
    assert "\n" not in message
