"""Sweeps with stacked runs: pending configs of one cell (same but for seed and lr) train together in one worker."""
from __future__ import annotations

from typing import Callable

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.pool import run_in_processes
from sepbench.sweep.runner import (REFUSED_FOR_MEMORY, Executor, OnResult, RowsBefore, failed_result, lost_run,
                                   ray_keeping, start_ray)
from sepbench.train.environment import resolve_device
from sepbench.train.keeping import Keeping
from sepbench.train.result import RunResult

DEFAULT_GROUP_SIZE = {"cpu": 1, "cuda": 16}
"""Members per group when the sweep does not say (benchmarks/_throughput_group.py; see docs/sweeps.md):
on CPU stacking measured no faster than one run after another; on CUDA 64 stacked runs trained 12x faster than
one after another on an H100 (16 itself is not measured)."""


def default_group_size(device: str) -> int:
    """The group size a sweep uses on ``device`` (auto resolves to CUDA when present)."""
    try:
        kind = resolve_device(device).type
    except ValueError:
        kind = "cpu"
    return DEFAULT_GROUP_SIZE.get(kind, 1)


def make_groups(configs: list[RunConfig], size: int) -> list[list[RunConfig]]:
    """Configs of one cell in groups of at most ``size``, in the order the cells first appear."""
    from sepbench.train.group import group_key

    cells: dict[str, list[RunConfig]] = {}
    for cfg in configs:
        cells.setdefault(group_key(cfg) + cfg.device, []).append(cfg)
    return [members[i : i + size] for members in cells.values() for i in range(0, len(members), size)]


RunGroups = Callable[[list[list[RunConfig]], Store, OnResult], None]


def in_groups(size: int, run_groups: RunGroups) -> Executor:
    """An executor that trains pending runs stacked, up to ``size`` runs of one cell in a group, by ``run_groups``."""
    def run(configs: list[RunConfig], store: Store, on_result: OnResult) -> None:
        run_groups(make_groups(configs, size), store, on_result)

    return run


def execute_group(configs: list[RunConfig], on_result: OnResult, keeping: Keeping | None = None,
                  discard: bool = True) -> None:
    """Train one group, its members keeping their progress as ``keeping`` says; each member's result goes to
    ``on_result`` when final, a crash fails the members left. ``discard``: as ``train_group``'s."""
    from sepbench.train.group import train_group
    from sepbench.train.memory import MemoryRefused, is_out_of_memory

    done: set[str] = set()

    def record(result: RunResult) -> None:
        done.add(result.config_hash)
        on_result(result)

    try:
        check_group_memory(configs)
        train_group(configs, on_result=record, keeping=keeping, discard=discard)
    except MemoryRefused as error:
        for cfg in configs:
            record(failed_result(cfg, error, REFUSED_FOR_MEMORY))
    except Exception as error:  # noqa: BLE001 - a crash of the group is the result of its unfinished members
        kind = "out of memory" if is_out_of_memory(error) else None
        for cfg in configs:
            if cfg.config_hash() not in done:
                record(failed_result(cfg, error, kind))


def check_group_memory(configs: list[RunConfig]) -> None:
    """Raise MemoryRefused when the members together (each holding its own model, optimiser and data) cannot fit."""
    from sepbench.train.memory import MemoryRefused, estimate_memory, free_memory, gib

    device = resolve_device(configs[0].device)
    free = free_memory(device)
    if free is None:
        return
    need = len(configs) * estimate_memory(configs[0], free // len(configs)).total
    if need > free:
        raise MemoryRefused(f"a group of {len(configs)} runs needs about {gib(need)} but {device.type} has "
                            f"{gib(free)} free; lower --group-size or the run's size")


def _group_and_store(configs_json: list[str], store_path: str) -> list[str]:
    """Pool worker: train a group, storing each member from this process the moment it is final."""
    store = Store(store_path)
    results: list[str] = []

    def keep(result: RunResult) -> None:
        store.put(result)
        results.append(result.model_dump_json())

    execute_group([RunConfig.model_validate_json(c) for c in configs_json], keep, Keeping.beside(store))
    return results


def _group_remote(configs_json: list[str], keeping: Keeping) -> list[str]:
    import torch

    torch.set_num_threads(1)
    results: list[str] = []
    execute_group([RunConfig.model_validate_json(c) for c in configs_json], lambda r: results.append(r.model_dump_json()),
                  keeping, discard=False)  # the driver stores the results, then discards the checkpoints
    return results


def run_groups_inline(groups: list[list[RunConfig]], store: Store, on_result: OnResult) -> None:
    for group in groups:
        execute_group(group, lambda result: (store.put(result), on_result(result)), Keeping.beside(store))


def run_groups_local(groups: list[list[RunConfig]], store: Store, on_result: OnResult, workers: int = 1) -> None:
    """One group per single-threaded worker process; results are reported when a group ends."""
    if not groups:
        return
    path = str(store.path.resolve())
    before = RowsBefore([c for g in groups for c in g], store)  # read before any worker can store

    def submit(group: list[RunConfig]) -> tuple[Callable[..., list[str]], tuple]:
        return _group_and_store, ([c.model_dump_json() for c in group], path)

    def done(group: list[RunConfig], results: list[str]) -> None:
        for result in results:
            on_result(RunResult.model_validate_json(result))

    def lost(group: list[RunConfig], error: BaseException) -> None:
        for cfg in group:
            result = before.stored_since(cfg, store)  # the worker stored the members it finished
            if result is None:
                result = lost_run(cfg, error, store)
                store.put(result)
            on_result(result)

    run_in_processes(groups, workers, submit, done, lost)


def run_groups_ray(groups: list[list[RunConfig]], store: Store, on_result: OnResult, workers: int = 1,
                   address: str | None = None) -> None:
    """Each group a Ray task of one CPU; the driver stores the results."""
    if not groups:
        return
    ray, started_here = start_ray(address, workers)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_group_remote)
        keeping = ray_keeping(store, address)
        refs = {remote.remote([c.model_dump_json() for c in g], keeping): g for g in groups}
        remaining = list(refs)
        while remaining:
            finished, remaining = ray.wait(remaining, num_returns=1)
            for ref in finished:
                try:
                    results = [RunResult.model_validate_json(r) for r in ray.get(ref)]
                except Exception as error:  # noqa: BLE001 - a lost worker fails only its group
                    results = [lost_run(c, error, store) for c in refs[ref]]
                for result in results:
                    store.put(result)
                    keeping.stored(result)
                    on_result(result)
    finally:
        if started_here:
            ray.shutdown()
