"""train(RunConfig) -> RunResult: the paper protocol of a fresh batch per step, with early stopping."""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from sepbench.config import RunConfig, TrainConfig
from sepbench.models import SequenceModel, build_model
from sepbench.models.accounting import count_parameters, measure_state_size
from sepbench.tasks import Batch, Task, build_task
from sepbench.train.decode import evaluate_by_generation
from sepbench.train.environment import data_rng, git_commit, package_version, resolve_device, seed_everything
from sepbench.train.result import EvalPoint, RunResult

TRAIN_STREAM, EVAL_STREAM = 0, 1


def masked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Cross-entropy over the scored positions only."""
    return F.cross_entropy(logits[batch.mask], batch.targets[batch.mask])


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then constant, linear or cosine decay to zero at ``cfg.steps``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    if cfg.schedule == "linear":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def evaluate(model: SequenceModel, task: Task, batch: Batch, chunk: int, device: torch.device) -> tuple[float, float]:
    """Teacher-forced (loss, accuracy) over ``batch``; an example counts only if every scored token is right."""
    was_training = model.training
    model.eval()
    loss_sum, correct, scored = 0.0, 0, 0
    for start in range(0, len(batch), chunk):
        part = batch.slice(start, start + chunk).to(device)
        logits = model(part.inputs)
        loss_sum += float(F.cross_entropy(logits[part.mask], part.targets[part.mask], reduction="sum"))
        scored += int(part.mask.sum())
        correct += int(task.correct(logits, part).sum())
    model.train(was_training)
    return loss_sum / max(1, scored), correct / len(batch)


class Trainer:
    """Holds one run's task, model and data; ``run`` trains and returns the result."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        seed_everything(config.seed)
        self.task = build_task(config.task.name, config.task.length, config.task.options)
        self.lengths = [config.task.length] + [n for n in config.task.eval_lengths or [] if n != config.task.length]
        max_len = max(self.task.max_seq_len(n) for n in self.lengths)
        self.model = build_model(config.model, self.task.vocab_size, max_len).to(self.device)
        self.optimizer = make_optimizer(self.model, config.train)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, config.train))
        self.train_rng = data_rng(config.seed, TRAIN_STREAM)
        eval_rng = data_rng(config.seed, EVAL_STREAM)
        self.eval_sets = {n: self.task.sample_eval(config.train.eval_samples, eval_rng, n) for n in self.lengths}
        self.fixed = None
        if config.train.data == "fixed" and self.task.deduplicated_split:
            self.fixed, self.eval_sets[config.task.length] = self.task.sample_split(
                config.train.train_size, config.train.eval_samples, self.train_rng)
        elif config.train.data == "fixed":
            self.fixed = self.task.sample_train(config.train.train_size, self.train_rng)

    def next_batch(self) -> Batch:
        size = self.config.train.batch_size
        if self.fixed is None:
            return self.task.sample_train(size, self.train_rng)
        rows = torch.from_numpy(self.train_rng.integers(0, len(self.fixed), size=size))
        mask = self.fixed.mask[rows]
        used = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else mask.shape[1]
        return Batch(self.fixed.inputs[rows, :used], self.fixed.targets[rows, :used], mask[:, :used])

    def evaluate(self) -> dict[str, float]:
        chunk = self.config.train.eval_batch_size
        metrics: dict[str, float] = {}
        for n, batch in self.eval_sets.items():
            if self.task.evaluation == "generate":
                found = evaluate_by_generation(self.model, self.task, batch, chunk, self.device)
            else:
                loss, acc = evaluate(self.model, self.task, batch, chunk, self.device)
                found = {"loss": loss, "accuracy": acc}
            if n == self.config.task.length:
                metrics.update(found)
            else:
                metrics.update({f"{name}@{n}": value for name, value in found.items() if name != "loss"})
        return metrics

    def run(self, progress: bool | None = None) -> RunResult:
        cfg = self.config.train
        result = RunResult(
            config=self.config,
            config_hash=self.config.config_hash(),
            status="completed",
            parameters=count_parameters(self.model),
            device=str(self.device),
            version=package_version(),
            git_commit=git_commit(),
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        start = time.perf_counter()
        console = Console(stderr=True)
        show = console.is_terminal if progress is None else progress
        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"), TimeRemainingColumn())
        metrics: dict[str, float] = {}
        with Progress(*columns, console=console, disable=not show, transient=True) as bar:
            job = bar.add_task(f"{self.config.model.name} on {self.config.task.name}", total=cfg.steps, status="")
            self.model.train()
            for step in range(1, cfg.steps + 1):
                batch = self.next_batch().to(self.device)
                loss = masked_loss(self.model(batch.inputs), batch)
                if not torch.isfinite(loss):
                    result.status, result.error = "diverged", f"non-finite loss at step {step}"
                    break
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                self.scheduler.step()
                result.steps = step
                if step % cfg.eval_every and step != cfg.steps:
                    continue
                metrics = self.evaluate()
                seconds = time.perf_counter() - start
                result.curve.append(EvalPoint(step=step, loss=metrics["loss"], accuracy=metrics["accuracy"], seconds=seconds))
                bar.update(job, completed=step, status=f"acc {metrics['accuracy']:.3f}")
                if metrics["accuracy"] >= cfg.threshold and result.steps_to_threshold is None:
                    result.steps_to_threshold, result.seconds_to_threshold = step, seconds
                    if cfg.early_stop:
                        break
        if result.status != "diverged":
            result.status = "solved" if result.steps_to_threshold is not None else "completed"
        result.metrics = metrics if result.curve and result.curve[-1].step == result.steps else self.evaluate()
        result.state_floats = measure_state_size(self.model, self.task.max_seq_len())
        result.wall_seconds = time.perf_counter() - start
        return result
