"""Run every benchmark script in this folder, one after another, passing the arguments on (e.g. ``--quick``).

Run: ``python benchmarks/run_all.py [--quick]`` (``make bench`` and ``make bench-full`` do this in the project's venv).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    scripts = sorted(p for p in here.glob("*.py") if p.name != Path(__file__).name and not p.name.startswith("_"))
    failed = []
    for script in scripts:
        print(f"\n=== {script.name} {' '.join(sys.argv[1:])}".rstrip(), flush=True)
        if subprocess.run([sys.executable, str(script), *sys.argv[1:]]).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
