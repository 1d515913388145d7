"""Where a stacked group's training step goes: drawing the members' batches, and the step with them drawn or not.

Run: ``PYTHONPATH=src python benchmarks/group_step.py [--device auto] [--members 15] [--width 256] [--steps 20]``
[--quick].
A stack of one-layer Transformers (``--width``) on Dyck at N = 200, batch 64, the members differing in seed and
learning rate as a sweep cell's do. It prints the milliseconds a group step spends drawing the members' batches
(one member after another, and all streams together), then the group step itself with fresh batches and with
each member's first batch reused (so without drawing), and on CUDA the same with TF32 matmuls allowed. A step's
time is that of ``--steps`` steps less 2 steps (which pays the set-up), min and median of ``--repeats``.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _throughput_common import timed  # noqa: E402
from sepbench import RunConfig  # noqa: E402
from sepbench.tasks import build_task  # noqa: E402
from sepbench.train.group import train_group  # noqa: E402
from sepbench.train.loop import Trainer  # noqa: E402

LENGTH, BATCH = 200, 64


def configs(members: int, steps: int, width: int, device: str) -> list[RunConfig]:
    return [RunConfig.build({
        "task": {"name": "dyck", "length": LENGTH},
        "model": {"name": "transformer", "width": width, "layers": 1, "mlp": True, "positions": "learned"},
        "train": {"steps": steps, "eval_every": 10**6, "eval_samples": 64, "early_stop": False, "batch_size": BATCH,
                  "lr": [1e-2, 5e-3, 5e-4, 5e-5, 1e-6][k % 5]},
        "seed": k, "device": device}) for k in range(members)]


def synced(call, device: str):
    def run() -> None:
        call()
        if device == "cuda":
            torch.cuda.synchronize()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--members", type=int, default=15)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 members of width 64, 6 steps (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.members, args.width, args.steps = 4, 64, 6
    if args.steps < 3:
        parser.error(f"--steps {args.steps}: a step's time is --steps steps less 2; allowed: 3 or more")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device; allowed here: auto, cpu")
    torch.set_num_threads(1)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    print(f"{device} ({torch.cuda.get_device_name() if device == 'cuda' else 'one thread'}), torch {torch.__version__}, "
          f"{args.members} members of TF-(1, {args.width}) on Dyck N = {LENGTH}, batch {BATCH}", flush=True)

    task = build_task("dyck", LENGTH)
    streams = [np.random.default_rng(k) for k in range(args.members)]
    for name, draw in [("one member after another", lambda: [task.sample_train(BATCH, rng) for rng in streams]),
                       ("all streams together", lambda: task.sample_train_streams(BATCH, streams))]:
        low, mid = timed(draw, max(3, args.repeats))
        print(f"drawing the batches, {name}: {1e3 * low:.1f} ms a group step (median {1e3 * mid:.1f})", flush=True)

    train_group(configs(2, 3, args.width, device))
    fresh, streams_ok = Trainer.next_batch, Trainer.fresh_data

    def group_seconds(steps: int) -> tuple[float, float]:
        return timed(synced(lambda: train_group(configs(args.members, steps, args.width, device)), device), args.repeats)

    for tf32 in ([False, True] if device == "cuda" else [False]):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        for drawn in (True, False):
            first: dict[Trainer, object] = {}
            if not drawn:
                Trainer.next_batch = lambda self: first[self] if self in first else first.setdefault(self, fresh(self))
                Trainer.fresh_data = lambda self: False  # every member through its own next_batch
            long, short = group_seconds(args.steps), group_seconds(2)
            Trainer.next_batch, Trainer.fresh_data = fresh, streams_ok
            per = [1e3 * (a - b) / (args.steps - 2) for a, b in zip(long, short)]
            print(f"group step, {'fresh batches' if drawn else 'first batches reused'}"
                  f"{', TF32 allowed' if tf32 else ''}: {per[0]:.0f} ms (median {per[1]:.0f})", flush=True)


if __name__ == "__main__":
    main()
