"""RunConfig = TaskConfig + ModelConfig + TrainConfig + seed + device; strict, hashable, loadable."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sepbench.registry import MODELS, TASKS


class ConfigError(ValueError):
    """Invalid configuration; the message is one line naming the problem and what is allowed."""


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown fields and non-finite numbers (``--lr inf`` is bad input)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, frozen=False, allow_inf_nan=False)


class NoOptions(StrictModel):
    """For tasks and models that take no options."""


class TaskConfig(StrictModel):
    name: str = "index_lookup"
    length: int = Field(20, ge=2, le=1_000_000, description="task size N: longest training length, evaluation length")
    eval_lengths: list[int] | None = Field(None, description="extra evaluation lengths (default: only N)")
    options: dict[str, Any] = Field(default_factory=dict, description="task-specific options")

    @model_validator(mode="after")
    def _resolve(self) -> "TaskConfig":
        task_cls = TASKS.get(self.name)
        self.options = _validate_options(task_cls.Options, self.options, f"task '{self.name}' options")
        task_cls(self.length, self.options)  # a task refuses sizes its options cannot serve
        if self.eval_lengths is not None:
            bad = [n for n in self.eval_lengths if n < 2]
            if bad:
                raise ValueError(f"eval_lengths must be >= 2, got {bad}")
        return self


class ModelConfig(StrictModel):
    name: str = "transformer"
    layers: int = Field(1, ge=1, le=64)
    width: int = Field(64, ge=1, le=65536)
    heads: int = Field(4, ge=1, le=256)
    positions: Literal["learned", "sinusoidal", "none"] | None = Field(None, description="default: the model's own")
    mlp: bool | None = Field(None, description="an MLP after each mixer; default: the model's own")
    mlp_ratio: int = Field(4, ge=1, le=16)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    embed_std: float = Field(0.02, gt=0.0, le=10.0, description="std of the token embedding's normal init")
    options: dict[str, Any] = Field(default_factory=dict, description="mixer-specific options")

    @model_validator(mode="after")
    def _resolve(self) -> "ModelConfig":
        mixer_cls = MODELS.get(self.name)
        if self.positions is None:
            self.positions = mixer_cls.default_positions
        if self.mlp is None:
            self.mlp = mixer_cls.default_mlp
        if mixer_cls.uses_heads and self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        self.options = _validate_options(mixer_cls.Options, self.options, f"model '{self.name}' options")
        return self


MOST = 1_000_000_000
"""The largest count a train field takes (steps, batch and sample sizes): past it no run fits any machine."""


FLOAT32_MAX = 3.4028234663852886e38
"""The largest learning rate and weight decay: an optimizer hands both to float32 arithmetic."""
Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class TrainConfig(StrictModel):
    steps: int = Field(3000, ge=1, le=MOST)
    batch_size: int = Field(64, ge=1, le=MOST)
    lr: float | None = Field(None, gt=0.0, description="default: the model's own")
    optimizer: Literal["adam", "adamw"] = "adam"
    weight_decay: float = Field(0.0, ge=0.0)
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="Adam's moment decays, each in [0, 1)")
    warmup_steps: int = Field(100, ge=0, le=MOST)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    grad_clip: float | None = Field(1.0, gt=0.0)
    data: Literal["fresh", "fixed"] = Field("fresh", description="a fresh batch every step, or a fixed training set")
    train_size: int = Field(10_000, ge=1, le=MOST, description="examples in the fixed training set")
    eval_every: int = Field(100, ge=1, le=MOST)
    eval_samples: int = Field(5000, ge=1, le=MOST)
    eval_batch_size: int = Field(1000, ge=1, le=MOST,
                                 description="most rows per evaluation chunk; fewer where memory says")
    eval_budget: Literal["full", "adaptive"] = Field(
        "adaptive", description="adaptive: stop an evaluation once its interval decides the threshold")
    threshold: float = Field(0.99, gt=0.0, le=1.0)
    early_stop: bool = True
    checkpoint_every: float = Field(300.0, ge=0.0, description="seconds of training between checkpoints; 0: none")
    tensorboard: str | None = Field(None, description="folder for TensorBoard scalars [default: $SEPBENCH_TENSORBOARD]")

    @field_validator("lr", "weight_decay")
    @classmethod
    def _fits_float32(cls, value: float | None) -> float | None:
        if value is not None and value > FLOAT32_MAX:
            raise ValueError(f"should be at most {FLOAT32_MAX:.4g}, the largest float32")
        return value


WATCH_FIELDS = {"checkpoint_every", "tensorboard"}
"""Train fields that say how a run is kept and watched, never what it computes: no hash of a run or cell sees them."""
PATH_OPTIONS = {"mamba": {"linear"}}
"""Model options that choose only how the same products are computed (each result's ``compute_paths`` records the
choice): no hash sees them, so runs stored before such an option existed keep their names. Mamba's older ``scan``
and ``kernel`` stay in the hash, which names every Mamba run stored since they came."""


DEVICES = "auto, cpu, cuda, cuda:N or mps"


def is_device_name(name: str) -> bool:
    """Whether ``name`` is a device a run may ask for (``DEVICES``), present on this machine or not."""
    return re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", name) is not None


class RunConfig(StrictModel):
    task: TaskConfig = Field(default_factory=TaskConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    seed: int = Field(0, ge=0, lt=2**31)
    device: str = "auto"

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        if not is_device_name(device):
            raise ValueError(f"allowed: {DEVICES}")
        return device

    @model_validator(mode="after")
    def _resolve(self) -> "RunConfig":
        if self.train.lr is None:
            self.train.lr = MODELS.get(self.model.name).default_lr
        return self

    def identity(self, *without: str) -> dict[str, Any]:
        """The fields that decide the run's result, less the top-level fields ``without``, as JSON data."""
        data = self.model_dump(mode="json", exclude={**dict.fromkeys(without, True), "train": WATCH_FIELDS})
        paths = PATH_OPTIONS.get(self.model.name, set())
        data["model"]["options"] = {k: v for k, v in data["model"]["options"].items() if k not in paths}
        return data

    def cell_hash(self) -> str:
        """Names the seeds of one configuration: everything but the seed, the device and the ``WATCH_FIELDS``."""
        payload = json.dumps(self.identity("seed", "device"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def config_hash(self) -> str:
        """Names the run: everything but the device and the ``WATCH_FIELDS``, canonically serialised."""
        payload = json.dumps(self.identity("device"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def build(cls, data: dict[str, Any]) -> "RunConfig":
        """Validate a nested dict; any problem becomes a one-line ConfigError."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise ConfigError(describe_validation_error(err)) from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> "RunConfig":
        return cls.build(load_yaml(path))


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a mapping naming one key twice, which plain YAML reads as the last one silently.

    Each mapping is checked as written, before PyYAML flattens its ``<<:`` merges into it (keys merged in may be
    overridden), whether it is reached as itself or through a merge.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._refuse_repeated_keys(node)
        super().flatten_mapping(node)

    def _refuse_repeated_keys(self, node: yaml.MappingNode) -> None:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            try:
                earlier = first.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # an unhashable key: the base loader names that problem
            if earlier is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} repeats the key at line {earlier.line + 1}; give each key once",
                    key_node.start_mark)


def load_yaml(path: str | Path, holds: str = "sections (task, model, train, seed, device)") -> dict[str, Any]:
    """Read a YAML mapping of ``holds``, with a one-line ConfigError for a missing or malformed file."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder; give a YAML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text file; give a YAML file") from None
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of {holds}")
    return data


SECTIONS: dict[str, type[StrictModel]] = {"task": TaskConfig, "model": ModelConfig, "train": TrainConfig}


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (``train.lr``) in a nested dict; a bare leaf name is found in its section."""
    data = json.loads(json.dumps(data))
    for key, value in overrides.items():
        path = qualify_key(key)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"cannot set '{key}': '{part}' is not a section")
            node = child
        node[path[-1]] = value
    return data


def qualify_key(key: str) -> list[str]:
    """Split a --set key into a path, checking it names a known field."""
    parts = key.split(".")
    top = list(RunConfig.model_fields)
    if len(parts) == 1:
        if key in top:
            return parts
        owners = [name for name, section in SECTIONS.items() if key in section.model_fields]
        if len(owners) == 1:
            return [owners[0], key]
        if len(owners) > 1:
            raise ConfigError(f"ambiguous key '{key}': say which section ({', '.join(o + '.' + key for o in owners)})")
        leaves = sorted({f for s in SECTIONS.values() for f in s.model_fields} | set(top) - set(SECTIONS))
        raise ConfigError(f"unknown key '{key}'; allowed: {', '.join(leaves)} (or section.field)")
    section = SECTIONS.get(parts[0])
    if section is None:
        raise ConfigError(f"unknown section '{parts[0]}' in '{key}'; allowed: {', '.join(SECTIONS)}")
    if parts[1] not in section.model_fields:
        raise ConfigError(f"unknown key '{key}'; allowed in {parts[0]}: {', '.join(section.model_fields)}")
    if len(parts) > 2 and parts[1] != "options":
        raise ConfigError(f"'{key}' is too deep: only {parts[0]}.options takes sub-keys")
    return parts


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings; values are read as YAML scalars (1, 0.5, true, [1, 2])."""
    result: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got '{item}'")
        try:
            result[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            result[key.strip()] = raw
    return result


def describe_validation_error(err: ValidationError) -> str:
    """The first error of a pydantic ValidationError as one line."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        parent = _model_at(err.title, first["loc"][:-1])
        allowed = f"; allowed: {', '.join(parent.model_fields)}" if parent else ""
        return f"unknown field '{loc}'{allowed}"
    if first["type"] == "literal_error":
        return f"{loc}: {msg}"
    if "input" in first and not isinstance(first["input"], dict) and loc:
        return f"{loc} = {first['input']!r}: {msg}"
    return f"{loc}: {msg}" if loc else msg


def _model_at(title: str, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = RunConfig if title == "RunConfig" else None
    for part in loc:
        if model is None:
            return None
        field = model.model_fields.get(str(part))
        ann = field.annotation if field else None
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return model


def _validate_options(options_model: type[BaseModel], raw: dict[str, Any] | BaseModel, what: str) -> dict[str, Any]:
    if isinstance(raw, BaseModel):
        raw = raw.model_dump()
    unknown = set(raw) - set(options_model.model_fields)
    if unknown:
        allowed = ", ".join(options_model.model_fields) or "none"
        raise ValueError(f"unknown {what} {', '.join(sorted(unknown))}; allowed: {allowed}")
    try:
        return options_model.model_validate(raw).model_dump(mode="json")
    except ValidationError as err:
        raise ValueError(f"{what}: {describe_validation_error(err)}") from None
