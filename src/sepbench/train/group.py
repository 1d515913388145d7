"""Stacked runs: K runs that differ only in seed and learning rate, trained as one program over a model axis.

Each member keeps everything it would have alone: its own initialisation (its model is built under its own
seed), its own data stream, Adam state, learning rate, per-member gradient clipping, early stopping and
divergence. The forward is ``torch.func.vmap`` of ``functional_call`` over the stacked parameters; mixers
without a batching rule (LSTM, Mamba's scan) run member by member inside that forward. Each member is stored as
its own run under its own config hash, with the metrics the same config reaches alone up to float round-off.
"""
from __future__ import annotations

import copy
import hashlib
import json
import time
import types
import warnings
from dataclasses import dataclass, field
from contextlib import nullcontext
from datetime import datetime, timezone
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from sepbench.config import RunConfig
from sepbench.models import SequenceModel
from sepbench.models.accounting import count_parameters
from sepbench.models.vmap_only import VmapOnlyFunction
from sepbench.tasks import Batch
from sepbench.train import checkpoint, stopping, subnormals, watch
from sepbench.train.assessment import Assessment
from sepbench.train.checkpoint import Checkpoint
from sepbench.train.environment import code_version, git_commit, package_version
from sepbench.train.keeping import Keeping
from sepbench.train.loop import Trainer, lr_factor
from sepbench.train.result import RunResult

STACKED_MIXERS = {"transformer", "sparse_transformer", "linear_transformer", "retnet", "dss", "lstm", "mamba"}
"""Mixers trained stacked; any other trains alone, one member after another. Those without a batching rule on
the device (``Mixer.has_batching_rule``) run one member at a time inside the stacked forward."""


def group_key(config: RunConfig) -> str:
    """Names the group a run can join: its config without seed and learning rate."""
    data = config.identity("seed", "device")
    data["train"].pop("lr")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def stackable(config: RunConfig) -> bool:
    """Whether a run of this config trains stacked to the solo result (deterministic forward, known mixer)."""
    return config.model.name in STACKED_MIXERS and config.model.dropout == 0.0


class _PerMember(VmapOnlyFunction):
    """Applies ``fn`` to each member's slice in turn under vmap, recorded by autograd as ordinary ops."""

    @staticmethod
    def forward(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return fn(*tensors)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, fn: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> tuple[torch.Tensor, int]:
        dims = in_dims[1:]
        outs = [fn(*(t if d is None else t.select(d, k) for t, d in zip(tensors, dims))) for k in range(info.batch_size)]
        return torch.stack(outs), 0


def _run_per_member(mixer: nn.Module) -> None:
    """Make ``mixer`` (in the template model only) run each member's slice separately under vmap."""
    inner = copy.deepcopy(mixer)
    names = [name for name, _ in mixer.named_parameters()]

    def one(x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        return functional_call(inner, dict(zip(names, params)), (x,))

    def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return _PerMember.apply(one, x, *(p for _, p in self.named_parameters()))

    mixer.forward = types.MethodType(forward, mixer)


def template_model(model: SequenceModel) -> SequenceModel:
    """A copy of one member's model to call functionally with every member's parameters."""
    template = copy.deepcopy(model)
    device = next(model.parameters()).device
    for block in template.blocks:
        if not block.mixer.has_batching_rule(device):
            _run_per_member(block.mixer)
    return template


def clip_per_member(grads: list[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` for each member (dim 0) separately: its global norm over all its tensors."""
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in grads], dim=1)
    total = torch.linalg.vector_norm(norms, 2, dim=1)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))


@dataclass
class StackedAdam:
    """torch.optim.Adam / AdamW (single-tensor form, eps 1e-8) over stacked tensors, a learning rate per member.

    Members step in lockstep, so the step count and bias corrections are shared; only the step size
    lr_k / (1 - beta1^t) differs, applied as one [K, 1, ...] factor in the order ``addcdiv_`` uses.
    """

    betas: tuple[float, float]
    weight_decay: float
    decoupled: bool
    eps: float = 1e-8
    step_count: int = 0
    exp_avg: list[torch.Tensor] = field(default_factory=list)
    exp_avg_sq: list[torch.Tensor] = field(default_factory=list)

    def step(self, params: list[torch.Tensor], lrs: torch.Tensor) -> None:
        """One update with learning rates ``lrs`` [K] (float64 on the CPU, already scheduled)."""
        if not self.exp_avg:
            self.exp_avg = [torch.zeros_like(p) for p in params]
            self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.step_count += 1
        beta1, beta2 = self.betas
        correction1 = 1 - beta1**self.step_count
        correction2_sqrt = (1 - beta2**self.step_count) ** 0.5
        like = {"dtype": params[0].dtype, "device": params[0].device}
        neg_step = (-(lrs / correction1)).to(**like)
        decay = (1 - lrs * self.weight_decay).to(**like)
        with torch.no_grad():
            for p, m, v in zip(params, self.exp_avg, self.exp_avg_sq):
                shape = (-1, *[1] * (p.dim() - 1))
                grad = p.grad
                if self.weight_decay and self.decoupled:
                    p.mul_(decay.view(shape))
                elif self.weight_decay:
                    grad = grad.add(p, alpha=self.weight_decay)
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (v.sqrt() / correction2_sqrt).add_(self.eps)
                p.add_(neg_step.view(shape) * m / denom)

    def keep(self, index: torch.Tensor) -> None:
        self.exp_avg = [m[index] for m in self.exp_avg]
        self.exp_avg_sq = [v[index] for v in self.exp_avg_sq]


def _pad(batches: list[Batch]) -> Batch:
    """Stack the members' batches [K, B, T], padding shorter ones at the end with unscored positions."""
    length = max(b.inputs.shape[1] for b in batches)

    def pad(t: torch.Tensor, value: Any) -> torch.Tensor:
        return F.pad(t, (0, length - t.shape[1]), value=value)

    return Batch(torch.stack([pad(b.inputs, 0) for b in batches]), torch.stack([pad(b.targets, 0) for b in batches]),
                 torch.stack([pad(b.mask, False) for b in batches]))


def next_batches(trainers: list[Trainer]) -> list[Batch]:
    """Each member's next batch, as its own ``next_batch`` gives it; fresh samples are drawn together."""
    if all(t.fresh_data() for t in trainers):
        first = trainers[0]
        return first.task.sample_train_streams(first.config.train.batch_size, [t.train_rng for t in trainers])
    return [t.next_batch() for t in trainers]


def stacked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Each member's ``masked_loss`` [K]: cross-entropy averaged over its scored positions (only those computed)."""
    ce = F.cross_entropy(logits[batch.mask], batch.targets[batch.mask], reduction="none")
    member = batch.mask.nonzero()[:, 0]
    sums = torch.zeros(len(batch.mask), dtype=ce.dtype, device=ce.device).index_add_(0, member, ce)
    return sums / batch.mask.sum((1, 2))


class _Member:
    """One run of the group: its solo Trainer (model, data streams, evaluation) and its result so far."""

    def __init__(self, config: RunConfig) -> None:
        self.trainer = Trainer(config)
        self.result = RunResult(
            config=config, config_hash=config.config_hash(), status="completed",
            parameters=count_parameters(self.trainer.model), device=str(self.trainer.device),
            compute_paths=self.trainer.compute_paths,
            version=package_version(), code_version=code_version(), git_commit=git_commit(),
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.assessment: Assessment | None = None

    def load(self, names: list[str], params: list[torch.Tensor], k: int) -> None:
        """Copy member slice ``k`` of the stacked parameters into this member's own model."""
        own = dict(self.trainer.model.named_parameters())
        with torch.no_grad():
            for name, p in zip(names, params):
                own[name].copy_(p[k])

    def finish(self, start: float) -> RunResult:
        result = self.result
        self.trainer.settle(result, self.assessment)
        result.wall_seconds = time.perf_counter() - start
        return result


def check_group(configs: list[RunConfig]) -> None:
    """Refuse a group whose runs differ in anything but seed and learning rate."""
    keys = {group_key(c) for c in configs}
    devices = {c.device for c in configs}
    if len(keys) > 1 or len(devices) > 1:
        raise ValueError("train_group needs runs that differ only in seed and train.lr; "
                         f"got {len(keys)} different configs otherwise and devices {sorted(devices)}")


def train_group(configs: list[RunConfig], on_result: Callable[[RunResult], None] | None = None,
                keeping: Keeping | None = None, discard: bool = True) -> list[RunResult]:
    """Train ``configs`` (same config but for seed and lr) together; one result per config, in order.

    ``on_result`` is called with each member's result the moment it is final (early stop, divergence, end).
    Configs that cannot be stacked (an unsupported mixer, dropout) train alone, one after another. Where
    ``keeping`` names a folder of checkpoints each member keeps its own checkpoint there; members resumed from
    different steps train as separate stacks. ``discard``: a member's checkpoint goes once ``on_result`` returns
    (it stored the result); False leaves it to the caller that stores the results later (``Keeping.stored``).
    """
    if not configs:
        return []
    check_group(configs)
    notify = on_result or (lambda result: None)
    keeping = keeping or Keeping()
    results: dict[int, RunResult] = {}

    def alone(i: int) -> None:
        results[i] = Trainer(configs[i], keeping).run(progress=False, delete_checkpoint=False)
        notify(results[i])  # stores it, where a sweep called: only then does its checkpoint go
        if discard:
            keeping.stored(results[i])

    if not stackable(configs[0]):
        for i in range(len(configs)):
            alone(i)
        return [results[i] for i in range(len(configs))]
    files = [checkpoint.open_checkpoint(keeping.checkpoints, c, checkpoint.MEMBER) for c in configs]
    states = [f.load(keep_other_kind=True) if f is not None else None for f in files]
    # a solo run's checkpoint (from a group of one, or a solo run) is left in place: that run resumes alone
    solo = [i for i, (f, state) in enumerate(zip(files, states)) if f is not None and state is None and f.path.exists()]
    if len(configs) == 1 and states[0] is None:
        solo = [0]
    for i in solo:
        alone(i)
    by_step: dict[int, list[int]] = {}
    for i, state in enumerate(states):
        if i not in solo:
            by_step.setdefault(state["step"] if state is not None else 0, []).append(i)
    for part in by_step.values():
        stack = _GroupRun([configs[i] for i in part], notify, [files[i] for i in part], [states[i] for i in part],
                          keeping, discard)
        results.update(zip(part, stack.run()))
    return [results[i] for i in range(len(configs))]


class _GroupRun:
    def __init__(self, configs: list[RunConfig], notify: Callable[[RunResult], None],
                 files: list[Checkpoint | None], states: list[dict[str, Any] | None], keeping: Keeping,
                 discard: bool = True) -> None:
        self.members = [_Member(c) for c in configs]
        self.discard = discard
        for member, state in zip(self.members, states):
            if state is not None:
                checkpoint.resume_member(member, state)
        self.files = files
        self.watches = [watch.open_watch(c, keeping.store) for c in configs]
        self.notify = notify
        self.finished: dict[int, RunResult] = {}
        self.active = list(range(len(configs)))  # position in the stack -> index into members
        models = [m.trainer.model for m in self.members]
        self.device = self.members[0].trainer.device
        self.template = template_model(models[0])
        params, buffers = stack_module_state(models)
        self.names = list(params)
        self.params = [params[n] for n in self.names]
        self.buffers = buffers
        cfg = configs[0].train
        self.optimizer = StackedAdam(cfg.betas, cfg.weight_decay, decoupled=cfg.optimizer == "adamw")
        self.base_lrs = torch.tensor([c.train.lr for c in configs], dtype=torch.float64)
        self.forward = vmap(self._call)
        self.first_step, self.offset = (states[0]["step"] + 1, states[0]["seconds"]) if states[0] else (1, 0.0)
        if states[0] is not None:
            checkpoint.resume_moments(self, states)
        self.regrouped = False
        """whether members left the stack since the last checkpoint"""

    def _call(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():  # the per-member fallback for fused attention is known and measured
            warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet "
                                    "implemented the batching rule", category=UserWarning)
            return functional_call(self.template, (params, buffers), (inputs,))

    def _keep(self, stay: list[int]) -> None:
        """Drop every member not at the stack positions ``stay``; the others' tensors are sliced, not recomputed."""
        index = torch.tensor(stay, device=self.device)
        kept = []
        for p in self.params:
            q = p.detach()[index].requires_grad_(True)
            if p.grad is not None:
                q.grad = p.grad[index]
            kept.append(q)
        self.params = kept
        self.buffers = {n: b[index] for n, b in self.buffers.items()}
        self.optimizer.keep(index)
        self.base_lrs = self.base_lrs[index.cpu()]
        self.active = [self.active[i] for i in stay]
        self.regrouped = True

    def _finish(self, position: int, start: float) -> None:
        member_index = self.active[position]
        member = self.members[member_index]
        member.load(self.names, self.params, position)
        self.finished[member_index] = result = member.finish(start)
        if self.watches[member_index] is not None:
            self.watches[member_index].close()
        self.notify(result)  # stores it, where a sweep called: only then does its checkpoint go
        if self.discard and self.files[member_index] is not None:
            self.files[member_index].delete()

    def _drop(self, positions: list[int], start: float) -> None:
        for position in positions:
            self._finish(position, start)
        self._keep([i for i in range(len(self.active)) if i not in positions])

    def _checkpoint(self, step: int, seconds: float) -> None:
        """After ``step`` steps: save every active member's checkpoint when due or when the stack changed (so a
        resumed stack holds the same members); after a stop signal, save and raise RunInterrupted."""
        first = self.files[self.active[0]]
        if first is None:
            return
        if first.due(seconds, step) or (self.regrouped and step > first.saved_step):
            for position, index in enumerate(self.active):
                self.files[index].save(checkpoint.member_state(self, position), step, seconds)
            self.regrouped = False
        if stopping.stop_requested():
            raise stopping.RunInterrupted(f"a group of {len(self.active)} runs stopped at step {step}")

    def run(self) -> list[RunResult]:
        cfg = self.members[0].trainer.config.train
        start = time.perf_counter() - self.offset
        for model in (self.template, *(m.trainer.model for m in self.members)):
            model.train()
        with stopping.training() if any(self.files) else nullcontext(), subnormals.flushed(self.device):
            self._train(cfg, start)
        for position in range(len(self.active)):
            self._finish(position, start)
        return [self.finished[i] for i in range(len(self.members))]

    def _train(self, cfg: Any, start: float) -> None:
        for step in range(self.first_step, cfg.steps + 1):
            if not self.active:
                break
            self._checkpoint(step - 1, time.perf_counter() - start)
            batch = _pad(next_batches([self.members[i].trainer for i in self.active])).to(self.device)
            params = dict(zip(self.names, self.params))
            losses = stacked_loss(self.forward(params, self.buffers, batch.inputs), batch)
            finite = torch.isfinite(losses)
            bad = [i for i, ok in enumerate(finite.tolist()) if not ok]
            for i in bad:
                member = self.members[self.active[i]]
                member.result.status, member.result.error = "diverged", f"non-finite loss at step {step}"
            if len(bad) == len(self.active):
                self._drop(bad, start)
                break
            for p in self.params:
                p.grad = None
            losses[finite].sum().backward()
            if bad:
                self._drop(bad, start)
            grads = [p.grad for p in self.params]
            if cfg.grad_clip is not None:
                clip_per_member(grads, cfg.grad_clip)
            self.optimizer.step(self.params, self.base_lrs * lr_factor(step - 1, cfg))
            for i in self.active:
                self.members[i].result.steps = step
            if step % cfg.eval_every and step != cfg.steps:
                continue
            self._evaluate(step, start, cfg)

    def _evaluate(self, step: int, start: float, cfg: Any) -> None:
        """Each member's solo evaluation on its own model; members at the threshold stop early."""
        solved = []
        for position, index in enumerate(self.active):
            member = self.members[index]
            member.load(self.names, self.params, position)
            member.assessment = member.trainer.assess()
            seconds = time.perf_counter() - start
            result = member.result
            point = member.assessment.point(step, seconds)
            result.curve.append(point)
            if self.watches[index] is not None:
                self.watches[index].point(result, point, float(self.base_lrs[position]) * lr_factor(step, cfg))
            if point.accuracy >= cfg.threshold and result.steps_to_threshold is None:
                result.steps_to_threshold, result.seconds_to_threshold = step, seconds
                if cfg.early_stop:
                    solved.append(position)
        if solved:
            self._drop(solved, start)
