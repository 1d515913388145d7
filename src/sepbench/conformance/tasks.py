"""The task contract: sampled batches are well formed and pass the task's own plain-Python checker, the checker
rejects a changed target, the same seed draws the same data, and streams sampled together draw what each would alone."""
from __future__ import annotations

import numpy as np
import torch

from sepbench.conformance import Check, first_line, run_check
from sepbench.tasks import Batch, Task


def all_pass(task: Task, batch: Batch) -> bool:
    """Whether every row of ``batch`` passes ``task.check``."""
    rows = zip(batch.inputs.tolist(), batch.targets.tolist(), batch.mask.tolist())
    return all(task.check(inputs, targets, mask) for inputs, targets, mask in rows)


def _well_formed(task: Task, batch: Batch, what: str) -> None:
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape, \
        f"{what}: inputs, targets and mask differ in shape"
    assert batch.inputs.shape[1] <= task.max_seq_len(), \
        f"{what}: {batch.inputs.shape[1]} tokens, above max_seq_len() = {task.max_seq_len()}"
    for name in ("inputs", "targets"):
        values = getattr(batch, name)
        low, high = int(values.min()), int(values.max())
        assert 0 <= low and high < task.vocab_size, f"{what}: {name} hold ids {low}..{high}, outside the " \
                                                    f"vocabulary of {task.vocab_size}"
    assert bool(batch.mask.any(dim=1).all()), f"{what}: a row has no scored position"


def samples_pass_checker(task: Task, samples: int = 10_000) -> Check:
    """``samples`` training and evaluation rows are well formed (evaluation rows at most ``max_seq_len()`` long:
    a model holds positions for that many) and every one passes ``task.check``."""
    def body() -> str:
        rng = np.random.default_rng(0)
        train = task.sample_train(samples, rng)
        _well_formed(task, train, "sample_train")
        assert all_pass(task, train), "a sample_train row fails the task's own checker"
        evaluation = task.sample_eval(samples, rng)
        _well_formed(task, evaluation, "sample_eval")
        assert evaluation.inputs.shape[1] <= task.max_seq_len(), \
            f"sample_eval rows are {evaluation.inputs.shape[1]} tokens, more than max_seq_len() = {task.max_seq_len()}"
        assert all_pass(task, evaluation), "a sample_eval row fails the task's own checker"
        return f"{samples:,} training and {samples:,} evaluation rows pass"

    return run_check("samples pass the checker", body)


def checker_rejects_changed_target(task: Task, samples: int = 200) -> Check:
    """Changing the first and the last scored target of every evaluation row makes ``task.check`` refuse the row
    (a CoT task checks the sequence its inputs hold and the last target)."""
    def body() -> str:
        batch = task.sample_eval(samples, np.random.default_rng(1))
        rows = torch.arange(len(batch))
        changed = torch.zeros_like(batch.mask)
        changed[rows, batch.mask.int().argmax(1)] = True
        changed[rows, batch.mask.shape[1] - 1 - batch.mask.flip(1).int().argmax(1)] = True
        other = torch.where(batch.targets == 0, 1, batch.targets - 1)
        targets = torch.where(changed, other, batch.targets)
        accepted = sum(task.check(batch.inputs[i], targets[i], batch.mask[i]) for i in range(len(batch)))
        assert not accepted, f"the checker accepts {accepted} of {samples} rows with a changed target"
        return f"all {samples} changed rows refused"

    return run_check("checker refuses a wrong target", body)


def same_seed_same_data(task: Task, samples: int = 300) -> Check:
    """Two generators of one seed draw the same batch, another seed another batch."""
    def body() -> str:
        a, b = (task.sample_train(samples, np.random.default_rng(5)) for _ in range(2))
        c = task.sample_train(samples, np.random.default_rng(6))
        same = all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("inputs", "targets", "mask"))
        assert same, "one seed drew two different batches"
        assert not torch.equal(a.inputs, c.inputs), "two seeds drew the same batch"
        return "deterministic per seed"

    return run_check("same seed, same data", body)


def streams_as_alone(task: Task, samples: int = 64, streams: int = 4) -> Check:
    """``sample_train_streams`` gives each generator the batches ``sample_train`` alone gives it (stacked runs)."""
    def body() -> str:
        together = [np.random.default_rng(seed) for seed in range(streams)]
        alone = [np.random.default_rng(seed) for seed in range(streams)]
        for step in range(2):
            batches = task.sample_train_streams(samples, together)
            assert len(batches) == streams, f"{len(batches)} batches for {streams} streams"
            for k, (batch, rng) in enumerate(zip(batches, alone)):
                own = task.sample_train(samples, rng)
                same = all(torch.equal(getattr(batch, f), getattr(own, f)) for f in ("inputs", "targets", "mask"))
                assert same, f"stream {k}'s batch {step + 1} differs from the one it draws alone"
        return f"{streams} streams, 2 batches each, as alone"

    return run_check("streams together, as alone", body)


def all_checks(name: str, length: int, samples: int = 2000) -> list[Check]:
    """Every check of the task ``name`` (a registered name or a plugin) at size ``length``; the others only once it
    builds."""
    from sepbench.tasks import build_task

    built: list[Task] = []

    def build() -> str:
        try:
            built.append(build_task(name, length))
        except ValueError as refused:
            raise AssertionError(f"ValueError: {first_line(refused)} (a task that needs other sizes is checked at "
                                 f"one of them: check-plugin --length)") from None
        return f"{type(built[0]).__name__}, vocabulary {built[0].vocab_size}, {built[0].max_seq_len()} tokens"

    first = run_check(f"builds at N={length}", build)
    if first.failed:
        return [first]
    task = built[0]
    return [first, samples_pass_checker(task, samples), checker_rejects_changed_target(task), same_seed_same_data(task),
            streams_as_alone(task)]
