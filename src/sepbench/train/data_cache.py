"""An on-disk cache of fixed CoT data sets (``train.data: fixed``), shared by every run that draws the same one.

``split_rows`` is decided by the task (name, length, options), the two set sizes and the state of the random
generator it draws from (the run's seed and data stream), given the generating code and numpy. Those, with
``DATA_VERSION``, name a folder ``<cache>/<key>/`` holding the four arrays as ``.npy`` files and ``meta.json``
(their shapes and dtypes, and the generator's state after the split, so training goes on exactly as after
generating). Later runs map the files read-only (``np.load(mmap_mode='r')``); every file is written to a
temporary name and moved into place with ``os.replace``, and ``meta.json`` goes last, so a killed writer
leaves nothing that is read and writers of the same key (which write the same bytes) cannot clash.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from sepbench.tasks.cot.base import CotTask, Rows

CACHE_ENV = "SEPBENCH_DATA_CACHE"
DATA_VERSION = 1
"""The layout of a cache folder; raise it when the files or their meaning change."""
ARRAYS = ("train_tokens", "train_prompts", "test_tokens", "test_prompts")


def cache_root() -> Path | None:
    """The cache folder: $SEPBENCH_DATA_CACHE (``--data-cache`` sets it), or None: no cache."""
    text = os.environ.get(CACHE_ENV, "").strip()
    return Path(text).expanduser() if text else None


@lru_cache(maxsize=1)
def generator_code() -> str:
    """A hash of the task code (``sepbench/tasks``), which decides the rows a seed gives."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for source in sorted((root / "tasks").rglob("*.py")):
        digest.update(source.relative_to(root).as_posix().encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def split_key(task: CotTask, n_train: int, n_test: int, rng: np.random.Generator) -> str:
    """The name of the data set ``task.split_rows(n_train, n_test, rng)`` draws."""
    fields = {
        "version": DATA_VERSION, "task": f"{type(task).__module__}.{type(task).__qualname__}", "length": task.length,
        "options": task.options.model_dump(mode="json"), "n_train": n_train, "n_test": n_test,
        "rng": rng.bit_generator.state, "code": generator_code(), "numpy": np.__version__,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cached_split(task: CotTask, n_train: int, n_test: int, rng: np.random.Generator,
                 root: Path | None = None) -> tuple[Rows, Rows]:
    """``task.split_rows(n_train, n_test, rng)``, read from the cache under ``root`` (default ``cache_root()``)
    when it holds it, else drawn and stored there; ``rng`` ends in the same state either way."""
    root = cache_root() if root is None else root
    if root is None:
        return task.split_rows(n_train, n_test, rng)
    folder = root / split_key(task, n_train, n_test, rng)
    found = _load(folder)
    if found is not None:
        arrays, state = found
        rng.bit_generator.state = state
        return Rows(arrays["train_tokens"], arrays["train_prompts"]), Rows(arrays["test_tokens"], arrays["test_prompts"])
    train, test = task.split_rows(n_train, n_test, rng)
    arrays = {"train_tokens": train.tokens, "train_prompts": train.prompts,
              "test_tokens": test.tokens, "test_prompts": test.prompts}
    try:
        _store(folder, arrays, rng.bit_generator.state)
    except OSError as problem:
        warnings.warn(f"data cache: could not write {folder} ({problem}); this run goes on with the rows it drew",
                      stacklevel=2)
    return train, test


def _load(folder: Path) -> tuple[dict[str, np.ndarray], dict] | None:
    """The arrays (memory-mapped) and generator state of a complete, intact folder; None if absent or damaged
    (then with a one-line warning)."""
    meta_path = folder / "meta.json"
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        arrays = {}
        for name in ARRAYS:
            want = meta["arrays"][name]
            path = folder / f"{name}.npy"
            array = np.load(path, mmap_mode="r")
            shape, dtype = tuple(want["shape"]), np.dtype(want["dtype"])
            if array.shape != shape or array.dtype != dtype or path.stat().st_size != want["bytes"]:
                raise ValueError(f"{name}.npy is {array.dtype}{list(array.shape)} in {path.stat().st_size} bytes, "
                                 f"expected {dtype}{list(shape)} in {want['bytes']}")
            arrays[name] = array
        return arrays, meta["rng_state"]
    except (OSError, ValueError, KeyError, TypeError, EOFError) as problem:
        warnings.warn(f"data cache: {folder} is damaged ({problem}); drawing the data again", stacklevel=3)
        return None


def _store(folder: Path, arrays: dict[str, np.ndarray], state: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"version": DATA_VERSION, "rng_state": state, "arrays": {}}
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        path = folder / f"{name}.npy"
        _replace(path, lambda handle, array=array: np.save(handle, array, allow_pickle=False))
        meta["arrays"][name] = {"shape": list(array.shape), "dtype": array.dtype.str, "bytes": path.stat().st_size}
    text = json.dumps(meta, sort_keys=True)
    _replace(folder / "meta.json", lambda handle: handle.write(text.encode()))


def _replace(path: Path, write) -> None:
    """Write ``path`` through a temporary file in its folder, flushed to disk, then moved into place."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
