"""The sweeps in the paper's figure layout (Fig. 3 a-b, 4 a-f, 5 a-f, 7 a-e), their CSV, plot and store rows.

Only the layout survives in the source text (docs/softmax_vs_linear.md): which parameter each panel sweeps, every
range, step and fixed value are ours, read from ``configs/deng2023/<figure>.yaml``.
"""
from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sepbench import configs
from sepbench.config import ConfigError, describe_validation_error, load_yaml
from sepbench.theory.softmax_vs_linear.experiment import PointResult, Setting, run_point

if TYPE_CHECKING:
    import matplotlib.figure

CONFIG_DIR = configs.path("deng2023")
RECONSTRUCTED = ("reconstructed definitions, ranges chosen by us (the paper's formulas and sweep ranges were lost; "
                 "see docs/softmax_vs_linear.md)")
COLUMNS = ["figure", "parameter", "value", "model", "successes", "trials", "seed", "exp_d0_zero", "exp_d1_positive",
           "lin_d0_zero", "lin_d1_zero", "seconds", "setting"]
FLOAT_FIELDS = {"tau", "C", "c_lo", "c_hi", "spike", "anchored"}


class FigureConfig(BaseModel):
    """One panel: sweep ``parameter`` over ``values`` (or an inclusive ``range``), the rest ``fixed``."""

    model_config = ConfigDict(extra="forbid")

    figure: str
    title: str
    model: Literal["toy", "self", "cross"]
    parameter: str
    values: list[float] | None = None
    range: tuple[float, float, float] | None = Field(None, description="start, stop (inclusive), step")
    fixed: dict[str, Any] = Field(default_factory=dict)
    m_per_log_n: float | None = Field(None, gt=0, description="tie m = ceil(m_per_log_n * ln n) to each n")
    trials: int = Field(100, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _one_grid(self) -> "FigureConfig":
        if (self.values is None) == (self.range is None):
            raise ValueError("give exactly one of 'values' and 'range'")
        if self.range is not None and (self.range[2] <= 0 or self.range[1] < self.range[0]):
            raise ValueError(f"range {list(self.range)} must have step > 0 and stop >= start")
        return self

    def grid(self) -> list[float]:
        if self.values is not None:
            return list(self.values)
        start, stop, step = self.range
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        return [round(start + i * step, 10) for i in range(count)]

    def setting(self, value: float) -> Setting:
        params = dict(self.fixed)
        params[self.parameter] = int(value) if float(value).is_integer() and self.parameter not in FLOAT_FIELDS else value
        if self.m_per_log_n is not None:
            params["m"] = max(1, math.ceil(self.m_per_log_n * math.log(params["n"])))
        return Setting.from_flat(self.model, params)


def figure_ids(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(path.stem for path in Path(config_dir).glob("*.yaml"))


def load_figure(figure: str, config_dir: Path = CONFIG_DIR) -> FigureConfig:
    """The panel's config, with a one-line ConfigError naming the allowed ids or the bad field."""
    path = Path(config_dir) / f"{figure}.yaml"
    if not path.is_file():
        allowed = ", ".join(figure_ids(config_dir)) or f"none found in {config_dir}"
        raise ConfigError(f"unknown figure '{figure}'; allowed: {allowed}")
    data = load_yaml(path, holds=f"a figure's fields ({', '.join(FigureConfig.model_fields)})")
    try:
        config = FigureConfig.model_validate(data)
        for value in config.grid():
            config.setting(value)
    except ValidationError as problem:
        raise ConfigError(f"config {path}: {describe_validation_error(problem)}") from None
    except (ValueError, TypeError) as problem:
        raise ConfigError(f"config {path}: {problem}") from None
    return config


def model_label(setting: Setting) -> str:
    variant = getattr(setting.data, "variant", None)
    return f"{setting.model}_{variant.lower()}" if variant == "E" else setting.model


def point_row(config: FigureConfig, value: float, setting: Setting, seed: int, result: PointResult) -> dict[str, Any]:
    counts = result.as_dict()
    return {"figure": config.figure, "parameter": config.parameter, "value": value, "model": model_label(setting),
            "seed": seed, **{k: counts[k] for k in COLUMNS if k in counts}, "setting": setting.model_dump_json()}


def run_figure(config: FigureConfig, trials: int | None = None, seed: int | None = None, device: str = "cpu",
               on_point: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """Every point of the panel, point i seeded with ``seed + i`` (so any point can be rerun alone)."""
    trials = config.trials if trials is None else trials
    base = config.seed if seed is None else seed
    rows = []
    for index, value in enumerate(config.grid()):
        setting = config.setting(value)
        result = run_point(setting, trials, base + index, device=device)
        rows.append(point_row(config, value, setting, base + index, result))
        if on_point is not None:
            on_point(rows[-1])
    return pd.DataFrame(rows, columns=COLUMNS)


def point_key(row: dict[str, Any]) -> str:
    text = json.dumps([row["figure"], row["setting"], row["trials"], row["seed"]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def store_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = frame.to_dict(orient="records")
    return [{**row, "point_key": point_key(row), "created_at": now} for row in rows]


def draw_figure(frame: pd.DataFrame, config: FigureConfig) -> matplotlib.figure.Figure:
    """'# of E out of 100' against the swept parameter, with the reconstruction caveat in the figure."""
    from matplotlib.figure import Figure

    scale = 100.0 / frame["trials"]
    fig = Figure(figsize=(6.0, 4.2))
    ax = fig.subplots()
    ax.plot(frame["value"], frame["successes"] * scale, "o-", color="C0", label="E (softmax separates, linear is 0)")
    ax.plot(frame["value"], frame["exp_d1_positive"] * scale, ":", color="C1", label="F_exp(D1) > 0")
    ax.plot(frame["value"], frame["lin_d1_zero"] * scale, "--", color="C2", label="F_lin(D1) = 0")
    ax.set_ylim(-3, 103)
    ax.set_xlabel(config.parameter)
    trials = sorted(set(int(t) for t in frame["trials"]))
    ax.set_ylabel("# of E out of 100" + ("" if trials == [100] else f" (scaled from {trials[0]} trials)"))
    fixed = ", ".join(f"{k}={v}" for k, v in config.fixed.items() if k != config.parameter)
    if config.m_per_log_n is not None:
        fixed += f", m=ceil({config.m_per_log_n} ln n)"
    ax.set_title(f"{config.figure}: {config.title}\n{fixed}", fontsize=9)
    fig.text(0.5, 0.01, "Deng et al. layout; " + RECONSTRUCTED, ha="center", va="bottom", fontsize=7,
             color="firebrick", wrap=True)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def write_outputs(frame: pd.DataFrame, config: FigureConfig, out_dir: Path) -> tuple[Path, Path]:
    """``<figure>.csv`` (with the reconstruction note as a comment line) and ``<figure>.png`` in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / f"{config.figure}.csv"
    csv.write_text(f"# {RECONSTRUCTED}\n" + frame.to_csv(index=False))
    png = out_dir / f"{config.figure}.png"
    draw_figure(frame, config).savefig(png, dpi=120)
    return csv, png
