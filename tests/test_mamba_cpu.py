"""Mamba's fused CPU kernels against the step-by-step reference, and the fallback when they cannot be built."""
from __future__ import annotations

import logging
import platform
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.config import ConfigError, ModelConfig, RunConfig
from sepbench.models import build_model
from sepbench.models.mixers import cpu_kernels, mamba_cpu
from sepbench.models.mixers.mamba_cpu import fused_causal_conv, fused_selective_scan, kernel_library
from sepbench.models.mixers.onednn_linear import onednn_available, onednn_preferred
from sepbench.models.mixers.selective_scan import selective_scan_reference
from sepbench.train import Trainer, train

LINEAR = "onednn" if onednn_preferred() else "torch"
"""The products ``linear: auto`` takes on this machine."""
LINEAR_PATHS = {"auto": LINEAR, "torch": "torch", **({"onednn": "onednn"} if onednn_available() else {})}

if cpu_kernels.compiler() is None:
    pytest.skip("no C++ compiler: Mamba trains with the chunked scan here", allow_module_level=True)


def scan_inputs(batch: int, length: int, inner: int, state: int = 16, dtype: torch.dtype = torch.float32,
                seed: int = 0) -> list[torch.Tensor]:
    """Delta > 0 (softplus) and A < 0, as Mamba feeds its scan."""
    g = torch.Generator().manual_seed(seed)
    delta = F.softplus(torch.randn(batch, length, inner, generator=g, dtype=dtype) - 1)
    a = -torch.rand(inner, state, generator=g, dtype=dtype) * 4 - 0.05
    u, b, c = (torch.randn(batch, length, n, generator=g, dtype=dtype) for n in (inner, state, state))
    return [x.requires_grad_() for x in (delta, a, u, b, c)]


def relative_error(found: torch.Tensor, expected: torch.Tensor) -> float:
    return float((found - expected).abs().max().detach() / expected.abs().max().detach().clamp_min(1e-30))


def test_the_kernels_build():
    assert kernel_library() is not None


@pytest.mark.parametrize("length,batch,inner", [(1, 1, 1), (2, 64, 128), (7, 1, 128), (7, 64, 1), (100, 64, 128),
                                                (100, 1, 1), (401, 1, 128), (401, 64, 1)])
def test_fused_scan_matches_the_reference_in_float32(length, batch, inner):
    inputs = scan_inputs(batch, length, inner, seed=length + batch)
    grad = torch.randn(batch, length, inner, generator=torch.Generator().manual_seed(1))
    fused = fused_selective_scan(*inputs)
    reference = selective_scan_reference(*inputs)
    assert relative_error(fused, reference) < 1e-5
    names = ("delta", "A", "u", "B", "C")
    for name, g_fused, g_reference in zip(names, torch.autograd.grad(fused, inputs, grad),
                                          torch.autograd.grad(reference, inputs, grad)):
        if length == 1 and name == "A":  # no state decays before the first step: the gradient is exactly 0
            assert torch.equal(g_fused, torch.zeros_like(g_fused)) and torch.equal(g_reference, g_fused)
            continue
        assert relative_error(g_fused, g_reference) < 1e-5, name


def test_fused_scan_takes_non_contiguous_inputs():
    delta, a, u, b, c = (x.detach() for x in scan_inputs(3, 20, 8))
    views = [delta.transpose(0, 1).contiguous().transpose(0, 1), a.t().contiguous().t(),
             u.transpose(1, 2).contiguous().transpose(1, 2), torch.cat([b, c], -1)[..., :16], torch.cat([b, c], -1)[..., 16:]]
    assert not any(v.is_contiguous() for v in views)
    views = [v.requires_grad_() for v in views]
    fused = fused_selective_scan(*views)
    reference = selective_scan_reference(*views)
    assert relative_error(fused, reference) < 1e-5
    for g_fused, g_reference in zip(torch.autograd.grad(fused.sum(), views), torch.autograd.grad(reference.sum(), views)):
        assert relative_error(g_fused, g_reference) < 1e-5


@pytest.mark.parametrize("length", [1, 2, 15, 16, 17, 33])
def test_fused_scan_passes_gradcheck(length):
    inputs = scan_inputs(2, length, 3, state=4, dtype=torch.float64, seed=length)
    assert torch.autograd.gradcheck(fused_selective_scan, inputs)


@pytest.mark.parametrize("state", [1, 3, 6, 11])
def test_fused_scan_passes_gradcheck_at_other_state_sizes(state):
    inputs = scan_inputs(2, 17, 3, state=state, dtype=torch.float64, seed=state)
    assert torch.autograd.gradcheck(fused_selective_scan, inputs)
    skip, z = torch.randn(3, dtype=torch.float64).requires_grad_(), torch.randn(2, 17, 3, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(fused_selective_scan, (*inputs, skip, z))


@pytest.fixture(scope="module")
def flag_caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernel cache kept across this module's tests, so that each flag's build is made once."""
    return tmp_path_factory.mktemp("kernels")


@contextmanager
def kernels_built_with(flag: str, monkeypatch: pytest.MonkeyPatch, caches: Path) -> Iterator[None]:
    """Inside: Mamba's kernels from a build with the compiler flag ``flag`` added, cached under ``caches``."""
    cache = caches / flag.lstrip("-")
    with monkeypatch.context() as patch:  # undone on leaving: a second build must not stack its flag on this one
        patch.setenv("SEPBENCH_KERNEL_CACHE", str(cache))
        patch.setattr(cpu_kernels, "FLAGS", [*cpu_kernels.FLAGS, flag])
        cpu_kernels._load.cache_clear()
        try:
            assert kernel_library() is not None, f"Mamba's kernels do not build with {flag}"  # generic vectors
            assert list(cache.glob("mamba_cpu-*.so"))  # the build was made and is the one used
            yield
        finally:
            cpu_kernels._load.cache_clear()


@pytest.mark.parametrize("length", [1, 17, 33])
def test_register_blocked_backward_passes_gradcheck(length, monkeypatch, flag_caches):
    """N = 16 with the channels a multiple of one vector (8 doubles) takes the register-blocked backward (built by
    default only for AVX-512, here forced on), gated and forming Delta by softplus as Mamba's block calls it."""
    delta, a, u, b, c = scan_inputs(2, length, 16, state=16, dtype=torch.float64, seed=length)
    g = torch.Generator().manual_seed(5)
    skip, bias = (torch.randn(16, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2))
    z = torch.randn(2, length, 16, generator=g, dtype=torch.float64).requires_grad_()
    with kernels_built_with("-DSEPBENCH_BLOCKED=1", monkeypatch, flag_caches):
        assert torch.autograd.gradcheck(fused_selective_scan, (delta, a, u, b, c))
        scan = lambda *x: fused_selective_scan(*x, delta_softplus=True)  # noqa: E731
        assert torch.autograd.gradcheck(scan, (delta, a, u, b, c, skip, z, bias))


def test_register_blocked_backward_matches_the_row_wise_one(monkeypatch, flag_caches):
    """The same gated softplus scan at N = 16, E = 128, through a build with the blocked backward forced on and one
    with it off (-DSEPBENCH_BLOCKED=0: the row-wise backward for every shape)."""
    delta, a, u, b, c = scan_inputs(4, 37, 128, seed=9)
    g = torch.Generator().manual_seed(6)
    skip, bias = (torch.randn(128, generator=g).requires_grad_() for _ in range(2))
    z = torch.randn(4, 37, 128, generator=g).requires_grad_()
    inputs, grad = (delta, a, u, b, c, skip, z, bias), torch.randn(4, 37, 128, generator=g)

    def gradients(flag: str) -> tuple[torch.Tensor, ...]:
        with kernels_built_with(flag, monkeypatch, flag_caches):
            out = fused_selective_scan(*inputs, delta_softplus=True)
            return torch.autograd.grad(out, inputs, grad)

    blocked, row_wise = gradients("-DSEPBENCH_BLOCKED=1"), gradients("-DSEPBENCH_BLOCKED=0")
    builds = [next((flag_caches / f"DSEPBENCH_BLOCKED={v}").glob("mamba_cpu-*.so")).read_bytes() for v in (1, 0)]
    assert builds[0] != builds[1]  # the flag chose different code, so the two backwards compared are not one
    for name, one, other in zip(("delta", "A", "u", "B", "C", "D", "z", "delta_bias"), blocked, row_wise):
        assert relative_error(one, other) < 1e-6, name


def test_gated_scan_passes_gradcheck_and_matches_the_block_formula():
    delta, a, u, b, c = scan_inputs(2, 19, 3, state=4, dtype=torch.float64)
    skip, z = torch.randn(3, dtype=torch.float64).requires_grad_(), torch.randn(2, 19, 3, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(fused_selective_scan, (delta, a, u, b, c, skip, z))
    expected = (selective_scan_reference(delta, a, u, b, c) + skip * u) * F.silu(z)
    torch.testing.assert_close(fused_selective_scan(delta, a, u, b, c, skip, z), expected)


@pytest.mark.parametrize("length,batch,inner", [(1, 1, 1), (7, 64, 128), (100, 64, 128), (401, 1, 128)])
def test_scan_forming_delta_by_softplus_matches_the_reference_in_float32(length, batch, inner):
    delta, a, u, b, c = scan_inputs(batch, length, inner, seed=length)
    g = torch.Generator().manual_seed(2)
    pre = (4 * torch.randn(batch, length, inner, generator=g)).requires_grad_()  # both sides of softplus' bend
    bias, skip = (torch.randn(inner, generator=g).requires_grad_() for _ in range(2))
    z = torch.randn(batch, length, inner, generator=g).requires_grad_()
    inputs = (pre, a, u, b, c, skip, z, bias)
    fused = fused_selective_scan(pre, a, u, b, c, skip, z, bias, delta_softplus=True)
    formed = F.softplus(pre + bias)
    reference = (selective_scan_reference(formed, a, u, b, c) + skip * u) * F.silu(z)
    assert relative_error(fused, reference) < 1e-5
    grad = torch.randn(batch, length, inner, generator=g)
    names = ("delta", "A", "u", "B", "C", "D", "z", "delta_bias")
    for name, g_fused, g_reference in zip(names, torch.autograd.grad(fused, inputs, grad),
                                          torch.autograd.grad(reference, inputs, grad)):
        if length == 1 and name == "A":
            continue
        assert relative_error(g_fused, g_reference) < 1e-5, name


@pytest.mark.parametrize("softplus", [True, False])
def test_scan_forming_delta_passes_gradcheck(softplus):
    _, a, u, b, c = scan_inputs(2, 19, 3, state=4, dtype=torch.float64)
    g = torch.Generator().manual_seed(4)
    pre, bias, skip = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((2, 19, 3), (3,), (3,)))
    z = torch.randn(2, 19, 3, generator=g, dtype=torch.float64)
    if not softplus:  # Delta = pre + bias must stay positive, as Mamba's is
        pre, bias = pre.abs() + 0.1, bias.abs()
    pre, bias, skip, z = (x.requires_grad_() for x in (pre, bias, skip, z))
    scan = lambda *x: fused_selective_scan(*x, delta_softplus=softplus)  # noqa: E731
    assert torch.autograd.gradcheck(scan, (pre, a, u, b, c, skip, z, bias))
    positive = (pre.detach().abs() + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(scan, (positive, a, u, b, c, None, None, None))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the flush is x86's MXCSR mode")
def test_the_kernels_flush_subnormals_and_leave_the_callers_mode_as_it_was():
    """A subnormal B is read as zero inside the scan (the speed of Intel cores needs it), and torch's own
    arithmetic after the call still keeps subnormals."""
    tiny = torch.tensor(1e-39)
    assert tiny.item() != 0.0 and (tiny * 0.5).item() != 0.0
    delta, a, u = torch.ones(1, 1, 1), -torch.ones(1, 16), torch.ones(1, 1, 1)
    b, c = torch.full((1, 1, 16), 1e-39), torch.ones(1, 1, 16)
    assert selective_scan_reference(delta, a, u, b, c).item() != 0.0
    assert fused_selective_scan(delta, a, u, b, c).item() == 0.0
    assert (tiny * 0.5).item() != 0.0


def test_fused_conv_matches_torch_and_passes_gradcheck():
    conv = torch.nn.Conv1d(5, 5, 4, groups=5, padding=3).double()
    x = torch.randn(3, 11, 5, dtype=torch.float64, requires_grad=True)
    expected = F.silu(conv(x.transpose(1, 2))[..., :11].transpose(1, 2))
    torch.testing.assert_close(fused_causal_conv(x, conv.weight, conv.bias), expected)
    assert torch.autograd.gradcheck(fused_causal_conv, (x, conv.weight, conv.bias))
    short = torch.randn(2, 2, 5, dtype=torch.float64, requires_grad=True)  # shorter than the kernel
    assert torch.autograd.gradcheck(fused_causal_conv, (short, conv.weight, conv.bias))


def test_fused_scan_without_grad_and_over_threads_gives_the_same_numbers():
    inputs = [x.detach() for x in scan_inputs(5, 40, 16)]
    one = fused_selective_scan(*inputs)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert torch.equal(fused_selective_scan(*inputs), one)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(fused_selective_scan(*inputs), one)


def test_mamba_model_fused_matches_reference_scan_in_float64():
    outputs = {}
    for scan in ("fused", "reference"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(name="mamba", layers=2, width=16, options={"scan": scan}), 9, 40).double()
        tokens = torch.randint(0, 9, (3, 37), generator=torch.Generator().manual_seed(1))
        out = model(tokens)
        out.sin().sum().backward()
        outputs[scan] = (out.detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(outputs["fused"][0], outputs["reference"][0])
    for name, grad in outputs["fused"][1].items():
        torch.testing.assert_close(grad, outputs["reference"][1][name], msg=name)


def mamba_run(options: dict[str, str], steps: int = 200) -> RunConfig:
    return RunConfig.build({"task": {"name": "index_lookup", "length": 10},
                            "model": {"name": "mamba", "layers": 1, "width": 16, "options": options},
                            "train": {"steps": steps, "eval_every": steps, "eval_samples": 64, "batch_size": 16},
                            "device": "cpu"})


@pytest.mark.parametrize("option, paths", [("scan", {"auto": "fused", "chunked": "chunked"}),
                                           ("linear", LINEAR_PATHS)])
def test_either_path_trains_to_the_same_loss_and_records_it(option, paths):
    losses = {}
    for choice, path in paths.items():
        trainer = Trainer(mamba_run({option: choice}))
        trainer.train_until(200)
        result = trainer.finish()
        losses[choice] = result.metrics["loss"]
        assert result.compute_paths[option] == path
    assert max(losses.values()) - min(losses.values()) < 1e-4


def test_the_same_seed_gives_the_same_metrics_with_the_fused_scan():
    first, second = train(mamba_run({"scan": "fused"}, 30)), train(mamba_run({"scan": "fused"}, 30))
    assert first.metrics == second.metrics
    assert [(p.step, p.loss, p.accuracy) for p in first.curve] == [(p.step, p.loss, p.accuracy) for p in second.curve]


def test_without_a_compiler_mamba_falls_back_to_the_chunked_scan_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(cpu_kernels, "compiler", lambda: None)
    cpu_kernels._load.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
            model = build_model(ModelConfig(name="mamba", layers=2, width=8), 5, 10)
            assert model.compute_paths(torch.device("cpu")) == {"scan": "chunked", "linear": LINEAR}
            model(torch.zeros(2, 6, dtype=torch.long)).sum().backward()
        assert len(caplog.records) == 1 and "no C++ compiler" in caplog.records[0].message
        fused = build_model(ModelConfig(name="mamba", layers=1, width=8, options={"scan": "fused"}), 5, 10)
        with pytest.raises(ConfigError, match="allowed elsewhere: auto, chunked, reference"):
            fused(torch.zeros(1, 3, dtype=torch.long))
    finally:
        cpu_kernels._load.cache_clear()


def test_a_failed_build_falls_back_with_the_compiler_s_reason(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("SEPBENCH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_kernels, "FLAGS", [*cpu_kernels.FLAGS, "-fno-such-flag"])
    cpu_kernels._load.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
            assert kernel_library() is None
        assert "did not build" in caplog.text and "no-such-flag" in caplog.text
        assert list(tmp_path.rglob("*.so")) == []
    finally:
        cpu_kernels._load.cache_clear()


@pytest.fixture
def kernels_off(monkeypatch):
    """SEPBENCH_CPU_KERNELS=0 read afresh (the library is loaded once a process), and the kernels back after."""
    monkeypatch.setenv("SEPBENCH_CPU_KERNELS", "0")
    cpu_kernels._load.cache_clear()
    yield
    monkeypatch.delenv("SEPBENCH_CPU_KERNELS")
    cpu_kernels._load.cache_clear()


def test_kernels_can_be_turned_off(kernels_off):
    assert kernel_library() is None
    model = build_model(ModelConfig(name="mamba", layers=1, width=8), 5, 10)
    assert model.compute_paths(torch.device("cpu")) == {"scan": "chunked", "linear": LINEAR}


def test_the_build_is_cached_by_source_and_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("SEPBENCH_KERNEL_CACHE", str(tmp_path))
    first = cpu_kernels.build(mamba_cpu.SOURCE, cpu_kernels.compiler())
    built_at = first.stat().st_mtime_ns
    assert cpu_kernels.build(mamba_cpu.SOURCE, cpu_kernels.compiler()) == first
    assert first.stat().st_mtime_ns == built_at
    monkeypatch.setattr(cpu_kernels, "FLAGS", [*cpu_kernels.FLAGS, "-DSEPBENCH_OTHER_BUILD"])
    assert cpu_kernels.build(mamba_cpu.SOURCE, cpu_kernels.compiler()) != first


def test_transformer_runs_record_no_compute_path():
    model = build_model(ModelConfig(name="transformer", layers=1, width=8), 5, 10)
    assert model.compute_paths(torch.device("cpu")) == {}


def test_the_kernels_refuse_inputs_they_cannot_read():
    delta, a, u, b, c = (x.detach() for x in scan_inputs(2, 5, 3))
    with pytest.raises(ValueError, match="one dtype, float32 or float64; got .*A torch.float64"):
        fused_selective_scan(delta, a.double(), u, b, c)
    with pytest.raises(ValueError, match="one dtype"):
        fused_selective_scan(*(x.bfloat16() for x in (delta, a, u, b, c)))
    with pytest.raises(ValueError, match="skip D only with the gate z"):
        fused_selective_scan(delta, a, u, b, c, torch.ones(3))
    conv = torch.nn.Conv1d(3, 3, 4, groups=3, padding=3)
    with pytest.raises(ValueError, match="causal convolution takes CPU tensors of one dtype"):
        fused_causal_conv(u.double(), conv.weight, conv.bias)


def test_a_kernel_asked_for_where_it_cannot_run_is_one_line_and_exit_2(kernels_off, tmp_path):
    result = CliRunner().invoke(app, ["run", "--task", "index_lookup", "--model", "mamba", "--length", "20",
                                      "--steps", "5", "--store", str(tmp_path / "s.db"),
                                      "--set", "model.options.scan=fused"])
    assert result.exit_code == 2
    assert "mamba scan 'fused' needs a CPU device" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s.db").exists()
