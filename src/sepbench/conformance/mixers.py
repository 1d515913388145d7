"""The mixer contract: the step path equals the whole-sequence path, the model is causal, the backbone leaves the
mixer's initialisation alone, state size and FLOPs match the mixer's closed forms, every parameter trains, and a
small model learns a short Index Lookup."""
from __future__ import annotations

from typing import Any, Callable

import torch

from sepbench.conformance import Absent, Check, run_check
from sepbench.config import ModelConfig
from sepbench.models import SequenceModel, build_model

VOCAB, LENGTH = 17, 24
"""Vocabulary and length of the path and causality checks (a width-32, 2-block, 4-head model in float64)"""
ACCOUNTING_LENGTH = 40
"""Longest length of the state and FLOP checks (a width-16, 2-block, 2-head model)"""
NO_STEP_PATH = ("no step path: the mixer trains and is scored teacher-forced, but tasks scored by generation "
                "(arithmetic, edit_distance, ed_local, lis) and the state size need one")


def path_model(name: str, **overrides: Any) -> SequenceModel:
    """The model the path and causality checks use, seeded, in float64, in eval mode."""
    torch.manual_seed(0)
    config = ModelConfig(name=name, layers=2, width=32, heads=4, **overrides)
    return build_model(config, VOCAB, LENGTH).double().eval()


def accounting_model(name: str, max_len: int = ACCOUNTING_LENGTH) -> SequenceModel:
    """The model the state and FLOP checks use."""
    torch.manual_seed(0)
    return build_model(ModelConfig(name=name, layers=2, width=16, heads=2), 11, max_len).eval()


def _stepped(model: SequenceModel, tokens: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of the step path, token by token."""
    try:
        state = model.init_state(tokens.shape[0])
        logits = []
        for t in range(tokens.shape[1]):
            out, state = model.step(tokens[:, t], state)
            logits.append(out)
    except NotImplementedError:
        raise Absent(NO_STEP_PATH) from None
    return torch.stack(logits, 1)


def step_matches_parallel(name: str) -> Check:
    """The step path, token by token, gives the whole-sequence path's logits (float64, to 1e-9)."""
    def body() -> str:
        model = path_model(name)
        tokens = torch.randint(0, VOCAB, (3, LENGTH), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            full, stepped = model(tokens), _stepped(model, tokens)
        gap = (stepped - full).abs().max().item()
        torch.testing.assert_close(stepped, full, rtol=1e-9, atol=1e-9,
                                   msg=f"step path differs from the whole-sequence path by up to {gap:.3g}")
        return f"equal over {LENGTH} tokens (largest gap {gap:.1e})"

    return run_check("step path = whole-sequence path", body)


def causal(name: str) -> Check:
    """Changing the tokens from position 10 on leaves the logits before it unchanged."""
    def body() -> str:
        model = path_model(name)
        tokens = torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(2))
        changed = tokens.clone()
        changed[:, 10:] = (changed[:, 10:] + 1) % VOCAB
        with torch.no_grad():
            before, after = model(tokens)[:, :10], model(changed)[:, :10]
        torch.testing.assert_close(after, before, msg="changing later tokens changes earlier outputs: not causal")
        return "earlier outputs ignore later tokens"

    return run_check("causal", body)


def initialisation_left_alone(name: str) -> Check:
    """The backbone's initialisation does not touch the mixer's parameters (the mixer initialises its own)."""
    def body() -> str:
        model = path_model(name)
        before = {k: v.clone() for k, v in model.blocks.state_dict().items() if ".mixer." in k}
        assert before, "the mixer has no parameters or buffers"
        model._init_own_parameters()
        after = model.blocks.state_dict()
        touched = [k for k in before if not torch.equal(before[k], after[k])]
        assert not touched, f"the backbone's initialisation changed {', '.join(touched)}"
        return f"{len(before)} mixer tensors kept"

    return run_check("own initialisation", body)


def _closed_form(call: Callable[[], int], what: str) -> int:
    try:
        return call()
    except NotImplementedError:
        raise Absent(f"no closed-form {what}") from None


def state_matches_closed_form(name: str, lengths: tuple[int, ...] = (1, 9, 23, ACCOUNTING_LENGTH)) -> Check:
    """The floats the step path carries equal ``state_floats`` after each of ``lengths`` tokens."""
    from sepbench.models.accounting import measure_state_size, state_size

    def body() -> str:
        model = accounting_model(name)
        for length in lengths:
            expected = _closed_form(lambda: state_size(model, length), "state size (Mixer.state_floats)")
            try:
                measured = measure_state_size(model, length)
            except NotImplementedError:
                raise Absent(NO_STEP_PATH) from None
            assert measured == expected, f"after {length} tokens the state holds {measured} floats, " \
                                         f"state_floats says {expected}"
        return f"{', '.join(f'{n}: {state_size(model, n)}' for n in lengths)} floats"

    return run_check("state size = closed form", body)


def flops_match_closed_form(name: str, lengths: tuple[int, ...] = (7, ACCOUNTING_LENGTH)) -> Check:
    """Matrix-product FLOPs counted by torch's flop counter equal the closed form at each of ``lengths``."""
    from sepbench.models.accounting import forward_flops, measure_flops

    def body() -> str:
        model = accounting_model(name)
        for length in lengths:
            expected = _closed_form(lambda: forward_flops(model, length), "FLOP count (Mixer.flops)")
            counted = measure_flops(model, torch.zeros(1, length, dtype=torch.long))
            assert counted == expected, f"at length {length} torch counts {counted:,} FLOPs, the closed form " \
                                        f"says {expected:,}"
        return ", ".join(f"{n}: {forward_flops(model, n):,}" for n in lengths) + " FLOPs"

    return run_check("FLOPs = closed form", body)


def parameters_train(name: str) -> Check:
    """Every parameter is registered once and gets a gradient from the loss (so it is counted and trained)."""
    from sepbench.models.accounting import count_parameters

    def body() -> str:
        model = path_model(name).train()
        tokens = torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(3))
        model(tokens).square().sum().backward()
        idle = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert not idle, f"no gradient reaches {', '.join(idle)}"
        mixers = sum(p.numel() for block in model.blocks for p in block.mixer.parameters())
        return f"{count_parameters(model):,} parameters ({mixers:,} in the mixers), all trained"

    return run_check("parameters counted and trained", body)


def learns_index_lookup(name: str, length: int = 5, steps: int = 1500, threshold: float = 0.9) -> Check:
    """A width-64, 2-block model at the mixer's default learning rate reaches ``threshold`` on Index Lookup of size
    ``length`` within ``steps`` steps (batch 32; CPU)."""
    from sepbench.config import RunConfig
    from sepbench.train import train

    def body() -> str:
        config = RunConfig.build({
            "task": {"name": "index_lookup", "length": length, "options": {"min_length": min(length, 10)}},
            "model": {"name": name, "layers": 2, "width": 64},
            "train": {"steps": steps, "batch_size": 32, "eval_every": 50, "eval_samples": 500,
                      "threshold": threshold},
            "device": "cpu",
        })
        result = train(config)
        assert result.status == "solved" and result.accuracy >= threshold, \
            f"accuracy {result.accuracy:.3f} after {result.steps} steps, below {threshold} (status {result.status})"
        return f"accuracy {result.accuracy:.3f} after {result.steps} of {steps} steps (N = {length})"

    return run_check(f"learns Index Lookup N={length}", body)


def builds(name: str) -> Check:
    """The model builds at the checks' sizes."""
    return run_check("builds", lambda: f"{type(path_model(name).blocks[0].mixer).__name__}, width 32, 2 blocks")


def all_checks(name: str, learn_steps: int = 1500) -> list[Check]:
    """Every check of the mixer ``name`` (a registered name or a plugin); later checks only once it builds."""
    first = builds(name)
    if first.failed:
        return [first]
    checks = [first, step_matches_parallel(name), causal(name), initialisation_left_alone(name),
              state_matches_closed_form(name), flops_match_closed_form(name), parameters_train(name)]
    if learn_steps:
        checks.append(learns_index_lookup(name, steps=learn_steps))
    return checks
