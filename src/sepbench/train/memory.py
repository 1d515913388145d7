"""Memory: what a run needs (estimated before anything is allocated), what the device has free, and how many
rows one evaluation chunk may take."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from sepbench.config import RunConfig
from sepbench.models import SequenceModel

FLOAT_BYTES = 4
TOKEN_BYTES = 8 + 8 + 1
"""An example position in a Batch: int64 input, int64 target, bool mask."""
OPTIMIZER_COPIES = 4
"""Weights, gradients and Adam's two moments."""
SAVED_FLOATS_PER_UNIT = 160
"""Upper bound on the floats saved for backward per (example, token, width unit, layer): the largest the zoo
measured on the meta device was about 80 (the LSTM's gates and cell states), so this overestimates."""
CPU_BUDGET_BYTES = 256 * 2**20
"""Evaluation working memory on a CPU: small enough to stay clear of swapping, large enough for full BLAS speed."""
CUDA_BUDGET_SHARE = 0.25
"""Share of the accelerator's free memory one evaluation chunk may take."""
EXACT_ABOVE = 0.25
"""When the quick upper bound exceeds this share of free memory, the activations are traced instead."""
TRACE_TOKENS = 1024
"""Longest sequence traced on the meta device; longer ones are scaled linearly (a recurrent step is a Python
loop even there, and every mixer's saved activations grow linearly with length on its training path)."""


class MemoryRefused(ValueError):
    """The run cannot fit; the message is one line with the estimate and what the device has free."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one run needs at its peak, by what holds them; ``exact``: activations measured, not bounded."""

    parameters: int
    weights_and_optimizer: int
    activations: int
    evaluation: int
    data: int
    exact: bool

    @property
    def total(self) -> int:
        return self.weights_and_optimizer + max(self.activations, self.evaluation) + self.data

    def describe(self) -> str:
        parts = {"weights and optimiser": self.weights_and_optimizer, "activations": self.activations,
                 "evaluation": self.evaluation, "data": self.data}
        return ", ".join(f"{name} {gib(value)}" for name, value in parts.items())


def gib(count: int) -> str:
    return f"{count / 2**30:.3g} GiB"


def memory_budget(device: torch.device) -> int:
    """Bytes one evaluation chunk may use on ``device``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * CUDA_BUDGET_SHARE)
    return CPU_BUDGET_BYTES


def row_bytes(model: SequenceModel, seq_len: int, logits_per_row: int) -> int:
    """Bytes one example takes in a no-grad forward: its widest block's activations (``activation_floats``)
    and its logits at ``logits_per_row`` positions."""
    element = next(model.parameters()).element_size()
    activations = max(block.mixer.activation_floats(seq_len) for block in model.blocks)
    return element * (activations + logits_per_row * model.head.out_features)


def chunk_rows(model: SequenceModel, seq_len: int, logits_per_row: int, budget: int, cap: int) -> int:
    """Rows per evaluation chunk: as many as ``budget`` bytes hold, at most ``cap``, at least one."""
    return max(1, min(cap, budget // row_bytes(model, seq_len, logits_per_row)))


def _model_on_meta(config: RunConfig, vocab_size: int, max_len: int) -> SequenceModel:
    return _meta_model(config.model.model_dump_json(), vocab_size, max_len)


@lru_cache(maxsize=32)
def _meta_model(model_json: str, vocab_size: int, max_len: int) -> SequenceModel:
    """The model's shapes without storage; built once per shape (a sweep's seeds and learning rates share it)."""
    from sepbench.config import ModelConfig
    from sepbench.models import build_model

    with torch.device("meta"):
        return build_model(ModelConfig.model_validate_json(model_json), vocab_size, max_len)


def _saved_bytes(model: torch.nn.Module, batch: int, length: int, vocab_size: int) -> int:
    """Bytes autograd saves for backward in one training step, traced on the meta device (nothing allocated)."""
    traced = min(length, TRACE_TOKENS)
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += tensor.numel() * tensor.element_size()
        return tensor

    inputs = torch.zeros(batch, traced, dtype=torch.long, device="meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(inputs)
    return saved * length // traced + 2 * batch * length * vocab_size * FLOAT_BYTES


def estimate_memory(config: RunConfig, free: int | None = None) -> MemoryEstimate:
    """Peak bytes of ``config``'s run: weights, Adam, one step's activations or one evaluation chunk, and data.

    A quick upper bound first; where it comes within ``EXACT_ABOVE`` of ``free``, the activations are traced
    on the meta device instead (the model's forward at up to ``TRACE_TOKENS`` tokens, the loss's logits added).
    """
    from sepbench.tasks import build_task

    task = build_task(config.task.name, config.task.length, config.task.options)
    lengths = {config.task.length, *(config.task.eval_lengths or [])}
    max_len = max(task.max_seq_len(n) for n in lengths)
    tokens = task.max_seq_len()
    train = config.train
    model = _model_on_meta(config, task.vocab_size, max_len)
    parameters = sum(p.numel() for p in model.parameters())
    width, layers = config.model.width, config.model.layers
    activations = train.batch_size * tokens * (SAVED_FLOATS_PER_UNIT * width * layers + 2 * task.vocab_size)
    activations *= FLOAT_BYTES
    rows = chunk_rows(model, max_len, max_len, CPU_BUDGET_BYTES, min(train.eval_batch_size, train.eval_samples))
    evaluation = rows * row_bytes(model, max_len, max_len)
    data = sum(train.eval_samples * task.max_seq_len(n) for n in lengths) * TOKEN_BYTES
    if train.data == "fixed":
        data += train.train_size * tokens * TOKEN_BYTES
    estimate = MemoryEstimate(parameters, OPTIMIZER_COPIES * FLOAT_BYTES * parameters, activations, evaluation, data,
                              exact=False)
    if free is not None and estimate.total > EXACT_ABOVE * free:
        try:
            exact = _saved_bytes(model, train.batch_size, tokens, task.vocab_size)
        except (NotImplementedError, RuntimeError):
            return estimate
        estimate = MemoryEstimate(parameters, estimate.weights_and_optimizer, exact, evaluation, data, exact=True)
    return estimate


def free_memory(device: torch.device) -> int | None:
    """Bytes the device can still give: CUDA's free memory, or the host's MemAvailable (None where unknown)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(config: RunConfig, device: torch.device) -> MemoryEstimate | None:
    """Raise MemoryRefused when the run's estimate exceeds what ``device`` has free (None: nothing to compare)."""
    free = free_memory(device)
    if free is None:
        return None
    estimate = estimate_memory(config, free)
    if estimate.total > free:
        raise MemoryRefused(
            f"this run needs about {gib(estimate.total)} ({estimate.describe()}) but {device.type} has "
            f"{gib(free)} free; lower model.width, task.length, train.batch_size, train.eval_samples or "
            f"train.eval_batch_size")
    return estimate


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (host or device), which a run records instead of crashing."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
