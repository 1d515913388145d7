"""Fast paths against their references, and the papers' details each mixer must get right."""
import pytest
import torch

from sepbench.config import ModelConfig
from sepbench.models import build_model
from sepbench.models.mixers.linear import feature_map, linear_attention_chunked, linear_attention_reference
from sepbench.models.mixers.retention import retention_chunkwise, retention_parallel
from sepbench.models.mixers.retnet import CHUNKWISE_FROM, head_decays
from sepbench.models.mixers.selective_scan import selective_scan, selective_scan_reference
from sepbench.models.mixers.sparse import allowed_mask, default_block_size


def eq6_allowed(i: int, j: int, block: int, k: int, c: int) -> bool:
    """Yang et al. eq. 6 literally, 1-indexed: i - kB < j <= i, or (j - 1) mod B >= B - c (and j <= i)."""
    return j <= i and (i - k * block < j or (j - 1) % block >= block - c)


@pytest.mark.parametrize("block,k,c", [(4, 1, 1), (4, 2, 1), (3, 1, 2), (8, 1, 1)])
def test_sparse_mask_is_equation_6(block, k, c):
    length = 23
    expected = torch.tensor([[eq6_allowed(i, j, block, k, c) for j in range(1, length + 1)] for i in range(1, length + 1)])
    assert torch.equal(allowed_mask(length, block, k, c), expected)


def test_sparse_default_block_size_follows_the_paper():
    # Yang et al. sec. 6.1: B = 2^floor(log2 sqrt(L)), which is 8/8/16/16 for L = 87/221/355/505
    assert [default_block_size(n) for n in (87, 221, 355, 505)] == [8, 8, 16, 16]


def sparse_pair(length: int, **options) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    fast = build_model(ModelConfig(name="sparse_transformer", layers=2, width=16, heads=2, options=options), 9, length)
    torch.manual_seed(0)
    dense = build_model(ModelConfig(name="sparse_transformer", layers=2, width=16, heads=2,
                                    options={**options, "dense": True}), 9, length)
    return fast.double(), dense.double()


@pytest.mark.parametrize("length,options", [(30, {}), (37, {"block": 4, "k": 2}), (21, {"block": 5, "c": 2}), (3, {"block": 4})])
def test_sparse_block_path_matches_dense_mask_reference(length, options):
    fast, dense = sparse_pair(length, **options)
    tokens = torch.randint(0, 9, (2, length))
    logits = fast(tokens)
    torch.testing.assert_close(logits, dense(tokens), rtol=1e-10, atol=1e-10)
    logits.sum().backward()
    dense(tokens).sum().backward()
    for (name, a), (_, b) in zip(fast.named_parameters(), dense.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-10, msg=name)


def test_sparse_block_path_scores_far_fewer_pairs_than_dense():
    fast, dense = sparse_pair(1024)
    assert fast.blocks[0].mixer.flops(1024) * 4 < dense.blocks[0].mixer.flops(1024)


@pytest.mark.parametrize("length,chunk", [(1, 4), (17, 4), (16, 16), (33, 64), (20, 7)])
def test_linear_chunked_form_matches_quadratic_reference(length, chunk):
    torch.manual_seed(length)
    q, k = (feature_map(torch.randn(2, 3, length, 5, dtype=torch.double)) for _ in range(2))
    v = torch.randn(2, 3, length, 5, dtype=torch.double)
    torch.testing.assert_close(linear_attention_chunked(q, k, v, chunk), linear_attention_reference(q, k, v))


def test_chunked_linear_attention_is_causal_to_the_last_bit():
    """A later token of the same chunk must not reach an earlier output, not even through round-off."""
    torch.manual_seed(3)
    q, k = (feature_map(torch.randn(2, 3, 24, 5)) for _ in range(2))
    v = torch.randn(2, 3, 24, 5)
    before = linear_attention_chunked(q, k, v, 8)
    k[:, :, 21], v[:, :, 21] = feature_map(torch.randn(2, 3, 5)), torch.randn(2, 3, 5)
    after = linear_attention_chunked(q, k, v, 8)
    assert torch.equal(after[:, :, :21], before[:, :, :21])


def test_linear_state_is_the_prefix_sum_of_equations_16_to_19():
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="linear_transformer", layers=1, width=8, heads=2), 5, 10).double()
    mixer = model.blocks[0].mixer
    x = torch.randn(1, 6, 8, dtype=torch.double)
    state = mixer.init_state(1, x.device, x.dtype)
    for t in range(6):
        _, state = mixer.step(x[:, t], state)
    _, k, v = mixer._split(x)  # [1, T, H, d]
    torch.testing.assert_close(state.s, torch.einsum("bthi,bthj->bhij", k, v))
    torch.testing.assert_close(state.z, k.sum(1))


@pytest.mark.parametrize("length,chunk", [(1, None), (10, None), (37, 5), (64, 64), (50, 1), (300, None), (40, 100)])
def test_mamba_chunked_scan_matches_step_by_step_reference(length, chunk):
    torch.manual_seed(length)
    batch, inner, state = 2, 3, 4
    delta = torch.rand(batch, length, inner, dtype=torch.double, requires_grad=True)
    a = (-torch.rand(inner, state, dtype=torch.double) * 3).requires_grad_()
    u, b, c = (torch.randn(batch, length, d, dtype=torch.double, requires_grad=True) for d in (inner, state, state))
    inputs = (delta, a, u, b, c)
    fast = selective_scan(*inputs, chunk=chunk)
    slow = selective_scan_reference(*inputs)
    torch.testing.assert_close(fast, slow)
    weights = torch.randn_like(slow)
    fast_grads = torch.autograd.grad((fast * weights).sum(), inputs, materialize_grads=True)
    slow_grads = torch.autograd.grad((slow * weights).sum(), inputs)
    for fast_grad, slow_grad in zip(fast_grads, slow_grads):
        torch.testing.assert_close(fast_grad, slow_grad)


def test_mamba_chunked_scan_backward_passes_gradcheck():
    torch.manual_seed(0)
    delta = torch.rand(2, 7, 3, dtype=torch.double)
    a = -torch.rand(3, 2, dtype=torch.double) * 2
    u, b, c = (torch.randn(2, 7, d, dtype=torch.double) for d in (3, 2, 2))
    inputs = tuple(x.requires_grad_() for x in (delta, a, u, b, c))
    assert torch.autograd.gradcheck(lambda *x: selective_scan(*x, chunk=3), inputs)


def test_mamba_chunked_scan_runs_without_grad():
    torch.manual_seed(0)
    delta, u = torch.rand(1, 9, 2, requires_grad=True), torch.randn(1, 9, 2)
    a, b, c = -torch.rand(2, 3), torch.randn(1, 9, 3), torch.randn(1, 9, 3)
    with torch.no_grad():
        fast = selective_scan(delta, a, u, b, c, chunk=4)
    assert not fast.requires_grad
    torch.testing.assert_close(fast, selective_scan_reference(delta, a, u, b, c))


def test_mamba_chunked_scan_refuses_mixed_dtypes():
    x, bc = torch.rand(1, 4, 2), torch.rand(1, 4, 3)
    with pytest.raises(TypeError, match="one dtype"):
        selective_scan(x, -torch.rand(2, 3, dtype=torch.double), x, bc, bc)


def test_mamba_selection_depends_on_the_input():
    torch.manual_seed(0)
    mixer = build_model(ModelConfig(name="mamba", layers=1, width=16), 5, 8).blocks[0].mixer
    delta, b, c = mixer._ssm_inputs(torch.randn(2, 8, mixer.inner))
    assert delta.min() > 0 and delta[0].std(0).mean() > 0 and b[0].std(0).mean() > 0 and c[0].std(0).mean() > 0


def test_retnet_decays_are_one_per_head_exactly_in_a_float64_model():
    exact = torch.tensor([1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128, 1 - 1 / 256], dtype=torch.double)
    assert torch.allclose(head_decays(4), exact)
    mixer = build_model(ModelConfig(name="retnet", layers=1, width=16, heads=4), 5, 8).double().blocks[0].mixer
    assert torch.allclose(mixer.log_decay.exp(), exact, rtol=1e-15, atol=0)


def test_dss_starts_from_the_hippo_normal_spectrum():
    mixer = build_model(ModelConfig(name="dss", layers=1, width=4, options={"state": 8}), 5, 8).blocks[0].mixer
    real = -mixer.log_neg_real.exp()
    assert torch.allclose(real, torch.full_like(real, -0.5)) and (mixer.imag > 0).all()
    assert torch.all(mixer.imag[1:] > mixer.imag[:-1])


def test_unknown_mixer_option_is_a_config_error():
    from sepbench.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match="sparse_transformer"):
        RunConfig.build({"model": {"name": "sparse_transformer", "options": {"window": 3}}})


def test_mamba_model_with_chunked_scan_matches_the_reference_scan():
    tokens = torch.randint(0, 9, (2, 30))
    outputs = []
    for scan in ("chunked", "reference"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(name="mamba", layers=2, width=16, options={"scan": scan}), 9, 30).double()
        outputs.append(model(tokens))
    torch.testing.assert_close(outputs[0], outputs[1])


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_mamba_chunked_scan_on_cuda_matches_the_reference():
    torch.manual_seed(0)
    delta = torch.rand(2, 300, 8, device="cuda", requires_grad=True)
    a = (-torch.rand(8, 4, device="cuda") * 3).requires_grad_()
    u, b, c = (torch.randn(2, 300, d, device="cuda", requires_grad=True) for d in (8, 4, 4))
    inputs = (delta, a, u, b, c)
    fast, slow = selective_scan(*inputs), selective_scan_reference(*inputs)
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
    fast_grads = torch.autograd.grad(fast.sum(), inputs)
    for fast_grad, slow_grad in zip(fast_grads, torch.autograd.grad(slow.sum(), inputs)):
        torch.testing.assert_close(fast_grad, slow_grad, atol=1e-3, rtol=1e-3)


@needs_cuda
def test_mamba_ssm_kernel_matches_the_reference_scan():
    pytest.importorskip("mamba_ssm")
    tokens = torch.randint(0, 9, (2, 30), device="cuda")
    outputs = []
    for options in ({"kernel": True}, {"kernel": False, "scan": "reference"}):
        torch.manual_seed(0)
        model = build_model(ModelConfig(name="mamba", layers=2, width=16, options=options), 9, 30).cuda()
        outputs.append(model(tokens))
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-4, rtol=1e-3)


def retention_recurrence(q, k, v, log_decay):
    """Sun et al. eq. 6 step by step: S_n = gamma S_{n-1} + k_n^T v_n, o_n = q_n S_n."""
    state = torch.zeros(*q.shape[:2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    gamma = log_decay.exp()[None, :, None, None]
    outputs = []
    for n in range(q.shape[2]):
        state = gamma * state + k[:, :, n, :, None] * v[:, :, n, None, :]
        outputs.append((q[:, :, n, None, :] @ state)[:, :, 0])
    return torch.stack(outputs, dim=2)


@pytest.mark.parametrize("length,chunk", [(1, 4), (1, 1), (17, 4), (20, 7), (16, 16), (33, 64), (40, 1)])
def test_retention_chunkwise_parallel_and_recurrence_agree_with_gradients(length, chunk):
    torch.manual_seed(length + chunk)
    q, k, v = (torch.randn(2, 3, length, 6, dtype=torch.double, requires_grad=True) for _ in range(3))
    log_decay = head_decays(3).log()
    weights = torch.randn(2, 3, length, 6, dtype=torch.double)
    forms = [retention_chunkwise(q, k, v, log_decay, chunk), retention_parallel(q, k, v, log_decay),
             retention_recurrence(q, k, v, log_decay)]
    grads = [torch.autograd.grad((y * weights).sum(), (q, k, v)) for y in forms]
    for y, grad in zip(forms[1:], grads[1:]):
        torch.testing.assert_close(forms[0], y, rtol=1e-10, atol=1e-12)
        for a, b in zip(grads[0], grad):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_retention_chunkwise_matches_parallel_in_float32():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 16) for _ in range(3))
    log_decay = head_decays(4).log().float()
    torch.testing.assert_close(retention_chunkwise(q, k, v, log_decay, 32), retention_parallel(q, k, v, log_decay),
                               rtol=1e-4, atol=1e-4)


def retnet_mixer(**options) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(name="retnet", layers=1, width=16, heads=2, options=options), 5, 32).blocks[0].mixer.double()


@pytest.mark.parametrize("length", [1, 4, 11])
def test_retnet_mixer_forms_and_steps_agree_through_norm_and_gate(length):
    x = torch.randn(2, length, 16, dtype=torch.double)
    runs = []
    for form in ("chunkwise", "parallel", "step"):
        mixer = retnet_mixer(form="parallel" if form == "step" else form, chunk=4)
        if form == "step":
            state = mixer.init_state(2, x.device, x.dtype)
            steps = []
            for t in range(length):
                y, state = mixer.step(x[:, t], state)
                steps.append(y)
            y = torch.stack(steps, 1)
        else:
            y = mixer(x)
        y.square().sum().backward()
        runs.append((y, {name: p.grad for name, p in mixer.named_parameters()}))
    for y, grads in runs[1:]:
        torch.testing.assert_close(y, runs[0][0], rtol=1e-10, atol=1e-12)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, runs[0][1][name], rtol=1e-9, atol=1e-11, msg=name)


def test_retnet_auto_form_switches_at_the_measured_crossover():
    auto, parallel, chunkwise = retnet_mixer(), retnet_mixer(form="parallel"), retnet_mixer(form="chunkwise")
    assert not auto.chunkwise(CHUNKWISE_FROM - 1) and auto.chunkwise(CHUNKWISE_FROM)
    assert not parallel.chunkwise(10_000) and chunkwise.chunkwise(1)


@pytest.mark.parametrize("options", [{"form": "chunkwise", "chunk": 4}, {"form": "auto"}])
def test_retnet_chunkwise_flops_match_the_counter(options):
    from sepbench.models.accounting import forward_flops, measure_flops

    torch.manual_seed(0)
    model = build_model(ModelConfig(name="retnet", layers=1, width=16, heads=2, options=options), 5, 256)
    for length in (9, CHUNKWISE_FROM + 3):
        assert measure_flops(model, torch.zeros(1, length, dtype=torch.long)) == forward_flops(model, length), length


@pytest.mark.parametrize("options,problem", [({"form": "fast"}, "form"), ({"chunk": 0}, "chunk")])
def test_bad_retnet_option_is_a_one_line_config_error(options, problem):
    from sepbench.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match=problem) as caught:
        RunConfig.build({"model": {"name": "retnet", "options": options}})
    assert "\n" not in str(caught.value)


def softmax_model(max_len: int, positions: str = "learned") -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(name="transformer", layers=2, width=16, heads=2, positions=positions), 7, max_len).double().eval()


@torch.no_grad()
def test_kv_cache_is_written_in_place_up_to_max_len():
    model = softmax_model(12)
    state = model.init_state(2)
    caches = [state.blocks[0]]
    for t in range(12):
        _, state = model.step(torch.full((2,), t % 7), state)
        caches.append(state.blocks[0])
    assert caches[0].store.capacity == 12
    assert all(c.store is caches[0].store for c in caches) and caches[-1].length == 12


@torch.no_grad()
def test_kv_cache_grows_past_its_capacity_and_still_matches_the_whole_sequence():
    model = softmax_model(4, positions="none")
    tokens = torch.randint(0, 7, (2, 11))
    state = model.init_state(2)
    for t in range(11):
        logits, state = model.step(tokens[:, t], state)
    assert state.blocks[0].store.capacity == 16
    torch.testing.assert_close(logits, model(tokens)[:, -1], rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_stepping_an_older_kv_state_again_leaves_the_newer_one_intact():
    model = softmax_model(10)
    tokens = torch.randint(0, 7, (1, 6))
    state = model.init_state(1)
    for t in range(3):
        _, state = model.step(tokens[:, t], state)
    branch_point = state
    for t in range(3, 6):
        _, state = model.step(tokens[:, t], state)
    other, _ = model.step(torch.tensor([(int(tokens[0, 3]) + 1) % 7]), branch_point)
    again, _ = model.step(tokens[:, 3], branch_point)
    last, _ = model.step(tokens[:, 0], state)
    fresh = model(torch.cat([tokens, tokens[:, :1]], dim=1))
    torch.testing.assert_close(again, fresh[:, 3], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, fresh[:, 6], rtol=1e-10, atol=1e-10)
    assert not torch.allclose(other, again)


def test_softmax_steps_under_autograd_give_the_whole_sequence_gradients():
    tokens = torch.randint(0, 7, (2, 6))
    stepped, whole = softmax_model(8), softmax_model(8)
    state = stepped.init_state(2)
    total = 0
    for t in range(6):
        logits, state = stepped.step(tokens[:, t], state)
        total = total + logits.square().sum()
    total.backward()
    whole(tokens).square().sum().backward()
    for (name, a), (_, b) in zip(stepped.named_parameters(), whole.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-10, msg=name)
