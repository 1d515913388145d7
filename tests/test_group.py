"""Stacked runs: every member of a group trains as it would alone (to float round-off), each stored as its own run."""
import pytest
import torch

from sepbench import RunConfig, Store, train
from sepbench.sweep import run_sweep
from sepbench.sweep.grouped import make_groups
from sepbench.train.group import StackedAdam, check_group, clip_per_member, group_key, train_group

LOSS_RTOL = 1e-5  # relative, every evaluated loss of the curve; measured worst 2.4e-6 (retnet), ~1.4e-7 elsewhere
EVAL_SAMPLES = 100


def config(name: str, seed: int, lr: float, device: str = "cpu", task: dict | None = None,
           **train_overrides) -> RunConfig:
    model = {"name": name, "width": 16} | ({} if name == "lstm" else {"heads": 2})
    return RunConfig.build({
        "task": task or {"name": "index_lookup", "length": 12},
        "model": model,
        "train": {"steps": 50, "eval_every": 10, "eval_samples": EVAL_SAMPLES, "batch_size": 16, "warmup_steps": 5,
                  "lr": lr, **train_overrides},
        "seed": seed, "device": device,
    })


def assert_same_run(grouped, solo) -> None:
    assert grouped.config_hash == solo.config_hash == solo.config.config_hash()
    assert (grouped.status, grouped.steps, grouped.steps_to_threshold, grouped.error) == \
        (solo.status, solo.steps, solo.steps_to_threshold, solo.error)
    assert [p.step for p in grouped.curve] == [p.step for p in solo.curve]
    for g, s in zip(grouped.curve, solo.curve):
        assert g.loss == pytest.approx(s.loss, rel=LOSS_RTOL)
        assert abs(g.accuracy - s.accuracy) <= 1 / EVAL_SAMPLES  # at most one example on a decision boundary
    assert grouped.metrics.keys() == solo.metrics.keys()
    assert grouped.metrics["loss"] == pytest.approx(solo.metrics["loss"], rel=LOSS_RTOL, nan_ok=True)
    assert (grouped.parameters, grouped.state_floats) == (solo.parameters, solo.state_floats)


@pytest.mark.parametrize("name", ["transformer", "linear_transformer", "retnet", "lstm", "dss", "mamba",
                                  "sparse_transformer"])
def test_each_member_matches_its_solo_run(name):
    configs = [config(name, 0, 1e-3), config(name, 1, 3e-3), config(name, 2, 1e-2)]
    grouped = train_group(configs)
    for g, cfg in zip(grouped, configs):
        assert_same_run(g, train(cfg, progress=False))
    assert len({g.curve[-1].loss for g in grouped}) == 3  # the members really are different runs
    assert all(g.cpu_seconds is None for g in grouped)  # members share one process: not split among them


def test_members_of_a_task_that_draws_streams_together_match_their_solo_runs():
    """Dyck draws the members' batches in one walk (``sample_train_streams``); each member still trains as alone."""
    configs = [config("transformer", seed, lr, task={"name": "dyck", "length": 20}, steps=30)
               for seed, lr in ((0, 1e-3), (1, 3e-3), (2, 1e-2))]
    for g, cfg in zip(train_group(configs), configs):
        assert_same_run(g, train(cfg, progress=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["transformer", "sparse_transformer"])
def test_each_member_matches_its_solo_run_on_cuda(name):
    """The attention mixers train stacked on CUDA's fused kernels (members folded into the batch) as alone."""
    configs = [config(name, seed, lr, device="cuda") for seed, lr in ((0, 1e-3), (1, 3e-3), (2, 1e-2))]
    for g, cfg in zip(train_group(configs), configs):
        assert_same_run(g, train(cfg, progress=False))


def test_a_diverging_member_leaves_the_others_as_alone():
    common = {"grad_clip": None, "warmup_steps": 0, "steps": 30}
    configs = [config("transformer", 0, 1e-3, **common), config("transformer", 1, 1e12, **common),
               config("transformer", 2, 3e-3, **common)]
    grouped = train_group(configs)
    solo = [train(c, progress=False) for c in configs]
    assert solo[1].status == "diverged" and solo[0].status != "diverged" and solo[2].status != "diverged"
    for g, s in zip(grouped, solo):
        assert_same_run(g, s)


def test_a_member_that_reaches_the_threshold_stops_while_the_others_go_on():
    common = {"threshold": 0.035, "warmup_steps": 0}
    configs = [config("transformer", 0, 3e-2, **common), config("transformer", 1, 1e-4, **common)]
    solo = [train(c, progress=False) for c in configs]
    assert solo[0].status == "solved" and solo[0].steps < 50 and solo[1].steps == 50  # the setting does what it says
    reported = []
    grouped = train_group(configs, on_result=reported.append)
    for g, s in zip(grouped, solo):
        assert_same_run(g, s)
    assert [r.config_hash for r in reported] == [configs[0].config_hash(), configs[1].config_hash()]


def test_group_refuses_runs_that_differ_in_more_than_seed_and_lr():
    a = config("transformer", 0, 1e-3)
    with pytest.raises(ValueError, match="differ only in seed and train.lr"):
        check_group([a, config("lstm", 1, 1e-3)])
    assert group_key(a) == group_key(config("transformer", 5, 0.1)) != group_key(config("transformer", 0, 1e-3, steps=7))


@pytest.mark.parametrize("optimizer,weight_decay", [("adam", 0.0), ("adam", 0.1), ("adamw", 0.1)])
def test_stacked_adam_is_torch_adam_per_member(optimizer, weight_decay):
    torch.manual_seed(0)
    lrs = [1e-3, 3e-2, 0.5]
    stacked = torch.randn(3, 5, 4, requires_grad=True)
    alone = [stacked[k].detach().clone().requires_grad_(True) for k in range(3)]
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    torch_opts = [cls([p], lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay) for p, lr in zip(alone, lrs)]
    ours = StackedAdam((0.9, 0.99), weight_decay, decoupled=optimizer == "adamw")
    for _ in range(5):
        grad = torch.randn(3, 5, 4)
        stacked.grad = grad.clone()
        ours.step([stacked], torch.tensor(lrs, dtype=torch.float64))
        for k, (p, opt) in enumerate(zip(alone, torch_opts)):
            p.grad = grad[k].clone()
            opt.step()
    for k in range(3):
        torch.testing.assert_close(stacked[k], alone[k], rtol=1e-6, atol=1e-7)


def test_clipping_is_per_member():
    torch.manual_seed(0)
    grads = [torch.randn(3, 4, 5) * torch.tensor([0.01, 1.0, 100.0]).view(3, 1, 1), torch.randn(3, 7)]
    expected = []
    for k in range(3):
        params = [torch.zeros_like(g[k], requires_grad=True) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g[k].clone()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        expected.append([p.grad for p in params])
    clip_per_member(grads, 1.0)
    for k in range(3):
        for g, e in zip(grads, expected[k]):
            torch.testing.assert_close(g[k], e)


def test_sweep_groups_one_cells_runs_and_stores_each_under_its_solo_hash(tmp_path):
    configs = [config("transformer", seed, lr, steps=20) for seed in (0, 1) for lr in (1e-3, 3e-3)]
    other = config("lstm", 0, 1e-3, steps=20)
    assert [len(g) for g in make_groups(configs + [other], 3)] == [3, 1, 1]
    store = Store(tmp_path / "runs.db")
    outcome = run_sweep(configs + [other], store, group_size=4)
    assert len(outcome.results) == 5 and not outcome.failed
    for cfg in configs + [other]:
        stored = store.get(cfg.config_hash())
        assert stored is not None and stored.config == cfg
        assert_same_run(stored, train(cfg, progress=False))
    assert run_sweep(configs + [other], store, group_size=4).skipped == 5


def test_cli_sweep_takes_a_group_size(tmp_path):
    from typer.testing import CliRunner

    from sepbench.cli import app

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: g\nbase: {task: {name: index_lookup, length: 12}, model: {width: 8, heads: 2},"
                    " train: {steps: 6, eval_every: 3, eval_samples: 20, batch_size: 8}, device: cpu}\n"
                    "seeds: [0, 1, 2]\nlr_grid: [1e-3, 3e-3]\n")
    store = tmp_path / "runs.db"
    runner = CliRunner()
    done = runner.invoke(app, ["sweep", str(spec), "--group-size", "4", "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert "6 to train (local, 1 worker, groups of up to 4)" in done.output and "6 trained" in done.output
    assert len(Store(store)) == 6
    refused = runner.invoke(app, ["sweep", str(spec), "--group-size", "0", "--store", str(store)])
    assert refused.exit_code == 2


@pytest.mark.parametrize("dropout", [0.0, 0.1], ids=["stacked", "alone"])
def test_members_keep_their_checkpoints_for_a_caller_that_stores_the_results_later(tmp_path, dropout):
    """A Ray group task returns its results when the whole group ends and the driver stores them: the members'
    checkpoints must outlive the task (``discard=False``) until the driver has stored each one."""
    from sepbench.train.keeping import Keeping, checkpoint_file

    configs = [config("transformer", seed, 1e-3, checkpoint_every=1e-9) for seed in (0, 1)]
    configs = [c.model_copy(update={"model": c.model.model_copy(update={"dropout": dropout})}) for c in configs]
    keeping = Keeping(tmp_path)
    results = train_group(configs, keeping=keeping, discard=False)
    assert all(checkpoint_file(tmp_path, c.config_hash()).exists() for c in configs)
    for result in results:
        keeping.stored(result)
    assert not list(tmp_path.glob("*.pt"))
    train_group(configs, keeping=Keeping(tmp_path / "local"))
    assert not list((tmp_path / "local").glob("*.pt"))
