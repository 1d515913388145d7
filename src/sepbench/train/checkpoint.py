"""Checkpoints: a run's whole training state, saved every ``train.checkpoint_every`` seconds of training and when
a stop signal arrives, so a killed run resumes where it was and, on CPU, ends exactly as the uninterrupted run.

One file per run, ``<folder>/<config hash>.pt``, written atomically (a temporary file, fsync, rename). A file that
cannot be read, or that another config, other code or another kind of run wrote, is set aside as ``*.bad`` with
one warning line and the run starts over. A finished run deletes its file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sepbench.config import RunConfig
from sepbench.processes import process_alive
from sepbench.train.assessment import Assessment, Tally
from sepbench.train.environment import code_version
from sepbench.train.keeping import checkpoint_file
from sepbench.train.result import RunResult
from sepbench.train.stopping import RunInterrupted, stop_requested

if TYPE_CHECKING:
    from sepbench.train.group import _GroupRun, _Member
    from sepbench.train.loop import Trainer

FORMAT = 1
SOLO, MEMBER = "solo", "member"
"""Kinds of run a checkpoint holds: a Trainer's, or one member of a stacked group (``sepbench.train.group``)."""


def rng_states() -> dict[str, Any]:
    """The global random states a run may draw from: torch (CPU and CUDA), numpy's legacy one and Python's."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []  # never starts CUDA for a CPU run
    return {"torch": torch.get_rng_state(), "cuda": cuda,
            "numpy": [name, keys.tolist(), position, has_gauss, gauss], "python": random.getstate()}


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    name, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])


def assessment_state(assessment: Assessment | None) -> dict[str, Any] | None:
    """The last evaluation's metrics, intervals and eval-budget tallies as plain data."""
    if assessment is None:
        return None
    return {"metrics": dict(assessment.metrics),
            "intervals": {name: dataclasses.asdict(i) for name, i in assessment.intervals.items()},
            "tallies": {n: dataclasses.asdict(t) for n, t in assessment.tallies.items()}}


def restore_assessment(state: dict[str, Any] | None) -> Assessment | None:
    from sepbench.train.sequential import Interval

    if state is None:
        return None
    return Assessment(state["metrics"], {name: Interval(**i) for name, i in state["intervals"].items()},
                      {n: Tally(**t) for n, t in state["tallies"].items()})


def restore_result(state: dict[str, Any], config: RunConfig) -> RunResult:
    """The result so far of a checkpointed run, now also resumed from the checkpoint's step."""
    result = RunResult.model_validate_json(state["result"])
    result.config = config
    result.resumed_from.append(result.steps)
    return result


def _alive(pid: str) -> bool:
    """Whether process ``pid`` of this host still runs (a partial file it is writing must stay)."""
    return pid.isdigit() and process_alive(int(pid))


class Checkpoint:
    """The checkpoint file of one run, kept in ``folder``."""

    def __init__(self, folder: str | Path, config: RunConfig, kind: str) -> None:
        self.config_hash = config.config_hash()
        self.path = checkpoint_file(folder, self.config_hash)
        self.every = config.train.checkpoint_every
        self.kind = kind
        self.saved_at = 0.0
        """training seconds at the last save or resume"""
        self.saved_step = 0

    def due(self, seconds: float, step: int) -> bool:
        """Whether to save now, after ``step`` steps and ``seconds`` of training: the interval has passed or a
        stop signal came, and the state moved on since the last save."""
        return step > self.saved_step and (stop_requested() or seconds - self.saved_at >= self.every)

    def save(self, state: dict[str, Any], step: int, seconds: float) -> None:
        """Write ``state`` (after ``step`` steps, ``seconds`` of training) whole or not at all."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": FORMAT, "kind": self.kind, "config_hash": self.config_hash,
                   "code_version": code_version(), "state": {**state, "step": step, "seconds": seconds}}
        partial = self.path.with_name(f".{self.path.name}.{socket.gethostname()}.{os.getpid()}.partial")
        try:
            with open(partial, "wb") as handle:
                torch.save(payload, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, self.path)
        finally:
            partial.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the rename itself survives a power cut only once the folder is synced
            folder = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        self.saved_at, self.saved_step = seconds, step

    def load(self, keep_other_kind: bool = False) -> dict[str, Any] | None:
        """The saved state, or None when there is none or it was set aside (with one warning line).
        ``keep_other_kind``: a checkpoint of another kind of run is left in place for that run instead."""
        for stray in self.path.parent.glob(f".{self.path.name}.{socket.gethostname()}.*.partial"):
            if not _alive(stray.name.rsplit(".", 2)[-2]):  # a writer on this host killed mid-save
                stray.unlink(missing_ok=True)
        try:
            payload = torch.load(self.path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            return None
        except Exception as error:  # noqa: BLE001 - a truncated or corrupt file is set aside, whatever torch raises
            self.set_aside(f"it cannot be read ({type(error).__name__})")
            return None
        problem = self._problem(payload)
        if problem is not None and keep_other_kind and problem.startswith("it holds a "):
            return None
        if problem is not None:
            self.set_aside(problem)
            return None
        state = payload["state"]
        self.saved_at, self.saved_step = state["seconds"], state["step"]
        sys.stderr.write(f"run {self.config_hash} resumes from its checkpoint at step {state['step']}\n")
        sys.stderr.flush()
        return state

    def _problem(self, payload: Any) -> str | None:
        if not isinstance(payload, dict) or payload.get("format") != FORMAT or not isinstance(payload.get("state"), dict):
            return f"it is not a sepbench checkpoint of format {FORMAT}"
        if payload.get("config_hash") != self.config_hash:
            return f"it holds config {payload.get('config_hash')}"
        if payload.get("code_version") != code_version():
            return f"other code wrote it ({payload.get('code_version')}; this is {code_version()})"
        if payload.get("kind") != self.kind:
            return f"it holds a {payload.get('kind')} run, not a {self.kind} run"
        return None

    def set_aside(self, problem: str) -> None:
        aside = self.path.with_suffix(".bad")
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, aside)
        sys.stderr.write(f"warning: checkpoint {self.path} set aside as {aside.name} because {problem}; "
                         f"run {self.config_hash} starts over\n")
        sys.stderr.flush()

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def open_checkpoint(folder: str | Path | None, config: RunConfig, kind: str) -> Checkpoint | None:
    """The run's checkpoint in ``folder``; None when it keeps none (no folder, or ``checkpoint_every`` 0)."""
    if folder is None or config.train.checkpoint_every <= 0:
        return None
    return Checkpoint(folder, config, kind)


def trainer_state(trainer: Trainer) -> dict[str, Any]:
    """Everything a Trainer needs to go on exactly as it would have."""
    assert trainer.result is not None
    return {"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(), "data": trainer.train_rng.bit_generator.state,
            "rng": trainer.random_states(), "result": trainer.result.model_dump_json(),
            "assessment": assessment_state(trainer._assessment), "stopped": trainer._stopped,
            "cpu_seconds": trainer.cpu_seconds()}


def resume_trainer(trainer: Trainer, checkpoint: Checkpoint) -> None:
    """Load ``checkpoint`` into a freshly built ``trainer``, if it holds a state."""
    state = checkpoint.load()
    if state is None:
        return
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.train_rng.bit_generator.state = state["data"]
    set_rng_states(state["rng"])
    trainer.result = restore_result(state, trainer.config)
    trainer._assessment = restore_assessment(state["assessment"])
    trainer._stopped = state["stopped"]
    trainer._seconds = state["seconds"]
    trainer._cpu_seconds = state.get("cpu_seconds")


def save_trainer(trainer: Trainer) -> None:
    """Save a Trainer held between stretches of training, if it keeps checkpoints and trained since its last."""
    file = trainer.checkpoint
    if file is not None and trainer.result is not None and trainer.result.steps > file.saved_step:
        file.save(trainer_state(trainer), trainer.result.steps, trainer._seconds)


def keep_trainer(trainer: Trainer, checkpoint: Checkpoint, seconds: float) -> None:
    """At a step boundary: save when due; after a stop signal, save and raise RunInterrupted."""
    assert trainer.result is not None
    if checkpoint.due(seconds, trainer.result.steps):
        checkpoint.save(trainer_state(trainer), trainer.result.steps, seconds)
    if stop_requested():
        raise RunInterrupted(f"run {checkpoint.config_hash} stopped at step {trainer.result.steps}")


def member_state(group: _GroupRun, position: int) -> dict[str, Any]:
    """One member of a stacked group (at ``position`` in the stack): its slices of the parameters and Adam moments,
    the shared Adam step count, its data stream and its result so far."""
    member = group.members[group.active[position]]
    return {"params": {name: p[position].detach().clone() for name, p in zip(group.names, group.params)},
            "buffers": {name: b[position].clone() for name, b in group.buffers.items()},
            "exp_avg": [m[position].clone() for m in group.optimizer.exp_avg],
            "exp_avg_sq": [v[position].clone() for v in group.optimizer.exp_avg_sq],
            "adam_steps": group.optimizer.step_count, "data": member.trainer.train_rng.bit_generator.state,
            "rng": rng_states(), "result": member.result.model_dump_json(),
            "assessment": assessment_state(member.assessment)}


def resume_member(member: _Member, state: dict[str, Any]) -> None:
    """Load a member's checkpoint into its own model, data stream and result (before the group stacks them)."""
    model = member.trainer.model
    own = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with torch.no_grad():
        for name, tensor in {**state["params"], **state["buffers"]}.items():
            own[name].copy_(tensor)
    member.trainer.train_rng.bit_generator.state = state["data"]
    set_rng_states(state["rng"])
    member.result = restore_result(state, member.trainer.config)
    member.assessment = restore_assessment(state["assessment"])


def resume_moments(group: _GroupRun, states: list[dict[str, Any]]) -> None:
    """Stack the members' saved Adam moments into the group's optimizer."""
    device = group.params[0].device
    group.optimizer.step_count = states[0]["adam_steps"]
    group.optimizer.exp_avg = [torch.stack([s["exp_avg"][j] for s in states]).to(device)
                               for j in range(len(group.params))]
    group.optimizer.exp_avg_sq = [torch.stack([s["exp_avg_sq"][j] for s in states]).to(device)
                                  for j in range(len(group.params))]
