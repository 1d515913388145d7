"""Checkpoints: the seconds a run spends keeping them (the per-step check and every save) over its training seconds."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _throughput_common import Ratio
from sepbench import RunConfig
from sepbench.train import checkpoint
from sepbench.train.keeping import Keeping
from sepbench.train.loop import Trainer


def _config(steps: int, every: float) -> RunConfig:
    """A width-64 one-layer Transformer on Index Lookup N=20, batch 64, evaluated every 500 steps."""
    return RunConfig.build({
        "task": {"name": "index_lookup", "length": 20},
        "model": {"name": "transformer", "width": 64, "layers": 1},
        "train": {"steps": steps, "eval_every": 500, "eval_samples": 1000, "early_stop": False,
                  "checkpoint_every": every},
        "device": "cpu",
    })


def measure(quick: bool) -> list[Ratio]:
    steps, every = (300, 1.0) if quick else (2000, 10.0)
    spent = {"seconds": 0.0, "saves": 0, "bytes": 0}
    keep = checkpoint.keep_trainer

    def timed_keep(trainer: Trainer, file: checkpoint.Checkpoint, seconds: float) -> None:
        start, before = time.perf_counter(), file.saved_step
        keep(trainer, file, seconds)
        spent["seconds"] += time.perf_counter() - start
        if file.saved_step != before:
            spent["saves"] += 1
            spent["bytes"] = file.path.stat().st_size

    checkpoint.keep_trainer = timed_keep
    try:
        with tempfile.TemporaryDirectory() as folder:
            result = Trainer(_config(steps, every), Keeping(Path(folder))).run(progress=False)
    finally:
        checkpoint.keep_trainer = keep
    ratio = spent["seconds"] / result.wall_seconds
    detail = (f"{spent['saves']} saves of {spent['bytes'] / 1e6:.2f} MB and {steps} checks in {spent['seconds'] * 1e3:.1f} ms "
              f"of a {result.wall_seconds:.1f} s run of {steps} steps, a checkpoint every {every:g} s; width 64, CPU, "
              "1 thread")
    return [Ratio("checkpoint_cost", ratio, 0.01, "at_most", detail)]
