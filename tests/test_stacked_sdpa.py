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


def test_unbatched_keys_a_member_dim_elsewhere_and_block_shapes_fold_too():
    """k and v shared by every member (no vmap dim), q batched along dim 1, 5-D blocks as the sparse mixer makes."""
    gen = torch.Generator().manual_seed(1)
    members, batch, heads, blocks, size, dim = 2, 3, 2, 4, 5, 4
    q = torch.randn(batch, members, heads, blocks, size, dim, generator=gen)
    k, v = (torch.randn(batch, heads, blocks, 2 * size, dim, generator=gen) for _ in range(2))
    mask = torch.rand(blocks, size, 2 * size, generator=gen) > 0.3
    mask[..., 0] = True
    stacked = vmap(lambda a: stacked_sdpa.attention(a, k, v, attn_mask=mask), in_dims=1)(q)
    alone = torch.stack([F.scaled_dot_product_attention(q[:, m], k, v, attn_mask=mask) for m in range(members)])
    torch.testing.assert_close(stacked, alone, rtol=0, atol=1e-6)


def test_a_mask_per_batch_row_reaches_every_members_rows_and_dropout_is_refused():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 1, 4, 8, generator=gen)
    mask = torch.rand(3, 1, 4, 4, generator=gen) > 0.4
    mask[..., 0] = True
    stacked = vmap(lambda a: stacked_sdpa.attention(a, a, a, attn_mask=mask))(q)
    alone = torch.stack([F.scaled_dot_product_attention(q[m], q[m], q[m], attn_mask=mask) for m in range(2)])
    torch.testing.assert_close(stacked, alone, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="no dropout"):
        vmap(lambda a: stacked_sdpa.attention(a, a, a, dropout_p=0.1))(q)
