"""Batched greedy generation with each mixer's step state, and generation-based evaluation of CoT tasks.

The protocol of Yang et al. 2024, sec. 6.1: from the prompt, generate greedily token by token until
<eos>; the metric is the final answer (the token before <eos>). Whole-CoT exact match is reported too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sepbench.models import SequenceModel
from sepbench.tasks import Batch, Task
from sepbench.train.memory import chunk_rows, memory_budget


@torch.no_grad()
def greedy_generate(model: SequenceModel, prompts: torch.Tensor, prompt_lengths: torch.Tensor, eos: int,
                    pad: int, max_tokens: int | None = None, cache: bool = True) -> torch.Tensor:
    """Continue each prompt greedily until it emits ``eos`` or the sequence holds ``max_tokens`` tokens.

    ``prompts`` [B, P] holds prompts of ``prompt_lengths`` tokens (the rest is padding). All rows advance
    together: a row still in its prompt is fed its own next prompt token. With ``cache`` each step feeds
    one token through ``model.step`` (KV cache or recurrent state); without it the whole prefix is
    re-run at every step, as the reference does. Returns [B, max_tokens]: prompt, generation, padding.
    """
    batch = prompts.shape[0]
    device = prompts.device
    total = max_tokens or model.max_len + 1
    seq = torch.full((batch, total), pad, dtype=torch.long, device=device)
    seq[:, : prompts.shape[1]] = prompts[:, :total]
    prompt_lengths = prompt_lengths.to(device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    state = model.init_state(batch, device) if cache else None
    for t in range(total - 1):
        if cache:
            logits, state = model.step(seq[:, t], state)
        else:
            logits = model(seq[:, : t + 1])[:, -1]
        generating = (t + 1 >= prompt_lengths) & ~done
        token = logits.argmax(-1)
        seq[:, t + 1] = torch.where(generating, token, seq[:, t + 1])
        done |= generating & (token == eos)
        if bool(done.all()):
            break
    return seq


def prompt_lengths_of(batch: Batch) -> torch.Tensor:
    """The prompt ends where scoring starts: the first scored input position is the prompt's last token."""
    return batch.mask.to(torch.int64).argmax(dim=1) + 1


@torch.no_grad()
def generation_metrics(model: SequenceModel, task: Task, batch: Batch, cache: bool = True) -> dict[str, torch.Tensor]:
    """Per example: ``answer`` (the token before the first generated <eos> is the gold answer; a row that
    never emits <eos> is wrong, as in Feng et al.'s ``arithmetic/eval.py``) and ``exact`` (everything
    generated up to <eos> equals the gold CoT, answer and <eos>)."""
    eos, pad = task.eos_id, task.pad_id
    prompt_lengths = prompt_lengths_of(batch)
    prompts = batch.inputs[:, : int(prompt_lengths.max())]
    seq = greedy_generate(model, prompts, prompt_lengths, eos, pad, cache=cache)
    width = batch.targets.shape[1]
    produced = seq[:, 1 : width + 1]
    if produced.shape[1] < width:
        produced = F.pad(produced, (0, width - produced.shape[1]), value=pad)
    exact = ((produced == batch.targets) | ~batch.mask).all(dim=1)
    position = torch.arange(seq.shape[1], device=seq.device)[None, :]
    after_prompt = position >= prompt_lengths[:, None]
    ended = (seq == eos) & after_prompt
    first_eos = torch.where(ended, position, seq.shape[1]).min(dim=1).values
    has_answer = ended.any(dim=1) & (first_eos - 1 >= prompt_lengths)
    answer = seq.gather(1, (first_eos - 1).clamp(0, seq.shape[1] - 1)[:, None])[:, 0]
    last_scored = (batch.mask.to(torch.int64) * torch.arange(width, device=seq.device)).argmax(dim=1)
    gold = batch.targets.gather(1, (last_scored - 1)[:, None])[:, 0]
    return {"answer": has_answer & (answer == gold), "exact": exact, "sequences": seq}


@torch.no_grad()
def evaluate_by_generation(model: SequenceModel, task: Task, batch: Batch, chunk: int,
                           device: torch.device) -> dict[str, float]:
    """Teacher-forced loss, final-answer accuracy and whole-CoT exact match by greedy generation.

    Chunks hold at most ``chunk`` rows, fewer where the device's memory budget says so.
    """
    was_training = model.training
    model.eval()
    loss_sum, scored, answers, exact = 0.0, 0, 0, 0
    seq_len = max(batch.inputs.shape[1], model.max_len + 1)
    chunk = chunk_rows(model, seq_len, int(batch.mask.sum(dim=1).max()), memory_budget(device), chunk)
    for start in range(0, len(batch), chunk):
        part = batch.slice(start, start + chunk).to(device)
        logits = model(part.inputs, positions=part.mask)
        loss_sum += float(F.cross_entropy(logits, part.targets[part.mask], reduction="sum"))
        scored += int(part.mask.sum())
        result = generation_metrics(model, task, part)
        answers += int(result["answer"].sum())
        exact += int(result["exact"].sum())
    model.train(was_training)
    n = max(1, len(batch))
    return {"loss": loss_sum / max(1, scored), "accuracy": answers / n, "cot_exact": exact / n}
