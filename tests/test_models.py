import pytest
import torch

from sepbench.config import ModelConfig
from sepbench.models import MODELS, build_model

VOCAB, LENGTH = 17, 24


def make(name: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(name=name, layers=2, width=32, heads=4, **overrides)
    return build_model(cfg, VOCAB, LENGTH).double().eval()


@pytest.mark.parametrize("name", MODELS.names())
def test_step_path_matches_whole_sequence_path(name):
    model = make(name)
    tokens = torch.randint(0, VOCAB, (3, LENGTH))
    with torch.no_grad():
        full = model(tokens)
        state = model.init_state(3)
        stepped = []
        for t in range(LENGTH):
            logits, state = model.step(tokens[:, t], state)
            stepped.append(logits)
    torch.testing.assert_close(torch.stack(stepped, 1), full, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", MODELS.names())
def test_whole_sequence_path_is_causal(name):
    model = make(name)
    tokens = torch.randint(0, VOCAB, (2, LENGTH))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % VOCAB
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[:, :10], model(changed)[:, :10])


@pytest.mark.parametrize("name", MODELS.names())
def test_backbone_initialisation_leaves_mixers_alone(name):
    model = make(name)
    before = {k: v.clone() for k, v in model.blocks.state_dict().items() if ".mixer." in k}
    model._init_own_parameters()
    after = model.blocks.state_dict()
    assert before and all(torch.equal(before[k], after[k]) for k in before)


def test_lstm_keeps_its_forget_gate_bias():
    model = make("lstm")
    lstm = model.blocks[0].mixer.lstm
    torch.testing.assert_close(lstm.bias_ih_l0[32:64], torch.ones(32, dtype=torch.double))


def test_sinusoidal_and_no_positions_build_and_agree_with_steps():
    for positions in ("sinusoidal", "none"):
        model = make("transformer", positions=positions)
        tokens = torch.randint(0, VOCAB, (2, 8))
        with torch.no_grad():
            state = model.init_state(2)
            for t in range(8):
                logits, state = model.step(tokens[:, t], state)
            torch.testing.assert_close(logits, model(tokens)[:, -1])


def test_too_long_a_sequence_is_refused():
    model = make("transformer")
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.zeros(1, LENGTH + 1, dtype=torch.long))


def test_token_embedding_follows_embed_std():
    default, wide = make("transformer"), make("transformer", embed_std=1.0)
    assert default.embed.weight.std().item() == pytest.approx(0.02, rel=0.15)
    assert wide.embed.weight.std().item() == pytest.approx(1.0, rel=0.15)
    assert wide.head.weight.std().item() == pytest.approx(0.02, rel=0.15)
