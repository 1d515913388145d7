import pytest
import torch

from sepbench.conformance import mixers
from sepbench.models import MODELS

VOCAB, LENGTH = mixers.VOCAB, mixers.LENGTH
make = mixers.path_model


CONTRACT = [mixers.step_matches_parallel, mixers.causal, mixers.initialisation_left_alone, mixers.parameters_train]


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
@pytest.mark.parametrize("name", MODELS.names())
def test_every_mixer_keeps_the_contract(name, check):
    outcome = check(name)
    assert outcome.status == "pass", outcome.detail


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
