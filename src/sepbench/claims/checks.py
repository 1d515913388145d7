"""Theory claims measure their own evidence: constructions, bounds, random networks, learned classifiers.

Each check takes the claim's parameters at one scale and returns series (label -> x -> one value per seed);
``cached`` keeps them beside the store so a second ``sepbench reproduce`` reuses them.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

from sepbench.claims.series_rules import Series
from sepbench.files import write_whole

Check = Callable[[dict[str, Any]], Series]


def construction(params: dict[str, Any]) -> Series:
    """Accuracy, model width and code width of a hand-set Transformer (Bhattamishra et al. Thm 1, 6, 7) per length
    and seed of its codes; with ``precision_seeds``, at those seeds also the fixed-point bits that keep it exact
    (``theory.precision``: precision, fraction and integer bits; precision and fraction inf where no
    fraction up to the cap keeps it exact)."""
    from sepbench.theory.constructions import construct
    from sepbench.theory.precision import measure_precision

    name = params["name"]
    samples = params.get("samples", 1000)
    series: Series = {label: {} for label in ("accuracy", "code width", "model width")}
    if "precision_seeds" in params:
        series.update({label: {} for label in ("precision bits", "fraction bits", "integer bits")})
    for n in params["lengths"]:
        for seed in params.get("seeds", [0, 1, 2]):
            built = construct(name, n, None, seed, params.get("queries", "recall"))
            series["accuracy"].setdefault(n, []).append(built.accuracy(samples, seed))
            series["code width"].setdefault(n, []).append(float(built.code_width))
            series["model width"].setdefault(n, []).append(float(built.width))
            if seed in params.get("precision_seeds", []):
                found = measure_precision(built, samples, seed)
                unbounded = 0.0 if found.exact else math.inf
                for label, value in (("precision bits", found.bits + unbounded),
                                     ("fraction bits", found.fraction_bits + unbounded),
                                     ("integer bits", float(found.integer_bits))):
                    series[label].setdefault(n, []).append(float(value))
    return series


def bound_bites(params: dict[str, Any]) -> Series:
    """The first length at which a lower bound rules out a model of ``size`` at ``precision`` bits."""
    from sepbench.theory import bounds

    bound = getattr(bounds, params["bound"])
    first = bounds.first_length_that_bites(bound, params["size"], params["precision"])
    return {"first length": {0: [float(first)]}}


def random_networks(params: dict[str, Any]) -> Series:
    """Deng et al.'s success event E over random networks (reconstructed data): per value of the swept parameter
    and per seed, the fraction of ``trials`` draws with E, and the fraction where linear attention stays 0 on D1.
    ``figure``: the sweep of a packaged figure config (``configs/deng2023/<figure>.yaml``) instead of ``values``."""
    from sepbench.theory.softmax_vs_linear.experiment import Setting, run_point
    from sepbench.theory.softmax_vs_linear.figures import load_figure

    event: dict[float, list[float]] = {}
    silent: dict[float, list[float]] = {}
    figure = load_figure(params["figure"]) if "figure" in params else None
    for value in figure.grid() if figure else params["values"]:
        setting = figure.setting(value) if figure else Setting.from_flat(
            params["model"], {**params.get("fixed", {}), params["parameter"]: value})
        for seed in params.get("seeds", [0, 1, 2]):
            point = run_point(setting, figure.trials if figure else params.get("trials", 100), seed)
            event.setdefault(value, []).append(point.successes / point.trials)
            silent.setdefault(value, []).append(point.lin_d1_zero / point.trials)
    return {"E": event, "linear silent on D1": silent}


def swept_parameter(params: dict[str, Any]) -> str:
    """The name of the parameter a check's series sweeps: a Deng figure's or ``parameter``, none ("") for a
    bound's one number, else the length N."""
    if "bound" in params:
        return ""
    if "figure" in params:
        from sepbench.theory.softmax_vs_linear.figures import load_figure

        return load_figure(params["figure"]).parameter
    return str(params.get("parameter", "N"))


def learned(params: dict[str, Any]) -> Series:
    """Test accuracy of learned softmax and linear one-layer classifiers on R2 data, per n and seed."""
    from sepbench.theory.softmax_vs_linear.learned import LearnedConfig, train_one

    fields = {k: v for k, v in params.items() if k not in ("seeds",)}
    series: Series = {"softmax": {}, "linear": {}}
    for seed in params.get("seeds", [0, 1, 2]):
        config = LearnedConfig(**{**fields, "seed": seed})
        for n in config.lengths:
            for kind, label in (("exp", "softmax"), ("lin", "linear")):
                row = train_one(config, n, kind, _cpu())
                series[label].setdefault(n, []).append(float(row["test_accuracy"]))
    return series


def _cpu():
    import torch

    return torch.device("cpu")


CHECKS: dict[str, Check] = {"construction": construction, "bound_bites": bound_bites,
                            "random_networks": random_networks, "learned": learned}


def cache_path(store_path: Path) -> Path:
    """The theory cache beside a store: ``runs/x.db`` -> ``runs/x.claims.json``."""
    return store_path.with_name(store_path.stem + ".claims.json")


def _key(check: str, params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([check, params], sort_keys=True).encode()).hexdigest()[:16]


class NotComputed(LookupError):
    """A check asked for from its cache alone that the cache does not hold."""


def cache_entry(check: str, params: dict[str, Any], store_path: Path) -> dict[str, Any] | None:
    """The cached entry of ``check`` at ``params`` beside the store (check, params, series, seconds), if any."""
    path = cache_path(store_path)
    entries = json.loads(path.read_text()) if path.is_file() else {}
    return entries.get(_key(check, params))


def put_entry(entry: dict[str, Any], store_path: Path) -> None:
    """Add an entry (as ``cache_entry`` returns it) to the cache beside the store, written whole."""
    path = cache_path(store_path)
    entries = json.loads(path.read_text()) if path.is_file() else {}
    entries[_key(entry["check"], entry["params"])] = entry
    write_whole(path, json.dumps(entries, indent=1, sort_keys=True))


def cached(check: str, params: dict[str, Any], store_path: Path, refresh: bool = False,
           compute: bool = True) -> tuple[Series, float, bool]:
    """The check's series, from the cache beside the store when there; returns (series, seconds, reused).
    ``compute`` False raises ``NotComputed`` instead of running a check the cache lacks."""
    if check not in CHECKS:
        raise ValueError(f"unknown check '{check}'; allowed: {', '.join(CHECKS)}")
    entry = None if refresh else cache_entry(check, params, store_path)
    if entry is not None:
        return _decode(entry["series"]), float(entry["seconds"]), True
    if not compute:
        raise NotComputed(f"no stored result of the check {check} at these params")
    start = time.perf_counter()
    series = CHECKS[check](params)
    seconds = time.perf_counter() - start
    put_entry({"check": check, "params": params, "series": _encode(series), "seconds": seconds}, store_path)
    return series, seconds, False


def _encode(series: Series) -> dict[str, dict[str, list[float]]]:
    return {label: {repr(float(x)): values for x, values in by_x.items()} for label, by_x in series.items()}


def _decode(data: dict[str, dict[str, list[float]]]) -> Series:
    return {label: {_number(x): values for x, values in by_x.items()} for label, by_x in data.items()}


def _number(text: str) -> float:
    value = float(text)
    return int(value) if math.isfinite(value) and value.is_integer() else value
