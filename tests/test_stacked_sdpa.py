"""Attention under vmap (stacked runs): one fused call over the members folded into the batch, each member's
output and gradients as alone."""
import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap

from sepbench.models.mixers import stacked_sdpa


@pytest.mark.parametrize("masked", [False, True])
def test_members_fold_into_one_call_and_each_gets_its_own_result(monkeypatch, masked):
    members, batch, heads, length, dim = 3, 2, 2, 5, 4
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(members, batch, heads, length, dim, generator=gen, requires_grad=True) for _ in range(3))
    mask = torch.rand(length, length, generator=gen) > 0.3 if masked else None
    if masked:
        mask.fill_diagonal_(True)
    causal = not masked

    shapes = []
    real = F.scaled_dot_product_attention

    def spy(query, *args, **kwargs):
        shapes.append(tuple(query.shape))
        return real(query, *args, **kwargs)

    monkeypatch.setattr(stacked_sdpa.F, "scaled_dot_product_attention", spy)
    stacked = vmap(lambda a, b, c: stacked_sdpa.attention(a, b, c, attn_mask=mask, is_causal=causal))(q, k, v)
    assert shapes == [(members * batch, heads, length, dim)]

    alone = torch.stack([real(q[m], k[m], v[m], attn_mask=mask, is_causal=causal) for m in range(members)])
    torch.testing.assert_close(stacked, alone, rtol=0, atol=1e-6)
    weights = torch.randn(alone.shape, generator=gen)
    grads_stacked = torch.autograd.grad((stacked * weights).sum(), (q, k, v))
    grads_alone = torch.autograd.grad((alone * weights).sum(), (q, k, v))
    for got, want in zip(grads_stacked, grads_alone):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_mask_that_differs_by_member_is_refused():
    q = torch.randn(2, 1, 1, 3, 4)
    masks = torch.ones(2, 3, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="one mask shared by every member"):
        vmap(lambda a, m: stacked_sdpa.attention(a, a, a, attn_mask=m))(q, masks)
