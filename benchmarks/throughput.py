"""Findings per CPU-hour: each ratio that decides where a sweep's time goes, measured side by side in one run.

Run: ``PYTHONPATH=src python benchmarks/throughput.py [--quick]``. Every line reads
``NAME ratio X target Y met|MISSED``; each measurement runs with one intra-op thread and reports the min and
median of its repeats. The measurements live in ``benchmarks/_throughput_*.py``, one topic each.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _throughput_common import Ratio  # noqa: E402

MEASUREMENTS: list[str] = ["_throughput_eval", "_throughput_sweep", "_throughput_models", "_throughput_steps",
                           "_throughput_group", "_throughput_halving", "_throughput_checkpoint"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke run)")
    parser.add_argument("--only", default="", help="comma-separated measurement modules to run (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chosen = [m for m in MEASUREMENTS if not args.only or m in args.only.split(",")]
    ratios: list[Ratio] = []
    for name in chosen:
        module = __import__(name)
        for ratio in module.measure(quick=args.quick):
            print(ratio.line(judged=not args.quick), flush=True)
            ratios.append(ratio)
    if args.quick:
        print(f"{len(ratios)} ratios measured at --quick's smoke sizes; the targets are judged at the full sizes only")
        return 0
    missed = [r.name for r in ratios if not r.met]
    print(f"{len(ratios) - len(missed)} met, {len(missed)} missed" + (f": {', '.join(missed)}" if missed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
