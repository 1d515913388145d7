"""CPU training flushes subnormal floats while it trains and hands the caller's mode back."""
import pytest
import torch

from sepbench import RunConfig
from sepbench.train import Trainer, subnormals

needs_flush = pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU cannot flush subnormals")


@needs_flush
def test_the_flush_is_on_inside_and_the_callers_mode_after():
    assert not subnormals.flushing()
    with subnormals.flushed(torch.device("cpu")):
        assert subnormals.flushing()
    assert not subnormals.flushing()
    torch.set_flush_denormal(True)
    try:
        with subnormals.flushed(torch.device("cpu")):
            assert subnormals.flushing()
        assert subnormals.flushing()  # it was on before: it stays on
    finally:
        torch.set_flush_denormal(False)


@needs_flush
def test_a_cpu_run_trains_flushed_and_leaves_the_mode_as_it_found_it():
    run = Trainer(RunConfig.build({"task": {"name": "index_lookup", "length": 12},
                                   "model": {"name": "lstm", "width": 16, "layers": 1},
                                   "train": {"steps": 4, "eval_every": 2, "eval_samples": 16, "batch_size": 8},
                                   "device": "cpu"}))
    seen = []
    run.train_until(4, on_eval=lambda point: seen.append(subnormals.flushing()))
    assert seen == [True, True] and not subnormals.flushing()
