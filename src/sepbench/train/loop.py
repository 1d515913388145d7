"""train(RunConfig) -> RunResult: the paper protocol of a fresh batch per step, with early stopping."""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from typing import Any, Callable

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from sepbench.config import RunConfig, TrainConfig
from sepbench.heap import keep_freed_memory
from sepbench.models import SequenceModel, build_model
from sepbench.models.accounting import count_parameters, stored_state_size
from sepbench.tasks import Batch, Task, build_task
from sepbench.train import checkpoint, stopping, subnormals, watch
from sepbench.train.data_cache import cached_split
from sepbench.train.decode import evaluate_by_generation
from sepbench.train.environment import (
    code_version, data_rng, git_commit, package_version, resolve_device, seed_everything,
)
from sepbench.train.keeping import Keeping
from sepbench.train.memory import chunk_rows, memory_budget
from sepbench.train.result import EvalPoint, RunResult
from sepbench.train.assessment import Assessment, Tally, stored_interval
from sepbench.train.sequential import Interval, clopper_pearson, run_looks

TRAIN_STREAM, EVAL_STREAM = 0, 1


def masked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Cross-entropy over the scored positions only; ``logits`` at every position [B, T, V] or, as
    ``model(inputs, positions=batch.mask)`` gives them, at the scored positions alone [M, V]."""
    if logits.dim() == 3:
        logits = logits[batch.mask]
    return F.cross_entropy(logits, batch.targets[batch.mask])


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
def evaluate_rows(model: SequenceModel, task: Task, batch: Batch, chunk: int, device: torch.device,
                  stop: int | None = None, tally: Tally | None = None) -> Tally:
    """Add rows ``tally.examples`` up to ``stop`` (default: all) of ``batch`` to ``tally`` (default: empty).

    Chunks hold at most ``chunk`` rows, fewer where the device's memory budget says so; the model computes
    logits only at the task's checked positions. An example counts only if ``task.correct_tokens`` says so.
    """
    tally = Tally() if tally is None else Tally(**vars(tally))
    stop = len(batch) if stop is None else min(stop, len(batch))
    if tally.examples >= stop:
        return tally
    checked_per_row = int(task.checked_positions(batch).sum(dim=1).max())
    rows = chunk_rows(model, batch.inputs.shape[1], checked_per_row, memory_budget(device), chunk)
    was_training = model.training
    model.eval()
    for start in range(tally.examples, stop, rows):
        part = batch.slice(start, min(start + rows, stop)).to(device)
        checked = task.checked_positions(part)
        logits = model(part.inputs, positions=checked)
        loss_sum = F.cross_entropy(logits[part.mask[checked]], part.targets[part.mask], reduction="sum")
        predicted = torch.full_like(part.targets, -1)
        predicted[checked] = logits.argmax(-1)
        tally.loss_sum += float(loss_sum)
        tally.scored += int(part.mask.sum())
        tally.correct += int(task.correct_tokens(predicted, part).sum())
        tally.examples += len(part)
    model.train(was_training)
    return tally


@torch.no_grad()
def evaluate(model: SequenceModel, task: Task, batch: Batch, chunk: int, device: torch.device) -> tuple[float, float]:
    """Teacher-forced (loss, accuracy) over all of ``batch``; an example counts only if every scored token is right."""
    tally = evaluate_rows(model, task, batch, chunk, device)
    return tally.loss, tally.accuracy


@torch.no_grad()
def evaluate_sequential(model: SequenceModel, task: Task, batch: Batch, chunk: int, device: torch.device,
                        threshold: float | None = None, tally: Tally | None = None) -> tuple[Tally, Interval]:
    """Evaluate ``batch`` look by look (``sequential.looks``), resuming ``tally`` if given.

    With ``threshold``, stop at the first look whose Clopper-Pearson interval decides it (``sequential.run_looks``).
    Chunks end at the looks whatever the budget, so the sums at a look are the same however it was reached.
    """
    tally = tally or Tally()

    def count(n: int) -> int:
        nonlocal tally
        tally = evaluate_rows(model, task, batch, chunk, device, stop=n, tally=tally)
        return tally.correct

    interval = run_looks(count, len(batch), threshold, start=tally.examples)
    return tally, interval


class Trainer:
    """Holds one run's task, model and data; ``run`` trains and returns the result, or ``train_until`` trains in
    stretches (a learning-rate search stops and resumes runs held in memory) and ``finish`` returns it.

    ``keeping`` says where the run saves its state as it trains, and starts from a checkpoint it finds there
    (``sepbench.train.checkpoint``), and where it shows its curve so far (``sepbench.train.watch``)."""

    def __init__(self, config: RunConfig, keeping: Keeping | None = None) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        keep_freed_memory()
        seed_everything(config.seed)
        self.task = build_task(config.task.name, config.task.length, config.task.options)
        self.lengths = [config.task.length] + [n for n in config.task.eval_lengths or [] if n != config.task.length]
        max_len = max(self.task.max_seq_len(n) for n in self.lengths)
        self.model = build_model(config.model, self.task.vocab_size, max_len).to(self.device)
        self.compute_paths = self.model.compute_paths(self.device)  # an implementation that cannot run fails here
        self.optimizer = make_optimizer(self.model, config.train)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, config.train))
        self.train_rng = data_rng(config.seed, TRAIN_STREAM)
        eval_rng = data_rng(config.seed, EVAL_STREAM)
        self.eval_sets = {n: self.task.sample_eval(config.train.eval_samples, eval_rng, n) for n in self.lengths}
        self.fixed = self.fixed_rows = None
        if config.train.data == "fixed" and self.task.deduplicated_split:  # narrow rows, batched per step
            self.fixed_rows, test = cached_split(self.task, config.train.train_size, config.train.eval_samples,
                                                 self.train_rng)
            self.eval_sets[config.task.length] = self.task.to_batch(test.tokens, test.prompts)
        elif config.train.data == "fixed":
            self.fixed = self.task.sample_train(config.train.train_size, self.train_rng)
        self.result: RunResult | None = None
        self._assessment: Assessment | None = None
        self._seconds = 0.0
        self._cpu_seconds: float | None = 0.0
        self._cpu_mark: float | None = None
        self._stopped = False
        self._training = False
        self.keeping = keeping or Keeping()
        self.checkpoint = checkpoint.open_checkpoint(self.keeping.checkpoints, config, checkpoint.SOLO)
        if self.checkpoint is not None:
            checkpoint.resume_trainer(self, self.checkpoint)
        self._random = checkpoint.rng_states()
        self.watch = watch.open_watch(config, self.keeping.store)

    def random_states(self) -> dict[str, Any]:
        """This run's random states (dropout draws from torch's): the global ones while it trains, else those it
        left off with, so Trainers that take turns in one process each draw as if alone."""
        return checkpoint.rng_states() if self._training else self._random

    def next_batch(self) -> Batch:
        size = self.config.train.batch_size
        if self.fixed_rows is not None:
            return self.task.to_batch(*self.fixed_rows.take(self.train_rng.integers(0, len(self.fixed_rows), size=size)))
        if self.fixed is None:
            return self.task.sample_train(size, self.train_rng)
        rows = torch.from_numpy(self.train_rng.integers(0, len(self.fixed), size=size))
        mask = self.fixed.mask[rows]
        used = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else mask.shape[1]
        return Batch(self.fixed.inputs[rows, :used], self.fixed.targets[rows, :used], mask[:, :used])

    def fresh_data(self) -> bool:
        """Whether each batch is newly sampled (no fixed training set)."""
        return self.fixed is None and self.fixed_rows is None

    def evaluate(self, full: bool = False) -> dict[str, float]:
        """Metrics on every evaluation set, under ``train.eval_budget`` unless ``full``."""
        return self.assess(full).metrics

    def assess(self, full: bool = False, resume: Assessment | None = None) -> Assessment:
        """Evaluate every evaluation set; teacher-forced ones stop early under the adaptive budget unless
        ``full``. ``resume``: an earlier assessment of the unchanged model whose sums are extended."""
        if resume is not None and self.task.evaluation == "generate":
            return resume
        chunk = self.config.train.eval_batch_size
        adaptive = self.config.train.eval_budget == "adaptive" and not full
        threshold = self.config.train.threshold if adaptive else None
        result = Assessment({})
        for n, batch in self.eval_sets.items():
            name = "accuracy" if n == self.config.task.length else f"accuracy@{n}"
            if self.task.evaluation == "generate":
                found = evaluate_by_generation(self.model, self.task, batch, chunk, self.device)
                result.intervals[name] = clopper_pearson(round(found["accuracy"] * len(batch)), len(batch))
            else:
                earlier = resume.tallies.get(n) if resume is not None else None
                tally, result.intervals[name] = evaluate_sequential(
                    self.model, self.task, batch, chunk, self.device, threshold, earlier)
                result.tallies[n] = tally
                found = {"loss": tally.loss, "accuracy": tally.accuracy}
            if n == self.config.task.length:
                result.metrics.update(found)
            else:
                result.metrics.update({f"{key}@{n}": value for key, value in found.items() if key != "loss"})
        return result

    @property
    def stopped(self) -> bool:
        """True once the run can go no further: all steps done, diverged, or early-stopped at the threshold."""
        return self._stopped or (self.result is not None and self.result.steps >= self.config.train.steps)

    def _begin(self) -> RunResult:
        if self.result is None:
            self.result = RunResult(
                config=self.config,
                config_hash=self.config.config_hash(),
                status="completed",
                parameters=count_parameters(self.model),
                device=str(self.device),
                compute_paths=self.compute_paths,
                version=package_version(),
                code_version=code_version(),
                git_commit=git_commit(),
                created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
        return self.result

    def train_until(self, step_limit: int, on_eval: Callable[[EvalPoint], None] | None = None) -> RunResult:
        """Train on to ``step_limit`` (at most ``train.steps``) or an early stop; a later call goes on from there.

        Stopping at a step and going on trains exactly as one uninterrupted run would; a run that has stopped
        (early-stopped or diverged, here or in the checkpoint it resumed from) trains no further.
        """
        cfg = self.config.train
        result = self._begin()
        if self._stopped:
            return result
        start = time.perf_counter()
        self._cpu_mark = time.process_time()
        self.model.train()
        kept = self.checkpoint
        checkpoint.set_rng_states(self._random)
        self._training = True
        try:
            with stopping.training() if kept is not None else nullcontext(), subnormals.flushed(self.device):
                for step in range(result.steps + 1, min(step_limit, cfg.steps) + 1):
                    if kept is not None:
                        checkpoint.keep_trainer(self, kept, self._seconds + time.perf_counter() - start)
                    batch = self.next_batch().to(self.device)
                    loss = masked_loss(self.model(batch.inputs, positions=batch.mask), batch)
                    if not torch.isfinite(loss):
                        result.status, result.error = "diverged", f"non-finite loss at step {step}"
                        self._stopped = True
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
                    self._assessment = self.assess()
                    seconds = self._seconds + time.perf_counter() - start
                    point = self._assessment.point(step, seconds)
                    result.curve.append(point)
                    if self.watch is not None:
                        self.watch.point(result, point, self.scheduler.get_last_lr()[0])
                    if on_eval is not None:
                        on_eval(point)
                    if point.accuracy >= cfg.threshold and result.steps_to_threshold is None:
                        result.steps_to_threshold, result.seconds_to_threshold = step, seconds
                        if cfg.early_stop:
                            self._stopped = True
                            break
        finally:
            self._random, self._training = checkpoint.rng_states(), False
            self._seconds += time.perf_counter() - start
            self._cpu_seconds, self._cpu_mark = self.cpu_seconds(), None
        return result

    def cpu_seconds(self) -> float | None:
        """CPU seconds of this process while it trained and evaluated this run so far (None: resumed from a
        checkpoint that did not count them)."""
        if self._cpu_seconds is None or self._cpu_mark is None:
            return self._cpu_seconds
        return self._cpu_seconds + time.process_time() - self._cpu_mark

    def settle(self, result: RunResult, last: Assessment | None) -> None:
        """Final status, full-set metrics with intervals (continuing ``last`` when it was taken at the final
        step) and state size of ``result``, trained by this Trainer's model."""
        if result.status == "diverged":  # weights that gave a non-finite loss: their accuracy would be noise
            result.metrics, result.intervals = {"loss": math.nan}, {}
        else:
            result.status = "solved" if result.steps_to_threshold is not None else "completed"
            current = last if result.curve and result.curve[-1].step == result.steps else None
            final = self.assess(full=True, resume=current)
            result.metrics = final.metrics
            result.intervals = {name: stored_interval(interval) for name, interval in final.intervals.items()}
        result.state_floats = stored_state_size(self.model, self.task.max_seq_len())

    def finish(self, delete_checkpoint: bool = True) -> RunResult:
        """The result of what was trained so far: status, final metrics, state size and training seconds.
        ``delete_checkpoint=False``: the checkpoint is kept for the caller to delete once the result is stored (a
        kill before that resumes from it), brought up to the last step trained where the run has saved one (a run
        shorter than ``checkpoint_every`` writes none: a kill loses no more than a periodic save would)."""
        result = self._begin()
        if not delete_checkpoint and self.checkpoint is not None and self.checkpoint.saved_step > 0:
            checkpoint.save_trainer(self)
        start, self._cpu_mark = time.perf_counter(), time.process_time()
        try:
            self.settle(result, self._assessment)
        except KeyboardInterrupt:  # Ctrl-C in the final evaluation keeps the training done
            checkpoint.save_trainer(self)
            raise
        self._seconds += time.perf_counter() - start
        self._cpu_seconds, self._cpu_mark = self.cpu_seconds(), None
        result.wall_seconds, result.cpu_seconds = self._seconds, self._cpu_seconds
        if self.checkpoint is not None and delete_checkpoint:
            self.checkpoint.delete()
        if self.watch is not None:
            self.watch.close()
        return result

    def run(self, progress: bool | None = None, delete_checkpoint: bool = True) -> RunResult:
        console = Console(stderr=True)
        show = console.is_terminal if progress is None else progress
        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"), TimeRemainingColumn())
        with Progress(*columns, console=console, disable=not show, transient=True) as bar:
            job = bar.add_task(f"{self.config.model.name} on {self.config.task.name}", total=self.config.train.steps,
                               status="")
            self.train_until(self.config.train.steps, on_eval=lambda point: bar.update(
                job, completed=point.step, status=f"acc {point.accuracy:.3f}"))
        return self.finish(delete_checkpoint)

