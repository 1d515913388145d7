"""Run quick separation specs one run at a time through ``sepbench.train`` (until ``sepbench sweep`` exists).

    PYTHONPATH=src python scripts/run_quick_separation.py [SPEC.yaml ...] [--store PATH]

With no specs it runs the four comparisons of configs/bhattamishra2024/quick/ (Index Lookup: TF-(1, 64)
against LSTM-256; Dyck-(2,2): LSTM-64 against a 1-layer Transformer) and prints one line per run.
A spec is ``base`` (a RunConfig), ``grid`` (dotted keys -> lists, crossed) and ``seeds``.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from sepbench.config import RunConfig, apply_overrides, load_yaml
from sepbench.store import Store
from sepbench.train import train

QUICK = Path(__file__).resolve().parent.parent / "configs" / "bhattamishra2024" / "quick"
DEFAULT_SPECS = ["index_lookup_transformer", "index_lookup_lstm", "dyck_lstm", "dyck_transformer"]


def expand(spec_path: Path) -> list[RunConfig]:
    """Every RunConfig of a spec: the cross product of its grid axes, once per seed."""
    spec = load_yaml(spec_path)
    unknown = set(spec) - {"base", "grid", "seeds"}
    if unknown:
        raise SystemExit(f"{spec_path}: unknown sections {sorted(unknown)}; allowed: base, grid, seeds")
    grid = spec.get("grid") or {}
    configs = []
    for values in itertools.product(*grid.values()):
        for seed in spec.get("seeds") or [0]:
            data = apply_overrides(spec.get("base") or {}, {**dict(zip(grid, values)), "seed": seed})
            configs.append(RunConfig.build(data))
    return configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", type=Path)
    parser.add_argument("--store", type=Path, default=Path("runs/quick_separation.db"))
    args = parser.parse_args(argv)
    specs = args.specs or [QUICK / f"{name}.yaml" for name in DEFAULT_SPECS]
    store = Store(args.store)
    for spec in specs:
        for cfg in expand(spec):
            key = cfg.config_hash()
            result = store.get(key)
            if result is None:
                result = train(cfg, progress=False)
                store.put(result)
            m = cfg.model
            print(f"{cfg.task.name:14s} N={cfg.task.length:<5d} {m.name}-({m.layers}, {m.width}) seed={cfg.seed} "
                  f"accuracy={result.accuracy:.4f} status={result.status} steps={result.steps} "
                  f"wall={result.wall_seconds:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
