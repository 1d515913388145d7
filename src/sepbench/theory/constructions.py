"""Hand-set Transformers from Bhattamishra et al. 2024 (Thms 1, 6, 7), built in sepbench's own model classes.

Each construction returns a ``SequenceModel`` made by ``build_model`` (the ``transformer`` mixer, one head,
learned positions) whose parameters are overwritten, and is scored by ``sepbench.train.loop.evaluate``, the
same function that scores trained models. Three things differ from a trained model, as the paper's model
(sec. 2) has no LayerNorm and uses ReLU feed-forward layers:

* LayerNorms are replaced by identities (``strip_norms``);
* ReLU is realised with the backbone's GELU MLP as GELU(s*a)/s with s = ``RELU_SHARPNESS``, equal to ReLU(a)
  up to s*|a|*Phi(-s*|a|), below 1e-20 wherever the constructions need it;
* the readout is the backbone's bias-free head applied to a constant-1 coordinate and the result slots.
SDPA's 1/sqrt(head_dim) scale is folded into W_Q. Everything runs in float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from sepbench.config import ConfigError, ModelConfig
from sepbench.models import SequenceModel, build_model
from sepbench.tasks import Task
from sepbench.tasks.equality import EqOne, EqRandom, Equality
from sepbench.tasks.lookup import IndexLookup
from sepbench.tasks.recall import NearestNeighbor
from sepbench.train.loop import evaluate

RELU_SHARPNESS = 200.0


def sign_codes(count: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Lemma 2 (App. B.3): ``count`` i.i.d. uniform vectors in {+-1/sqrt(k)}^k, nearly orthogonal for k = O(log N)."""
    return rng.choice([-1.0, 1.0], size=(count, width)) / math.sqrt(width)


def onehot_codes(count: int) -> np.ndarray:
    """Exactly orthonormal codes (k = count), which satisfy every coherence bound with no error."""
    return np.eye(count)


def coherence(codes: np.ndarray) -> float:
    """Largest |<T(i), T(j)>| over i != j."""
    gram = codes @ codes.T
    np.fill_diagonal(gram, 0.0)
    return float(np.abs(gram).max()) if len(codes) > 1 else 0.0


class Slots:
    """Names for disjoint coordinate ranges of the residual stream."""

    def __init__(self) -> None:
        self.ranges: dict[str, slice] = {}
        self.width = 0

    def add(self, name: str, size: int) -> slice:
        self.ranges[name] = slice(self.width, self.width + size)
        self.width += size
        return self.ranges[name]

    def __getitem__(self, name: str) -> slice:
        return self.ranges[name]


@dataclass
class Construction:
    """A hand-set model, the task it solves, and the numbers that describe it."""

    model: SequenceModel
    task: Task
    width: int
    code_width: int
    details: dict[str, float] = field(default_factory=dict)

    def accuracy(self, samples: int = 1000, seed: int = 0, chunk: int = 50) -> float:
        """Accuracy on fresh evaluation instances at N, through the trainer's evaluation function."""
        batch = self.task.sample_eval(samples, np.random.default_rng(seed))
        return evaluate(self.model, self.task, batch, chunk, torch.device("cpu"))[1]


def strip_norms(model: SequenceModel) -> SequenceModel:
    """Replace every LayerNorm by the identity (the paper's Transformer has none)."""
    for block in model.blocks:
        block.norm_mix = nn.Identity()
        if block.norm_mlp is not None:
            block.norm_mlp = nn.Identity()
    model.norm = nn.Identity()
    return model


def blank_transformer(layers: int, width: int, vocab: int, max_len: int, hidden: int) -> SequenceModel:
    """A one-head, norm-free float64 transformer from the zoo with every parameter zero."""
    ratio = max(1, -(-hidden // width))
    config = ModelConfig(name="transformer", layers=layers, width=width, heads=1, positions="learned",
                         mlp=True, mlp_ratio=ratio)
    model = strip_norms(build_model(config, vocab, max_len)).double().eval()
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    return model


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(array, dtype=torch.float64)


class BlockWriter:
    """Writes the attention (W_Q, W_K, W_V, W_O) and the ReLU MLP of one block, in residual coordinates."""

    def __init__(self, model: SequenceModel, layer: int) -> None:
        self.block = model.blocks[layer]
        self.width = model.config.width
        self.attn = self.block.mixer
        self.scale = math.sqrt(self.width)  # undo SDPA's 1/sqrt(head_dim) with one head
        self.hidden_used = 0

    def query_key(self, query: np.ndarray, key: np.ndarray, query_bias: np.ndarray | None = None,
                  key_bias: np.ndarray | None = None) -> None:
        """Scores <query @ x_i + query_bias, key @ x_j + key_bias>; matrices are [r, width]."""
        w = self.width
        rows = query.shape[0]
        weight, bias = self.attn.qkv.weight, self.attn.qkv.bias
        weight[:rows] = _tensor(query) * self.scale
        weight[w : w + rows] = _tensor(key)
        if query_bias is not None:
            bias[:rows] = _tensor(query_bias) * self.scale
        if key_bias is not None:
            bias[w : w + rows] = _tensor(key_bias)

    def value_out(self, source: slice, target: slice, factor: float = 1.0) -> None:
        """The attention output writes factor * (average of ``source``) into ``target``."""
        w = self.width
        size = source.stop - source.start
        value = self.attn.qkv.weight
        value[2 * w : 2 * w + size, source] = torch.eye(size, dtype=torch.float64)
        self.attn.out.weight[target, :size] = factor * torch.eye(size, dtype=torch.float64)

    def relu(self, read: np.ndarray, bias: float, write: np.ndarray) -> None:
        """One hidden unit: residual += write * ReLU(read . x + bias), read/write are [width] vectors."""
        s = RELU_SHARPNESS
        unit = self.hidden_used
        self.block.mlp.up.weight[unit] = _tensor(read) * s
        self.block.mlp.up.bias[unit] = bias * s
        self.block.mlp.down.weight[:, unit] = _tensor(write) / s
        self.hidden_used += 1


def _unit(width: int, index: int, value: float = 1.0) -> np.ndarray:
    vector = np.zeros(width)
    vector[index] = value
    return vector


def binary_code(symbols: int) -> np.ndarray:
    """rho: symbol -> its bits, [symbols, ceil(log2 symbols)] in {0, 1} (App. C.2)."""
    bits = max(1, math.ceil(math.log2(symbols)))
    return ((np.arange(symbols)[:, None] >> np.arange(bits)) & 1).astype(float)


def index_lookup(task: IndexLookup, code_width: int | None = None, seed: int = 0, eta: float | None = None) -> Construction:
    """Thm 1 (App. C.2, L387-416): one layer, width 2 log|Sigma| + 2k + 1 with k = O(log N) sign codes.

    Symbol s_i at position i: [rho(s_i), 0, T(i), 0, 1]; index token p: [0, T(p), T(N), 0, 1] (its own key
    T(N) is one more non-matching position). Q = eta * query slot, K = key slot, V = rho; with coherence
    <= 1/4 and eta > 2 ln(3N) the weight on position p exceeds 3/4, and a ReLU layer thresholds each averaged
    bit at 1/2. ``code_width`` None uses one-hot codes (k = N + 1).
    """
    n = task.length
    codes = onehot_codes(n + 1) if code_width is None else sign_codes(n + 1, code_width, np.random.default_rng(seed))
    k = codes.shape[1]
    rho = binary_code(task.alphabet)
    b = rho.shape[1]
    slots = Slots()
    for name, size in (("rho", b), ("query", k), ("key", k), ("bits", b), ("one", 1)):
        slots.add(name, size)
    w = slots.width
    eta = eta if eta is not None else lookup_eta(n)
    model = blank_transformer(1, w, task.vocab_size, task.max_seq_len(), 2 * b)
    with torch.no_grad():
        embed = np.zeros((task.vocab_size, w))
        embed[: task.alphabet, slots["rho"]] = rho
        embed[task.alphabet : task.alphabet + n, slots["query"]] = codes[:n]
        embed[:, slots["one"]] = 1.0
        model.embed.weight.copy_(_tensor(embed))
        positions = np.zeros((task.max_seq_len(), w))
        positions[:, slots["key"]] = codes[: task.max_seq_len()]
        model.positions.table.weight.copy_(_tensor(positions))
        writer = BlockWriter(model, 0)
        select = np.zeros((k, w))
        select[:, slots["query"]] = eta * np.eye(k)
        keys = np.zeros((k, w))
        keys[:, slots["key"]] = np.eye(k)
        writer.query_key(select, keys)
        writer.value_out(slots["rho"], slots["rho"])  # the index token's rho slot is 0, so it receives the average
        for j in range(b):
            read = _unit(w, slots["rho"].start + j, 2.0)
            write = _unit(w, slots["bits"].start + j)
            writer.relu(read, -0.5, write)  # clip(2 z - 1/2, 0, 1) = bit of s_p
            writer.relu(read, -1.5, -write)
        head = np.zeros((task.vocab_size, w))
        head[: task.alphabet, slots["bits"]] = 2 * rho - 1
        head[: task.alphabet, slots["one"].start] = (1 - rho).sum(1)
        model.head.weight.copy_(_tensor(4.0 * head))
    return Construction(model, task, w, k, {"eta": eta, "coherence": coherence(codes)})


def lookup_attention_floor(codes: np.ndarray, eta: float, chunk: int = 512) -> float:
    """Smallest softmax weight the Thm 1 index token at position N puts on its target, over every p.

    The keys are T(1..N) and the index token's own T(N+1); the query of p is eta T(p). The averaged bit
    is >= the weight when s_p's bit is 1 and <= 1 - weight when it is 0, so a floor above 1/2 makes the
    thresholded bits exact on every input (and a floor <= 1/2 admits an input with a wrong bit).
    """
    n = codes.shape[0] - 1
    floor = 1.0
    for lo in range(0, n, chunk):
        scores = eta * codes[lo : min(n, lo + chunk)] @ codes.T
        weights = np.exp(scores - scores.max(1, keepdims=True))
        weights /= weights.sum(1, keepdims=True)
        rows = np.arange(weights.shape[0])
        floor = min(floor, float(weights[rows, lo + rows].min()))
    return floor


def equality(task: Equality, code_width: int | None = None, seed: int = 0, k_c: float = 20.0) -> Construction:
    """Thm 6 (App. F.2, L604-657, with typo fix 6 of docs/separations.md): two layers decide u == v.

    Position p carries [T(p), T(p'), flag] with p' the matching position of the first half (p' = p up to the
    separator) and flag = 1 after it; a symbol carries its bits in +-1 and a constant 1.
    Layer 1: Q = eta [T(p'), 1], K = [T(j), -1/2] (hard attention to p'), V copies the bits; its ReLU layer
    writes XOR_p = number of differing bits (0 before the separator). Layer 2: Q = 0 (uniform), V = XOR, so
    the last token sees mean XOR; its ReLU layer outputs min(1, (N + 1) * mean), and the head reads u == v
    as "no position differs". eta = ln N + K_c ln 2N (L644-655).
    """
    n = task.length
    half = n // 2
    total = n + 1
    codes = onehot_codes(total) if code_width is None else sign_codes(total, code_width, np.random.default_rng(seed))
    k = codes.shape[1]
    bits_of = binary_code(task.alphabet) * 2 - 1
    b = bits_of.shape[1]
    slots = Slots()
    for name, size in (("sym", b), ("copy", b), ("own", k), ("partner", k), ("flag", 1), ("xor", 1), ("mean", 1),
                       ("differs", 1), ("one", 1)):
        slots.add(name, size)
    w = slots.width
    eta = equality_eta(n, k_c)
    model = blank_transformer(2, w, task.vocab_size, task.max_seq_len(), 2 * b)
    with torch.no_grad():
        embed = np.zeros((task.vocab_size, w))
        embed[: task.alphabet, slots["sym"]] = bits_of
        embed[:, slots["one"]] = 1.0
        model.embed.weight.copy_(_tensor(embed))
        positions = np.zeros((task.max_seq_len(), w))
        partner = np.where(np.arange(total) > half, np.arange(total) - half - 1, np.arange(total))
        positions[:total, slots["own"]] = codes
        positions[:total, slots["partner"]] = codes[partner]
        positions[:total, slots["flag"].start] = np.arange(total) > half
        model.positions.table.weight.copy_(_tensor(positions))

        first = BlockWriter(model, 0)
        query = np.zeros((k + 1, w))
        query[:k, slots["partner"]] = eta * np.eye(k)
        query[k, slots["one"].start] = eta
        key = np.zeros((k + 1, w))
        key[:k, slots["own"]] = np.eye(k)
        key[k, slots["one"].start] = -0.5
        first.query_key(query, key)
        first.value_out(slots["sym"], slots["copy"])
        for j in range(b):
            for sign in (1.0, -1.0):
                read = sign * (_unit(w, slots["sym"].start + j) - _unit(w, slots["copy"].start + j))
                read += _unit(w, slots["flag"].start, 2.0)
                first.relu(read - _unit(w, slots["one"].start, 2.0), 0.0, _unit(w, slots["xor"].start, 0.5))

        second = BlockWriter(model, 1)
        second.value_out(slots["xor"], slots["mean"], factor=float(total))  # Q = 0: uniform over the prefix
        count = _unit(w, slots["mean"].start)
        second.relu(count, 0.0, _unit(w, slots["differs"].start))
        second.relu(count, -1.0, -_unit(w, slots["differs"].start))
        head = np.zeros((task.vocab_size, w))
        head[task.true_id] = 10 * (_unit(w, slots["one"].start) - 2 * _unit(w, slots["differs"].start))
        head[task.false_id] = -head[task.true_id]
        model.head.weight.copy_(_tensor(head))
    return Construction(model, task, w, k, {"eta": eta, "coherence": coherence(codes)})


def nearest_neighbor(task: NearestNeighbor, code_width: int = 128, seed: int = 0, self_penalty: float = 10.0) -> Construction:
    """Thm 7 (App. G.2, L749-858, with typo fix 5 of docs/separations.md): two layers find y of the nearest point.

    Slots [x | y | c | T(own) | T(next) | scratch | nn | out]; point i (position 2i-1) has c = 1 and next =
    its label's code, label i has c = -2 (Eq. 9). Layer 1: Q = eta1 [x, 1, -gamma/2, -10 T(own)],
    K = [x, 3c, later, T(own)] (key constants 3 / -6; ``later`` marks points of the second half), V = 2 T_s(next)
    into scratch, and a ReLU layer clips to [-1, 1], recovering T_s(2 j*). The ``later`` penalty is ours: a
    query that repeats an earlier query has several exact matches, which Thm 7's unique-nearest-point
    assumption excludes; it makes the first-half occurrence (the task's tie rule) the unique maximum.
    Layer 2: Q = eta2 T_s(2 j*)/sqrt(k), K = T(own), V = y. The codes T are one-hot at the point positions
    and random signs of width ``code_width`` at the label positions: layer 1 then compares the query with
    point positions only through exactly orthogonal codes, which is what its gamma/100 accuracy requirement
    asks; layer 2 needs only nearly orthogonal label codes.
    Inputs must have a unique nearest point with margin gamma (here gamma = 2/d for hypercube points).
    """
    n = task.length
    d = task.options.dims
    gamma = 2.0 / d
    total = task.max_seq_len()
    label_codes = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n, code_width))  # T_s, in {+-1}^k
    k = code_width
    slots = Slots()
    for name, size in (("x", d), ("y", 1), ("c", 1), ("one", 1), ("point_code", n), ("label_code", k), ("next", k),
                       ("scratch", k), ("nn", k), ("out", 1)):
        slots.add(name, size)
    w = slots.width
    eta1 = 5.0 / (4.0 * gamma) * math.log(18 * n)
    gram = label_codes @ label_codes.T / k
    np.fill_diagonal(gram, 0.0)
    mu = float(np.abs(gram).max()) if n > 1 else 0.0
    if mu >= 0.5:
        raise ValueError(f"label codes of width {k} have coherence {mu:.2f} >= 1/2 at N={n}; use a larger code width")
    eta2 = nearest_neighbor_eta2(mu, n)
    model = blank_transformer(2, w, task.vocab_size, total, 2 * k)
    with torch.no_grad():
        embed = np.zeros((task.vocab_size, w))
        embed[: task.points, slots["x"]] = task.vectors(np.arange(task.points)) / math.sqrt(d)
        embed[: task.points, slots["c"].start] = 1.0
        embed[task.points, slots["y"].start] = 0.0
        embed[task.points + 1, slots["y"].start] = 1.0
        embed[task.points : task.points + 2, slots["c"].start] = -2.0
        embed[:, slots["one"].start] = 1.0
        model.embed.weight.copy_(_tensor(embed))
        positions = np.zeros((total, w))
        points, labels = np.arange(0, total, 2), np.arange(1, total, 2)
        positions[points, slots["point_code"].start + np.arange(n)] = 1.0
        positions[labels, slots["label_code"]] = label_codes / math.sqrt(k)
        positions[points, slots["next"]] = label_codes
        model.positions.table.weight.copy_(_tensor(positions))

        first = BlockWriter(model, 0)
        rows = d + 2 + n
        query, key = np.zeros((rows, w)), np.zeros((rows, w))
        query[:d, slots["x"]] = eta1 * np.eye(d)
        key[:d, slots["x"]] = np.eye(d)
        query[d, slots["one"].start] = eta1
        key[d, slots["c"].start] = 3.0
        query[d + 1, slots["one"].start] = -0.5 * gamma * eta1
        key[d + 1, slots["point_code"].start + n // 2 : slots["point_code"].stop] = 1.0
        query[d + 2 :, slots["point_code"]] = -self_penalty * eta1 * np.eye(n)
        key[d + 2 :, slots["point_code"]] = np.eye(n)
        first.query_key(query, key)
        first.value_out(slots["next"], slots["scratch"], factor=2.0)
        for j in range(k):
            read = _unit(w, slots["scratch"].start + j)
            write = _unit(w, slots["nn"].start + j)
            first.relu(read, 1.0, write)
            first.relu(read, -1.0, -write)
        first.block.mlp.down.bias[slots["nn"]] = -1.0  # sigma(a) = ReLU(a+1) - ReLU(a-1) - 1

        second = BlockWriter(model, 1)
        query, key = np.zeros((k, w)), np.zeros((k, w))
        query[:, slots["nn"]] = eta2 / math.sqrt(k) * np.eye(k)
        key[:, slots["label_code"]] = np.eye(k)
        second.query_key(query, key)
        _read_out_label(model, second, task, slots)
    return Construction(model, task, w, k, {"eta1": eta1, "eta2": eta2, "gamma": gamma, "coherence": mu})


def nearest_neighbor_by_copy(task: NearestNeighbor, code_width: int, seed: int = 0, point_penalty: float = 4.0) -> Construction:
    """Thm 7's statement (L166: two layers, width O(log N)) by a construction of sepbench's own, not App. G.2's.

    Slots [x | y | point | one | T(own) | T(prev) | copy | out], point i at position 2i, its label at 2i + 1.
    Layer 1, a previous-token head on k = O(log N) sign codes (Thm 1's mechanism): Q = eta1 T(t - 1),
    K = T(s), V = x into ``copy``, so each label position holds its point's vector. Layer 2, from a query
    point: Q = eta2 [x, 1], K = [copy, -4 point], V = y: the nearest earlier point's label, the query itself
    and every point position held off by the penalty. With 1 - (layer-1 weight) <= 1/(4 dims) the copies move
    any inner product by at most gamma/4 (gamma = 2/dims on the hypercube), and eta2 = dims ln(8N) keeps the
    weight off the nearest point's labels below 1/4 wherever the nearest point is one vector (L160's margin).
    App. G.2 instead finds the point in layer 1 and its label's address in layer 2, holding the query off
    itself through codes exact to gamma/100 (``nearest_neighbor`` does that with one-hot codes, width O(N)).
    """
    n, d = task.length, task.options.dims
    total = task.max_seq_len()
    codes = sign_codes(total + 1, code_width, np.random.default_rng(seed))  # row ``total``: position -1
    k = code_width
    slots = Slots()
    for name, size in (("x", d), ("y", 1), ("point", 1), ("one", 1), ("own", k), ("prev", k), ("copy", d),
                       ("out", 1)):
        slots.add(name, size)
    w = slots.width
    mu = coherence(codes)
    if mu >= 1 - 1e-9:
        raise ValueError(f"sign codes of width {k} give two positions the same code at N={n}; use a larger code width")
    eta1 = previous_token_eta(mu, total, d)
    eta2 = d * math.log(8 * n)
    model = blank_transformer(2, w, task.vocab_size, total, 1)
    with torch.no_grad():
        embed = np.zeros((task.vocab_size, w))
        embed[: task.points, slots["x"]] = task.vectors(np.arange(task.points)) / math.sqrt(d)
        embed[: task.points, slots["point"].start] = 1.0
        embed[task.points + 1, slots["y"].start] = 1.0
        embed[:, slots["one"].start] = 1.0
        model.embed.weight.copy_(_tensor(embed))
        positions = np.zeros((total, w))
        positions[:, slots["own"]] = codes[:total]
        positions[:, slots["prev"]] = codes[np.arange(total) - 1]  # position 0 reads row -1: position -1's code
        model.positions.table.weight.copy_(_tensor(positions))

        first = BlockWriter(model, 0)
        query, key = np.zeros((k, w)), np.zeros((k, w))
        query[:, slots["prev"]] = eta1 * np.eye(k)
        key[:, slots["own"]] = np.eye(k)
        first.query_key(query, key)
        first.value_out(slots["x"], slots["copy"])

        second = BlockWriter(model, 1)
        query, key = np.zeros((d + 1, w)), np.zeros((d + 1, w))
        query[:d, slots["x"]] = eta2 * np.eye(d)
        key[:d, slots["copy"]] = np.eye(d)
        query[d, slots["one"].start] = eta2
        key[d, slots["point"].start] = -point_penalty
        second.query_key(query, key)
        _read_out_label(model, second, task, slots)
    return Construction(model, task, w, k, {"eta1": eta1, "eta2": eta2, "gamma": 2.0 / d, "coherence": mu})


def previous_token_eta(mu: float, positions: int, dims: int) -> float:
    """Layer-1 sharpness of ``nearest_neighbor_by_copy``: off-target weight <= positions e^{-eta (1 - mu)} <= 1/(8 dims)."""
    return math.log(8.0 * dims * positions) / (1.0 - mu)


def previous_token_floor(codes: np.ndarray, eta: float, chunk: int = 512) -> float:
    """Smallest causal softmax weight a position t >= 1 puts on t - 1 when its query is eta T(t - 1), keys T(0..t)."""
    total = codes.shape[0] - 1
    floor = 1.0
    for lo in range(1, total, chunk):
        rows = np.arange(lo, min(total, lo + chunk))
        scores = eta * codes[rows - 1] @ codes[:total].T
        scores[np.arange(total)[None, :] > rows[:, None]] = -np.inf
        weights = _softmax_rows(scores)
        floor = min(floor, float(weights[np.arange(len(rows)), rows - 1].min()))
    return floor


def _read_out_label(model: SequenceModel, layer: BlockWriter, task: NearestNeighbor, slots: Slots) -> None:
    """The layer's attention averages the label slot ``y`` into ``out``; the head reads label 1 above 1/2."""
    layer.value_out(slots["y"], slots["out"])
    w = slots.width
    head = np.zeros((task.vocab_size, w))
    head[task.points + 1] = 20 * (_unit(w, slots["out"].start) - 0.5 * _unit(w, slots["one"].start))
    head[task.points] = -head[task.points + 1]
    model.head.weight.copy_(_tensor(head))


def smallest_width(accepts: Callable[[int], bool], step: int = 8) -> int:
    """Smallest multiple of ``step`` that ``accepts`` (doubling, then binary search; assumes monotone)."""
    hi = 1
    while not accepts(hi * step):
        hi *= 2
    lo = hi // 2 + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if accepts(mid * step):
            hi = mid
        else:
            lo = mid + 1
    return hi * step


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    weights = np.exp(scores - scores.max(1, keepdims=True))
    return weights / weights.sum(1, keepdims=True)


def lookup_eta(length: int) -> float:
    """eta > 2 ln(3N) (App. C.2, L414)."""
    return 2 * math.log(3 * length) + 1.0


def equality_eta(length: int, k_c: float = 20.0) -> float:
    """eta = ln N + K_c ln 2N (App. F.2, L644-655)."""
    return math.log(length) + k_c * math.log(2 * length)


def equality_leak(codes: np.ndarray, eta: float) -> float:
    """Largest layer-1 weight that a second-half position of Thm 6 puts off its partner p' (causal keys).

    A copied +-1 bit is off by at most twice the leak, so a leak below 1/(N * bits) keeps the summed XOR
    of an equal pair under 1/2 while one differing position alone reaches 1 - leak.
    """
    total = codes.shape[0]
    half = (total - 1) // 2
    worst = 0.0
    for t in range(half + 1, total):
        scores = eta * (codes[t - half - 1] @ codes[: t + 1].T - 0.5)
        weights = _softmax_rows(scores[None])[0]
        worst = max(worst, 1.0 - float(weights[t - half - 1]))
    return worst


def recall_floor(label_codes: np.ndarray, eta: float) -> float:
    """Smallest layer-2 weight of Thm 7 on the nearest point's label, keys = all N labels plus N points at 0."""
    k = label_codes.shape[1]
    unit = label_codes / math.sqrt(k)
    scores = eta * unit @ unit.T
    n = len(unit)
    peak = scores.max(1, keepdims=True)
    mass = np.exp(scores - peak).sum(1) + n * np.exp(-peak[:, 0])
    return float((np.exp(np.diag(scores) - peak[:, 0]) / mass).min())


def nearest_neighbor_eta2(mu: float, length: int) -> float:
    """Layer-2 sharpness: ln(400 N) / (1 - mu) for label codes of coherence mu."""
    return math.log(400.0 * length) / (1.0 - mu)


def min_code_width(name: str, length: int, seed: int = 0) -> int:
    """Smallest width (multiple of 8) of sign codes that the construction's own exactness condition accepts.

    Thm 1: every target weight above 1/2 (``lookup_attention_floor``); Thm 6: layer-1 leak below
    1/(N * bits) (``equality_leak``); Thm 7: label-code coherence below 1/2 and every layer-2 target weight
    above 1/2 (``recall_floor``). These conditions are checked on the codes, for every position at once.
    """
    def draw(count: int, k: int) -> np.ndarray:
        return sign_codes(count, k, np.random.default_rng(seed))

    if name == "index_lookup":
        return smallest_width(lambda k: lookup_attention_floor(draw(length + 1, k), lookup_eta(length)) > 0.5)
    if name in ("equality", "eq_one"):
        bits = 1 if name == "equality" else binary_code(1024).shape[1]
        eta = equality_eta(length)
        return smallest_width(lambda k: equality_leak(draw(length + 1, k), eta) < 1.0 / (length * bits))

    if name == "nearest_neighbor_copy":
        task = nearest_neighbor_task(length)
        total, dims = task.max_seq_len(), task.options.dims

        def copies_ok(k: int) -> bool:
            codes = draw(total + 1, k)
            mu = coherence(codes)
            return mu < 0.5 and previous_token_floor(codes, previous_token_eta(mu, total, dims)) >= 1 - 1 / (4 * dims)

        return smallest_width(copies_ok)

    def recall_ok(k: int) -> bool:
        codes = np.sign(draw(length, k))  # exact +-1, so mu is computed as ``nearest_neighbor`` computes it
        mu = coherence(codes) / k
        return mu < 0.5 and recall_floor(codes, nearest_neighbor_eta2(mu, length)) > 0.5

    return smallest_width(recall_ok)


def nearest_neighbor_task(length: int, queries: str = "recall") -> NearestNeighbor:
    """NstNb instances with Thm 7's margin: distinct first-half points, each later point repeating one of them
    (``recall``, the MQAR case) or any point whose nearest earlier point is one vector (``margin``)."""
    dims = max(6, math.ceil(math.log2(max(2, length // 2))))
    return NearestNeighbor(length, {"dims": dims, "queries": queries, "distinct": True})


CONSTRUCTIONS: dict[str, str] = {
    "index_lookup": "Thm 1: one layer, O(log N) nearly orthogonal position codes (App. C.2)",
    "equality": "Thm 6: two layers decide u == v on {0,1} halves (eq_random, App. F.2)",
    "eq_one": "Thm 6 on eq_one (|Sigma| = 1024, symbols as +-1 bit vectors)",
    "nearest_neighbor": "Thm 7: two layers output the label of the nearest earlier point (App. G.2)",
    "nearest_neighbor_copy": "Thm 7 by sepbench's own two layers: copy each point to its label, then attend to the nearest",
}


def memory_floor(name: str, length: int, code_width: int | None = None) -> int:
    """Bytes a construction at ``length`` needs at least: its float64 position codes and the model's position
    table (width >= 2k + 1 with k >= log2 N), and Thm 7's N x N label-score check."""
    k = code_width or max(8, math.ceil(math.log2(length + 1)))
    floor = (length + 1) * k * 8 + (length + 2) * (2 * k + 1) * (8 + 4)
    if name == "nearest_neighbor":
        floor += 2 * length**2 * 8
    return floor


def refuse_unfitting(name: str, lengths: Sequence[int], code_width: int | None = None) -> None:
    """A ConfigError when the machine's free memory is below the construction's ``memory_floor`` at a length."""
    from sepbench.train.memory import free_memory, gib

    free = free_memory(torch.device("cpu"))
    if free is None:
        return
    for n in lengths:
        need = memory_floor(name, n, code_width)
        if need > free:
            raise ConfigError(f"{name} at N={n} needs at least {gib(need)} (position codes and tables"
                              f"{', N x N scores' if name == 'nearest_neighbor' else ''}) but the machine has "
                              f"{gib(free)} free; choose a smaller --length")


def construct(name: str, length: int, code_width: int | None = None, seed: int = 0,
              queries: str = "recall") -> Construction:
    """The construction ``name`` at task size ``length``; ``code_width`` None uses ``min_code_width``;
    ``queries`` picks the nearest-neighbour instances (``recall`` or ``margin``)."""
    if name not in CONSTRUCTIONS:
        raise ValueError(f"unknown construction '{name}'; allowed: {', '.join(CONSTRUCTIONS)}")
    if name == "index_lookup":
        task = IndexLookup(length, {"min_length": min(length, IndexLookup.Options().min_length)})  # scored at N only
        return index_lookup(task, code_width or min_code_width(name, length, seed), seed)
    if name in ("equality", "eq_one"):
        task = EqOne(length) if name == "eq_one" else EqRandom(length)
        return equality(task, code_width or min_code_width(name, length, seed), seed)
    task = nearest_neighbor_task(length, queries)
    build = nearest_neighbor_by_copy if name == "nearest_neighbor_copy" else nearest_neighbor
    return build(task, code_width or min_code_width(name, length, seed), seed)
