"""SweepSpec: a base RunConfig, cases, grid axes, zipped axes, seeds and a learning-rate grid, read from YAML."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from sepbench.config import (ConfigError, RunConfig, StrictModel, apply_overrides, describe_validation_error,
                             load_yaml, qualify_key)
from sepbench.sweep.ties import Z as TIE_Z

LR_KEY = "train.lr"
SEED_KEY = "seed"


class SweepSpec(StrictModel):
    """A grid of runs: every combination of the ``grid`` axes, of each ``zip`` group, of ``lr_grid`` and ``seeds``,
    for each entry of ``cases``.

    ``grid`` and ``zip`` map dotted config keys (``model.width``, ``task.options.alphabet_size``) to lists of
    values; the keys of one ``zip`` group vary together and must have equally long lists. A case maps dotted
    keys to a value or to a list (one more axis of that case only), so that sub-grids of different shapes
    (Arithmetic to width 512, LIS to 1024) share one spec; the runs are the union over cases.
    """

    name: str = Field("sweep", min_length=1, description="names the sweep in progress lines and reports")
    base: dict[str, Any] = Field(default_factory=dict, description="a RunConfig mapping shared by every run")
    cases: list[dict[str, Any]] = Field(default_factory=lambda: [{}], min_length=1,
                                        description="sub-grids whose runs are unioned (a list value is an axis)")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted key -> values (cartesian product)")
    zipped: list[dict[str, list[Any]]] = Field(default_factory=list, alias="zip",
                                               description="groups of dotted keys varied together")
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="seeds for every cell")
    lr_grid: list[float] | None = Field(None, min_length=1, description="learning rates tried in every cell")
    lr_search: Literal["grid", "halving"] = Field(
        "grid", description="grid: every learning rate trains in full; halving: successive halving (sweep.halving)")
    halving_eta: float = Field(2.0, gt=1.0, allow_inf_nan=False,
                               description="halving keeps 1/eta of the learning rates at each rung")
    halving_finalists: int = Field(2, ge=1, description="learning rates halving trains to the budget (the last cut "
                                   "happens there)")
    halving_keep_ties: bool = Field(False, description="halving also keeps, at each rung, every learning rate "
                                    f"whose mean accuracy is within {TIE_Z:g} standard errors of the worst one kept "
                                    "(a cell where no rate has learned yet then trains whole; the plan and "
                                    "--dry-run count the schedule's cuts only)")

    model_config = StrictModel.model_config | {"populate_by_name": True}

    @field_validator("grid")
    @classmethod
    def _grid_axes_not_empty(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            if not values:
                raise ValueError(f"grid axis '{key}' has no values")
        return grid

    @field_validator("cases")
    @classmethod
    def _case_axes_not_empty(cls, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, case in enumerate(cases):
            for key, value in case.items():
                if value == []:
                    raise ValueError(f"cases[{i}] axis '{key}' has no values")
        return cases

    @field_validator("zipped")
    @classmethod
    def _zip_groups_aligned(cls, groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for group in groups:
            sizes = {key: len(values) for key, values in group.items()}
            if not group or len(set(sizes.values())) != 1 or 0 in sizes.values():
                raise ValueError(f"zip group {sorted(group)} needs non-empty lists of one length, got lengths {sizes}")
        return groups

    @field_validator("lr_grid")
    @classmethod
    def _positive_lrs(cls, lrs: list[float] | None) -> list[float] | None:
        if lrs is not None and any(lr <= 0 for lr in lrs):
            raise ValueError(f"lr_grid values must be > 0, got {lrs}")
        return lrs

    @model_validator(mode="after")
    def _halving_has_lrs(self) -> "SweepSpec":
        if self.lr_search == "halving" and self.lr_grid is None:
            raise ValueError("lr_search: halving needs an lr_grid to search")
        return self

    @model_validator(mode="after")
    def _keys_known_and_distinct(self) -> "SweepSpec":
        seen: dict[str, str] = {}
        axes = [("grid", list(self.grid))] + [(f"zip[{i}]", list(g)) for i, g in enumerate(self.zipped)]
        axes += [("seeds", [SEED_KEY])] + ([("lr_grid", [LR_KEY])] if self.lr_grid is not None else [])
        for where, keys in axes:
            for key in keys:
                dotted = ".".join(qualify_key(key))
                if dotted in seen:
                    raise ValueError(f"'{dotted}' is swept twice (in {seen[dotted]} and {where})")
                seen[dotted] = where
        for i, case in enumerate(self.cases):
            for key in case:
                dotted = ".".join(qualify_key(key))
                if dotted in seen:
                    raise ValueError(f"'{dotted}' is set in cases[{i}] and swept in {seen[dotted]}")
        return self

    @property
    def axes(self) -> list[str]:
        """The dotted keys that vary from run to run, seed and learning rate last."""
        keys = sorted({".".join(qualify_key(k)) for case in self.cases for k, v in case.items()
                       if isinstance(v, list) or len(self.cases) > 1})
        keys += [".".join(qualify_key(k)) for k in self.grid]
        keys += [".".join(qualify_key(k)) for group in self.zipped for k in group]
        return keys + ([LR_KEY] if self.lr_grid is not None else []) + [SEED_KEY]

    def describe(self, config: RunConfig) -> str:
        """``config``'s values on the sweep's axes, ``key=value`` each."""
        flat = _flatten(config.model_dump(mode="json"))
        return "  ".join(f"{key}={flat[key]}" for key in self.axes if key in flat)

    def points(self) -> list[dict[str, Any]]:
        """Every run as the overrides it applies to ``base``, in a stable order (case by case, seed fastest)."""
        shared: list[list[dict[str, Any]]] = [[{key: v} for v in values] for key, values in self.grid.items()]
        for group in self.zipped:
            size = len(next(iter(group.values())))
            shared.append([{key: values[i] for key, values in group.items()} for i in range(size)])
        if self.lr_grid is not None:
            shared.append([{LR_KEY: lr} for lr in self.lr_grid])
        shared.append([{SEED_KEY: seed} for seed in self.seeds])
        points = []
        for case in self.cases:
            factors = [[{key: v} for v in (value if isinstance(value, list) else [value])] for key, value in case.items()]
            for combo in itertools.product(*factors, *shared):
                points.append({k: v for part in combo for k, v in part.items()})
        return points

    def forcing(self, overrides: dict[str, Any]) -> "SweepSpec":
        """The spec with ``overrides`` set in every run: each key goes into ``base`` and off every axis that would
        set it again (a forced seed leaves one seed, a forced learning rate no rate search)."""
        if not overrides:
            return self
        forced = {".".join(qualify_key(key)): value for key, value in overrides.items()}

        def free(axes: dict[str, Any]) -> dict[str, Any]:
            kept = {}
            for key, values in axes.items():
                dotted = ".".join(qualify_key(key))
                inside = [f for f in forced if f.startswith(dotted + ".")]
                if inside:
                    raise ConfigError(f"--set {inside[0]}: the spec sets the whole of {dotted} run by run; set "
                                      f"{dotted} instead")
                if not any(dotted == f or dotted.startswith(f + ".") for f in forced):
                    kept[key] = values
            return kept

        update: dict[str, Any] = {
            "base": apply_overrides(self.base, overrides),
            "cases": [free(case) for case in self.cases],
            "grid": free(self.grid),
            "zipped": [group for group in map(free, self.zipped) if group],
        }
        if SEED_KEY in forced:
            update["seeds"] = [forced[SEED_KEY]]
        if LR_KEY in forced:
            update |= {"lr_grid": None, "lr_search": "grid"}
        return self.model_copy(update=update)

    def expand(self) -> list[RunConfig]:
        """One validated RunConfig per point; duplicates (same config hash) appear once."""
        configs: dict[str, RunConfig] = {}
        for point in self.points():
            try:
                cfg = RunConfig.build(apply_overrides(self.base, point))
            except ConfigError as problem:
                shown = ", ".join(f"{k}={v}" for k, v in point.items())
                raise ConfigError(f"sweep '{self.name}', run {{{shown}}}: {problem}") from None
            configs.setdefault(cfg.config_hash(), cfg)
        return list(configs.values())

    @classmethod
    def build(cls, data: dict[str, Any], source: str = "sweep spec") -> "SweepSpec":
        """Validate a mapping; any problem becomes a one-line ConfigError."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            if first["type"] == "extra_forbidden":
                allowed = ", ".join(f.alias or name for name, f in cls.model_fields.items())
                raise ConfigError(f"{source}: unknown field '{first['loc'][0]}'; allowed: {allowed}") from None
            raise ConfigError(f"{source}: {describe_validation_error(err)}") from None
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> "SweepSpec":
        """Read a spec; a ``base`` given as a string names a RunConfig YAML file relative to the spec."""
        path = Path(path)
        source = f"sweep spec {path}"
        data = load_yaml(path, holds="keys (name, base, cases, grid, zip, seeds, lr_grid, lr_search, ...)")
        if not data:
            raise ConfigError(f"{source} is empty; a spec names at least its base, grid or cases (docs/sweeps.md)")
        if not data.keys() & {"base", "grid", "cases", "zip", "seeds", "lr_grid"}:
            raise ConfigError(f"{source} names no runs ({', '.join(map(str, data))} only); a spec names at least its "
                              "base, grid or cases (docs/sweeps.md)")
        if isinstance(data.get("base"), str):
            try:
                data = {**data, "base": load_yaml(path.parent / data["base"])}
            except ConfigError as err:
                raise ConfigError(f"{source}: base: {err}") from None
        return cls.build(data, source=source)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
