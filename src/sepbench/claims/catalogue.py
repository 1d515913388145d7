"""The claims catalogue: each claim of the three papers, its sweep specs per scale and its verdict rule.

The catalogue lives in packaged YAML (``configs/claims/<paper>.yaml``); a claim's quick and cpu specs are packaged
sweep specs of their own (``configs/claims/quick/``, ``configs/claims/cpu/``), its paper specs name the
paper-scale specs of ``configs/<paper>/`` (with the seeds and learning rates the rule needs). A verdict is computed from data by the
claim's ``conditions`` (``sepbench.claims.evaluate``), never set by hand.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal, Sequence, Union

from pydantic import Field, ValidationError, model_validator

from sepbench import configs
from sepbench.config import (ConfigError, RunConfig, StrictModel, apply_overrides, describe_validation_error, load_yaml,
                             qualify_key)
from sepbench.sweep.spec import SweepSpec

SCALES = ("quick", "cpu", "paper")
Scale = Literal["quick", "cpu", "paper"]
PAPERS = ("bhattamishra2024", "yang2024", "deng2023")
CORE_HOUR_TARGETS: dict[str, tuple[float, float]] = {"cpu": (6.0, 30.0)}
"""Per scale, the core-hours it aims at: per claim, and for the learned catalogue (docs/reproduction.md)."""
Selector = dict[str, Any]
Group = Union[str, Selector, list[Selector]]
"""A theory series label, or runs whose dotted config keys match (a list value: any of), or a union of those."""


def scaled(value: Any, scale: str) -> Any:
    """``{quick: x, cpu: y, paper: z}`` resolved at ``scale``; anything else is the same at every scale."""
    if isinstance(value, dict) and value and set(value) <= set(SCALES):
        return value.get(scale)
    return value


def group_at(group: Group, scale: str) -> Group:
    """``group`` with every per-scale selector value (``model.width: {quick: 64, paper: 1024}``) resolved."""
    if isinstance(group, str):
        return group
    if isinstance(group, list):
        return [group_at(selector, scale) for selector in group]
    return {key: scaled(value, scale) for key, value in group.items()}


def config_fields(config: RunConfig) -> dict[str, Any]:
    """``config`` as dotted keys (``model.width``) to values."""
    from sepbench.results import flatten

    return flatten(config.model_dump(mode="json"))


def _matches(fields: dict[str, Any], selector: Selector) -> bool:
    for key, wanted in selector.items():
        value = fields.get(key)
        if isinstance(wanted, list) and value not in wanted:
            return False
        if not isinstance(wanted, list) and value != wanted:
            return False
    return True


def in_group(config: RunConfig, group: Group) -> bool:
    selectors = group if isinstance(group, list) else [group]
    fields = config_fields(config)
    return any(_matches(fields, s) for s in selectors)


def _without(selector: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {key: value for key, value in selector.items() if key not in keys}


class SpecRef(StrictModel):
    """One sweep spec of a claim: a packaged spec file, with the seeds, learning rates or base fields the claim
    needs set on top (so a paper-scale spec of one seed is run with the claim's seeds)."""

    spec: str = Field(description="path of a packaged sweep spec, relative to sepbench/configs")
    seeds: list[int] | None = Field(None, min_length=1)
    lr_grid: list[float] | None = Field(None, min_length=1)
    set: dict[str, Any] = Field(default_factory=dict, description="dotted keys set in the spec's base")
    only: Selector | list[Selector] | None = Field(
        None, description="train only the spec's runs in this group (a spec shared by claims whose conditions read "
                          "different parts of it; values may be per scale)")

    def runs(self, scale: str, overrides: dict[str, Any] | None = None) -> list[RunConfig]:
        """The spec's runs, those in ``only`` where it is set."""
        return self.kept(self.load(overrides).expand(), scale, overrides)

    def kept(self, expanded: list[RunConfig], scale: str, overrides: dict[str, Any] | None = None
             ) -> list[RunConfig]:
        """Of the loaded spec's runs ``expanded``, those in ``only`` where it is set; a key ``overrides`` sets in
        every run is not selected on."""
        if self.only is None:
            return expanded
        forced = {".".join(qualify_key(key)) for key in overrides or {}}
        group = group_at(self.only, scale)
        group = [_without(s, forced) for s in group] if isinstance(group, list) else _without(group, forced)
        kept = [cfg for cfg in expanded if in_group(cfg, group)]
        if not kept:
            raise ConfigError(f"claim spec {self.spec}: `only` {group} matches none of its {len(expanded)} runs "
                              f"at the {scale} scale (keys are dotted config keys, e.g. model.width)")
        return kept

    def load(self, overrides: dict[str, Any] | None = None) -> SweepSpec:
        path = configs.path(*self.spec.split("/"))
        if not path.is_file():
            raise ConfigError(f"claim spec {self.spec} is not a packaged sweep spec")
        spec = SweepSpec.from_yaml(path)
        update: dict[str, Any] = {"base": apply_overrides(spec.base, self.set)}
        if self.seeds is not None:
            update["seeds"] = self.seeds
        if self.lr_grid is not None:
            update["lr_grid"] = self.lr_grid
        return spec.model_copy(update=update).forcing(overrides or {})


class OneSided(StrictModel):
    """At ``scales`` whose grid stops short of the size the text names (a width of 1024 where the grid ends at 128),
    only one verdict follows from the runs: the other is left inconclusive, saying ``why``."""

    scales: list[Literal["quick", "cpu", "paper"]] = Field(min_length=1)
    decides: Literal["reproduced", "not reproduced"]
    why: str = Field(description="which size the scale lacks, and why its runs can show only ``decides``")


class ConditionBase(StrictModel):
    text: str = Field(description="what must hold, in words")
    lengths: Any = Field(None, description="task sizes N where it must hold (a list, or {quick: [...], cpu: [...], "
                                           "paper: [...]})")
    one_sided: OneSided | None = Field(None, description="scales that can decide it only one way")

    def lengths_at(self, scale: str) -> list[int] | None:
        value = scaled(self.lengths, scale)
        return None if value is None else [int(v) for v in value]


class Compare(ConditionBase):
    """``a`` beats ``b`` by ``margin`` (direction above) or does not (below), at every length, on the seeds of the
    best learning rate of each member (per ``per``), the group's best or worst member picked."""

    kind: Literal["compare"]
    a: Group
    b: Group
    a_pick: Literal["best", "worst"] = "best"
    b_pick: Literal["best", "worst"] = "best"
    per: list[str] = Field(default_factory=lambda: ["model.name"])
    margin: float = Field(gt=0, le=1)
    direction: Literal["above", "below"] = "above"
    outside_if_both_reach: float | None = Field(
        None, gt=0, le=1, description="a length where every seed of a and of b reaches this accuracy is outside the "
        "claim: the runs stop there, so neither side can rise further (the claim needs a side that falls short)")


class Level(ConditionBase):
    """``group`` is at least (or below) ``threshold`` at every length, every seed of the picked member; with
    ``lrs`` > 1, at the member's ``lrs``-th best learning rate (it holds at that many learning rates)."""

    kind: Literal["level"]
    group: Group
    pick: Literal["best", "worst"] = "worst"
    per: list[str] = Field(default_factory=lambda: ["model.name"])
    threshold: float
    direction: Literal["at_least", "below"] = "at_least"
    lrs: int = Field(1, ge=1, description="learning rates at which it must hold (the lrs-th best decides)")
    seeds_needed: int | None = Field(None, ge=1, description="seeds of a member at or above the threshold for it "
                                     "to reach it, e.g. 2 for Yang's 'solved in 2 of 3' (default: every seed)")

    @model_validator(mode="after")
    def _seeds_needed_reach_a_level(self) -> "Level":
        if self.seeds_needed is not None and self.direction != "at_least":
            raise ValueError("seeds_needed applies to direction at_least only")
        return self


class Rate(ConditionBase):
    """A rate of learning: ``fast`` reaches ``threshold`` within its budget (and below ``fast_within`` steps when
    set), at T steps (its best learning rate, the slowest seed); ``slow``'s best member is still below
    ``threshold`` at k x T steps, read off its curves."""

    kind: Literal["rate"]
    fast: Group
    slow: Group
    per: list[str] = Field(default_factory=lambda: ["model.name"])
    k: float = Field(10.0, gt=1)
    threshold: float = Field(gt=0, le=1)
    fast_within: int | None = Field(None, gt=0, description="T must be below this many steps (a bound the text "
                                       "puts on the fast side's rate, e.g. \"within a few thousand steps\")")


class SolvedRuleFields(StrictModel):
    threshold: float = Field(0.99, gt=0, le=1)
    k: int = Field(2, ge=1)
    m: int = Field(3, ge=1)


class MinWidthGrowth(ConditionBase):
    """For each member, the smallest solving width at the member's largest length exceeds (``grows``) or does not
    exceed (not ``grows``) the one at its smallest length."""

    kind: Literal["min_width_growth"]
    group: Group
    per: list[str] = Field(default_factory=lambda: ["model.name", "task.name"])
    grows: bool
    solved: SolvedRuleFields = Field(default_factory=SolvedRuleFields)


class MinWidthOrder(ConditionBase):
    """Per task, ``a``'s smallest solving width is at most ``b``'s at every length and below it at one or more
    (a tie at every length is not an order: it fails)."""

    kind: Literal["min_width_order"]
    a: Group
    b: Group
    solved: SolvedRuleFields = Field(default_factory=SolvedRuleFields)


class FlopsOrder(ConditionBase):
    """At each (task, length), the fewest forward FLOPs (Table 2 convention) among solving widths rise strictly
    along ``order`` (model names)."""

    kind: Literal["flops_order"]
    group: Group = Field(default_factory=dict)
    order: list[str] = Field(min_length=2)
    solved: SolvedRuleFields = Field(default_factory=SolvedRuleFields)


class FixedWidth(ConditionBase):
    """Per member, one grid width of at most ``max_width`` solves every length."""

    kind: Literal["fixed_width"]
    group: Group
    per: list[str] = Field(default_factory=lambda: ["model.name", "task.name"])
    max_width: int = Field(ge=1)
    solved: SolvedRuleFields = Field(default_factory=SolvedRuleFields)


class GrowthOrder(ConditionBase):
    """Per model, the smallest solving width grows by a larger factor (largest over smallest length) on task
    ``b`` than on task ``a``."""

    kind: Literal["growth_order"]
    group: Group = Field(default_factory=dict)
    a: str = Field(description="the task where growth is smaller")
    b: str = Field(description="the task where growth is larger")
    solved: SolvedRuleFields = Field(default_factory=SolvedRuleFields)


class LogGrowth(ConditionBase):
    """Theory series: ``group``'s value grows as O(log N): value / log2(N) at every N is at most ``slack`` times
    its value at the smallest N, over lengths spanning at least ``min_span`` (a shorter span cannot tell log N from
    a small power of N)."""

    kind: Literal["log_growth"]
    group: str
    slack: float = Field(2.0, ge=1)
    min_span: float = Field(16.0, ge=2)


Condition = Annotated[Union[Compare, Level, Rate, MinWidthGrowth, MinWidthOrder, FlopsOrder, FixedWidth, GrowthOrder,
                            LogGrowth], Field(discriminator="kind")]


class ScaleSpecs(StrictModel):
    specs: list[SpecRef] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict, description="theory claims: the check's parameters")
    not_run: str | None = Field(None, min_length=1, description="why a sweep claim is not run at this scale (what "
                                                                "deciding it would take); its verdict there is "
                                                                "inconclusive with this reason")


class Claim(StrictModel):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    paper: Literal["bhattamishra2024", "yang2024", "deng2023"]
    where: str = Field(min_length=1, description="section, figure, table or line of the paper")
    text: str = Field(min_length=1)
    beyond_paper: bool = Field(False, description="a question sepbench adds, not a claim the paper makes: shown as "
                                                  "exploratory, outside the reproduced / not reproduced tally")
    ranges_lost: bool = Field(False, description="a figure of the paper whose swept values its text lost: the sweep "
                                                 "is sepbench's, so the claim maps where the paper's result holds "
                                                 "and is shown as exploratory, outside the tally")
    check: str | None = Field(None, description="theory claims: the function that measures the evidence")
    min_seeds: int = Field(3, ge=1)
    quick: ScaleSpecs
    cpu: ScaleSpecs | None = Field(None, description="a theory claim without it uses its quick params")
    paper_scale: ScaleSpecs = Field(alias="paper_scale")
    conditions: list[Condition] = Field(min_length=1)
    note: str = ""

    @model_validator(mode="after")
    def _source(self) -> "Claim":
        for scale in SCALES:
            plan = self.at(scale)
            if self.check is None and not plan.specs and plan.not_run is None:
                raise ValueError(f"claim {self.id}: a sweep claim needs specs (or not_run: why) at the {scale} scale")
            if plan.specs and plan.not_run is not None:
                raise ValueError(f"claim {self.id}: the {scale} scale has specs and not_run; give one")
            if self.check is not None and plan.specs:
                raise ValueError(f"claim {self.id}: a theory claim (check {self.check}) takes params, not specs")
        if self.check is None and self.cpu is None:
            raise ValueError(f"claim {self.id}: a sweep claim needs specs at the cpu scale")
        for condition in self.conditions:
            _every_scale(condition.lengths, self.id)
            for name in ("a", "b", "group", "fast", "slow"):
                value = getattr(condition, name, None)
                for selector in value if isinstance(value, list) else [value]:
                    for selected in (selector.values() if isinstance(selector, dict) else []):
                        _every_scale(selected, self.id)
        return self

    @property
    def kind(self) -> str:
        return "theory" if self.check else "sweep"

    @property
    def exploratory(self) -> bool:
        return self.exploratory_reason is not None

    @property
    def exploratory_reason(self) -> str | None:
        """Why the claim stays outside the tally, or None for a claim of the paper judged at the paper's values."""
        if self.beyond_paper:
            return "a question sepbench adds, not the paper's claim"
        if self.ranges_lost:
            return "the paper's swept values are lost, these are sepbench's: it maps where the result holds"
        return None

    @property
    def place(self) -> str:
        """``where`` without its quotation: "sec. 6, L196"."""
        return self.where.split(": \"", 1)[0].split(":", 1)[0] if "\"" in self.where else self.where

    def at(self, scale: str) -> ScaleSpecs:
        if scale not in SCALES:
            raise ConfigError(f"unknown scale '{scale}'; allowed: {', '.join(SCALES)}")
        if scale == "cpu":
            return self.cpu if self.cpu is not None else self.quick
        return self.quick if scale == "quick" else self.paper_scale

    def sweep_specs(self, scale: str, overrides: dict[str, Any] | None = None) -> list[SweepSpec]:
        return [ref.load(overrides) for ref in self.at(scale).specs]

    def configs(self, scale: str, overrides: dict[str, Any] | None = None) -> list[RunConfig]:
        """Every run of the claim at ``scale`` (duplicates across its specs once), in a stable order; none where the
        claim is not run at ``scale``."""
        found: dict[str, RunConfig] = {}
        for ref in self.at(scale).specs:
            for cfg in ref.runs(scale, overrides):
                found.setdefault(cfg.config_hash(), cfg)
        return list(found.values())


def _every_scale(value: Any, claim_id: str) -> None:
    """A per-scale value names every scale, so that no scale silently falls back to 'every length'."""
    if isinstance(value, dict) and value and set(value) <= set(SCALES) and set(value) != set(SCALES):
        missing = ", ".join(s for s in SCALES if s not in value)
        raise ValueError(f"claim {claim_id}: a per-scale value {value} lacks the scale(s) {missing}")


def _load_paper(paper: str) -> list[Claim]:
    path = configs.path("claims", f"{paper}.yaml")
    data = load_yaml(path)
    claims = []
    for i, entry in enumerate(data.get("claims", [])):
        try:
            claims.append(Claim.model_validate({**entry, "paper": paper}))
        except ValidationError as err:
            raise ConfigError(f"claims catalogue {path}, claim {entry.get('id', i)}: "
                              f"{describe_validation_error(err)}") from None
    return claims


@lru_cache(maxsize=1)
def catalogue() -> tuple[Claim, ...]:
    """Every claim of the three papers, in catalogue order."""
    claims = [claim for paper in PAPERS for claim in _load_paper(paper)]
    ids = [c.id for c in claims]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ConfigError(f"claims catalogue: ids used twice: {', '.join(repeated)}")
    return tuple(claims)


def select(paper: str | None = None, claim_ids: str | Sequence[str] | None = None) -> list[Claim]:
    """The claims of ``paper`` (all papers if None), or only those named in ``claim_ids`` (catalogue order); a bad
    name is a one-line ConfigError."""
    claims = list(catalogue())
    if paper is not None and paper not in PAPERS:
        raise ConfigError(f"unknown paper '{paper}'; allowed: {', '.join(PAPERS)}")
    if paper is not None:
        claims = [c for c in claims if c.paper == paper]
    if claim_ids:
        wanted = [claim_ids] if isinstance(claim_ids, str) else list(claim_ids)
        known = {c.id for c in claims}
        for claim_id in wanted:
            if claim_id not in known:
                where = f" of {paper}" if paper else ""
                raise ConfigError(f"unknown claim '{claim_id}'{where}; allowed: {', '.join(c.id for c in claims)}")
        return [c for c in claims if c.id in wanted]
    return claims
