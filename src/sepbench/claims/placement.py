"""One more model on a claim's runs (``reproduce --with-model``): the same tasks, lengths, sizes, learning rates and
seeds the catalogue's models get, trained for the added model only, and placed in a table beside the catalogue's
stored runs. A placement states where the model stands; it is not a verdict on the paper's claim."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sepbench.claims.catalogue import Claim
from sepbench.config import ConfigError, RunConfig, apply_overrides, qualify_key
from sepbench.store import Store
from sepbench.sweep.executors import OnResult, Reuse, plan, run_sweep
from sepbench.sweep.interrupts import interrupts_counted
from sepbench.sweep.search import SolvedRule, select_lr


def added_model_configs(claim: Claim, scale: str, model: str, overrides: dict[str, Any] | None = None
                        ) -> list[RunConfig]:
    """Every run of the claim at ``scale`` with ``model`` in place of the catalogue's model; the mixer-specific
    ``model.options`` of the catalogue's models are dropped. Runs that coincide once the model is replaced appear
    once."""
    found: dict[str, RunConfig] = {}
    catalogue = {cfg.config_hash() for cfg in claim.configs(scale, overrides)}
    for spec in claim.sweep_specs(scale, overrides):
        base = copy.deepcopy(spec.base)
        base.get("model", {}).pop("options", None)
        for point in spec.points():
            if RunConfig.build(apply_overrides(spec.base, point)).config_hash() not in catalogue:
                continue  # outside the claim's ``only``
            kept = {key: value for key, value in point.items() if qualify_key(key)[:2] != ["model", "options"]}
            try:
                config = RunConfig.build(apply_overrides(base, {**kept, "model.name": model}))
            except ConfigError as problem:
                raise ConfigError(f"claim {claim.id} with model {model}: {problem}") from None
            found.setdefault(config.config_hash(), config)
    return list(found.values())


@dataclass
class Placement:
    """The added model's runs and the claim's, per cell (``select_lr`` rows), and what the store lacks."""

    claim: Claim
    model: str
    cells: pd.DataFrame
    trained: int
    catalogue_missing: int
    added_missing: int
    rule: SolvedRule


def claim_threshold(claim: Claim, default: float) -> float:
    """The accuracy the claim's conditions judge by, where they name one and agree on it; else ``default``."""
    named = {getattr(c, "threshold", None) for c in claim.conditions}
    named |= {c.solved.threshold for c in claim.conditions if hasattr(c, "solved")}
    named.discard(None)
    return named.pop() if len(named) == 1 else default


def place(claim: Claim, scale: str, store: Store, model: str, overrides: dict[str, Any] | None = None,
          workers: int = 1, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
          group_size: int | None = None, train: bool = True) -> Placement:
    """Train the added model's runs the store lacks (never the catalogue's), then tabulate every stored run of
    both: per cell, the best learning rate's mean accuracy and whether the cell is solved (``k`` of the claim's
    ``min_seeds`` seeds at the runs' threshold)."""
    catalogue_configs = claim.configs(scale, overrides)
    added = added_model_configs(claim, scale, model, overrides)
    todo = plan(added, store, reuse).todo
    if train and todo:
        from sepbench.sweep.grouped import default_group_size

        size = group_size or default_group_size(todo[0].device)
        run_sweep(todo, store, workers=min(workers, len(todo)), on_result=on_result, reuse=reuse, group_size=size)
    stored = {cfg.config_hash(): store.get(cfg.config_hash()) for cfg in [*catalogue_configs, *added]}
    results = [r for r in stored.values() if r is not None]
    rule = SolvedRule(threshold=claim_threshold(claim, catalogue_configs[0].train.threshold),
                      k=min(2, claim.min_seeds), m=claim.min_seeds)
    cells = select_lr(results, rule)
    missing = {key for key, result in stored.items() if result is None}
    return Placement(claim, model, cells, len(todo) if train else 0,
                     sum(cfg.config_hash() in missing for cfg in catalogue_configs),
                     sum(cfg.config_hash() in missing for cfg in added), rule)


def place_all(claims: list[Claim], scale: str, store: Store, model: str, overrides: dict[str, Any] | None = None,
              workers: int = 1, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
              group_size: int | None = None) -> list[Placement]:
    """``place`` the model on each claim in turn. Ctrl-C raises SweepInterrupted (how many runs finished) once the
    runs in training have saved their checkpoints."""
    with interrupts_counted(store) as finished:
        return [place(claim, scale, store, model, overrides, workers=workers, on_result=finished.reporting(on_result),
                      reuse=reuse, group_size=group_size) for claim in claims]
