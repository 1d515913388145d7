"""The vectorised Dyck sampler and membership check against a plain stack walk over the same draws."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from sepbench.tasks import build_task
from sepbench.conformance import tasks as conformance
from sepbench.tasks.dyck import Dyck, is_dyck


def stack_walk(n: int, length: int, types: int, depth: int, rng: np.random.Generator) -> np.ndarray:
    """App. H.1's walk one string at a time, on the draws the sampler makes (per step: an open, an open-or-close)."""
    draws = [(rng.integers(0, types, size=n), rng.integers(0, types + 1, size=n)) for _ in range(length)]
    out = np.empty((n, length), dtype=np.int64)
    for row in range(n):
        stack: list[int] = []
        for t, (from_empty, from_nonempty) in enumerate(draws):
            choice = from_empty[row] if not stack else from_nonempty[row]
            if len(stack) == depth or len(stack) == length - t or (stack and choice == types):
                out[row, t] = stack.pop() + types
            else:
                stack.append(int(choice))
                out[row, t] = choice
    return out


@pytest.mark.parametrize("types, depth, length", [(2, 2, 200), (3, 4, 30), (1, 1, 12), (4, 6, 64)])
def test_positives_are_the_stack_walk_of_the_same_draws(types, depth, length):
    task = build_task("dyck", length, {"types": types, "depth": depth})
    sampled = task.positives(300, length, np.random.default_rng(7))
    assert np.array_equal(sampled, stack_walk(300, length, types, depth, np.random.default_rng(7)))
    assert all(is_dyck(list(s), types, depth) for s in sampled)


@pytest.mark.parametrize("types, depth, length", [(2, 2, 40), (3, 4, 30), (1, 1, 12), (2, 3, 16)])
def test_membership_is_the_stack_check(types, depth, length):
    task = build_task("dyck", length, {"types": types, "depth": depth})
    rng = np.random.default_rng(3)
    positives = task.positives(2000, length, rng)
    strings = np.concatenate([
        positives,
        task._corrupt_once(positives, rng),
        rng.integers(0, 2 * types, size=(4000, length)),  # mostly unbalanced or too deep
        np.where(rng.random((500, length)) < 0.02, task.true_id, positives[:500]),  # label tokens inside
    ])
    expected = np.array([is_dyck(list(s), types, depth) for s in strings])
    assert np.array_equal(task.member(strings), expected)
    assert expected[:2000].all() and not expected[2000:].all()
    assert task.member(np.zeros((3, 0), dtype=np.int64)).all() and is_dyck([], types, depth)


def test_streams_that_differ_from_alone_fail_the_check():
    class Shuffled(Dyck):
        def sample_train_streams(self, n, rngs):
            return super().sample_train_streams(n, rngs)[::-1]

    outcome = conformance.streams_as_alone(Shuffled(20))
    assert outcome.failed and "differs from the one it draws alone" in outcome.detail


@pytest.mark.parametrize("options, digest", [({}, "0aeee0b03925cfc1"), ({"types": 3, "depth": 4}, "134483744801bbbc"),
                                             ({"types": 1, "depth": 8}, "3eb3074f2a86643d")])
def test_a_seed_draws_the_batches_it_always_drew(options, digest):
    """Three batches of seed 0 at N = 20 (30 for k = 3), hashed when the sampler still walked a stack step by step:
    runs resumed from checkpoints, and stored runs, go on seeing the same data."""
    task = build_task("dyck", 30 if options.get("types") == 3 else 20, options)
    rng, h = np.random.default_rng(0), hashlib.sha256()
    for _ in range(3):
        batch = task.sample_train(64, rng)
        h.update(batch.inputs.numpy().astype(np.int64).tobytes())
        h.update(batch.targets.numpy().astype(np.int64).tobytes())
    assert h.hexdigest()[:16] == digest
