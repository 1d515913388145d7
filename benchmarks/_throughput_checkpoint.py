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
    """The per-step checks as timed in the run, plus one save's cost (timed in the run, or after it when the run
    was over before its first save was due) once per ``every`` seconds of the run."""
    steps, every = (300, 1.0) if quick else (2000, 10.0)
    spent = {"checks": 0.0, "saves": [], "bytes": 0}
    keep = checkpoint.keep_trainer

    def timed_keep(trainer: Trainer, file: checkpoint.Checkpoint, seconds: float) -> None:
        start, before = time.perf_counter(), file.saved_step
        keep(trainer, file, seconds)
        took = time.perf_counter() - start
        if file.saved_step != before:
            spent["saves"].append(took)
            spent["bytes"] = file.path.stat().st_size
        else:
            spent["checks"] += took

    config = _config(steps, every)
    checkpoint.keep_trainer = timed_keep
    try:
        with tempfile.TemporaryDirectory() as folder:
            trainer = Trainer(config, Keeping(Path(folder)))
            result = trainer.run(progress=False)
            saved_in_run = len(spent["saves"])
            file = checkpoint.Checkpoint(folder, config, checkpoint.SOLO)
            while len(spent["saves"]) < 3:
                start = time.perf_counter()
                file.save(checkpoint.trainer_state(trainer), result.steps, result.wall_seconds)
                spent["saves"].append(time.perf_counter() - start)
                spent["bytes"] = file.path.stat().st_size
    finally:
        checkpoint.keep_trainer = keep
    save = min(spent["saves"])
    ratio = (spent["checks"] + save * result.wall_seconds / every) / result.wall_seconds
    detail = (f"{steps} checks in {spent['checks'] * 1e3:.1f} ms and a save of {spent['bytes'] / 1e6:.2f} MB in "
              f"{save * 1e3:.1f} ms (min of {len(spent['saves'])}, {saved_in_run} in the run) every {every:g} s of a "
              f"{result.wall_seconds:.1f} s run of {steps} steps; width 64, CPU, 1 thread")
    return [Ratio("checkpoint_cost", ratio, 0.01, "at_most", detail)]
