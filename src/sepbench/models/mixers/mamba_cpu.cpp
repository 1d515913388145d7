// Mamba's block on CPU, fused (Gu & Dao 2023, Algorithm 2): the causal depthwise convolution with its SiLU, and
// the selective scan y_t = C_t h_t, h_t = exp(Delta_t A) h_{t-1} + Delta_t u_t B_t (eq. 2a-2b, B-bar = Delta B)
// with its skip D u and SiLU(z) gate. Each batch row walks time with its state in cache and never writes
// [B, T, E, N]; the backward recomputes each span of `span` steps from a state saved every `span` steps by the
// forward. Layouts (contiguous): delta, u, z, y, out [B, T, E]; A [N, E] and conv weights [K, E] (transposed);
// Bm, Cm [B, T, N]; saved [B, ceil(T / span), N, E]. Plain C++: the compiler vectorises every loop over the E
// channels (exp included; built with -fno-trapping-math, see cpu_kernels.FLAGS), so no step needs a horizontal sum
// across lanes but once per state index.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels_common.h"

namespace {

template <typename T> struct ExpConstants;

template <> struct ExpConstants<float> {
    static constexpr float lowest = -87.3f;  // below: 0 (exp would be subnormal)
    static constexpr float highest = 88.37f;  // 2^128 overflows above
    static constexpr float ln2_hi = 0.693359375f;
    static constexpr float ln2_lo = -2.12194440e-4f;
    static constexpr float round = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low bits
    static constexpr int terms = 7;
    static constexpr int terms2 = 6;
    static constexpr int atanh_terms = 7;  // log1p(y) = 2 atanh(s), s = y / (2 + y) <= 1/3: (1/9)^7 / 15 = 1.4e-8  // 2^r on |r| <= 1/2: truncation (ln 2 / 2)^7 / 7! = 1.2e-7
    static constexpr float lowest2 = -126.0f;  // the smallest normal power of two
    static constexpr float highest2 = 127.0f;
    static constexpr int mantissa = 23;
    static constexpr int bias = 127;
    using Bits = int32_t;
};

template <> struct ExpConstants<double> {
    static constexpr double lowest = -708.0;
    static constexpr double highest = 709.0;
    static constexpr double ln2_hi = 6.93147180369123816490e-01;
    static constexpr double ln2_lo = 1.90821492927058770002e-10;
    static constexpr double round = 6755399441055744.0;  // 1.5 * 2^52
    static constexpr int terms = 13;
    static constexpr int terms2 = 12;
    static constexpr int atanh_terms = 17;
    static constexpr double lowest2 = -1022.0;
    static constexpr double highest2 = 1023.0;
    static constexpr int mantissa = 52;
    static constexpr int bias = 1023;
    using Bits = int64_t;
};

// The Taylor coefficients 1 / i! and (ln 2)^i / i!, a table fixed at compile time (GCC 12 compiled recursive
// constexpr functions called in a loop into calls at run time).
constexpr int TAYLOR_TERMS = 16;
struct TaylorCoefficients {
    double inverse_factorial[TAYLOR_TERMS];
    double ln2_power_over_factorial[TAYLOR_TERMS];
};
constexpr TaylorCoefficients taylor_coefficients() {
    TaylorCoefficients c{};
    c.inverse_factorial[0] = c.ln2_power_over_factorial[0] = 1.0;
    for (int i = 1; i < TAYLOR_TERMS; ++i) {
        c.inverse_factorial[i] = i == 1 ? 1.0 : c.inverse_factorial[i - 1] / i;
        c.ln2_power_over_factorial[i] = c.ln2_power_over_factorial[i - 1] * 0.6931471805599453 / i;
    }
    return c;
}
constexpr TaylorCoefficients TAYLOR = taylor_coefficients();
static_assert(ExpConstants<double>::terms < TAYLOR_TERMS && ExpConstants<double>::terms2 < TAYLOR_TERMS);

// exp(x) = 2^k exp(r), k = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by its Taylor polynomial (truncation 5e-9
// in float, 4e-18 in double, so the result is within float round-off, ~1e-7 relative in float32). No calls,
// branches or float-to-int conversions (k is read from the bits of the rounding sum), so that the compiler
// vectorises it inside the loops below.
template <typename T> inline T vexp(T x) {
    using K = ExpConstants<T>;
    using Bits = typename K::Bits;
    const T clamped = x < K::lowest ? K::lowest : (x > K::highest ? K::highest : x);
    const T shifted = clamped * T(1.4426950408889634) + K::round;
    const T k = shifted - K::round;
    const T r = (clamped - k * K::ln2_hi) - k * K::ln2_lo;
    T p = T(TAYLOR.inverse_factorial[K::terms]);
#pragma GCC unroll 16
    for (int i = K::terms - 1; i >= 0; --i) p = p * r + T(TAYLOR.inverse_factorial[i]);
    const Bits power = __builtin_bit_cast(Bits, shifted) - __builtin_bit_cast(Bits, K::round);
    const Bits bits = (power + K::bias) << K::mantissa;
    return x < K::lowest ? T(0) : p * __builtin_bit_cast(T, bits);
}

// 2^x = 2^k 2^r, k = round(x), r = x - k exact, 2^r by the Taylor polynomial of exp(r ln 2); below 2^lowest2 the
// result stays at the smallest normal power (where a decay that small multiplies a state, the difference is far
// below round-off). Fewer operations than vexp (no Cody-Waite reduction, no flush to zero): the scan's decays
// exp(Delta A) are 2^(Delta A log2 e) with A log2 e formed once a call.
template <typename T> inline T vexp2(T x) {
    using K = ExpConstants<T>;
    using Bits = typename K::Bits;
    const T clamped = x < K::lowest2 ? K::lowest2 : (x > K::highest2 ? K::highest2 : x);
    const T shifted = clamped + K::round;
    const T r = clamped - (shifted - K::round);
    T p = T(TAYLOR.ln2_power_over_factorial[K::terms2]);
#pragma GCC unroll 16
    for (int i = K::terms2 - 1; i >= 0; --i) p = p * r + T(TAYLOR.ln2_power_over_factorial[i]);
    const Bits power = __builtin_bit_cast(Bits, shifted) - __builtin_bit_cast(Bits, K::round);
    return p * __builtin_bit_cast(T, (power + K::bias) << K::mantissa);
}

// A [N, E] times log2 e, so that exp(Delta A) = vexp2(Delta A2).
template <typename T> std::vector<T> base2(const T* a, int64_t size) {
    std::vector<T> a2(a, a + size);
    for (T& v : a2) v *= T(1.4426950408889634);
    return a2;
}

template <typename T> inline T sigmoid(T x) { return T(1) / (T(1) + vexp(-x)); }

// log(1 + e^x) = max(x, 0) + log1p(e^-|x|), the log1p by its atanh series (all terms positive: no cancellation).
template <typename T> inline T softplus(T x) {
    using K = ExpConstants<T>;
    const T y = vexp(x < T(0) ? x : -x), s = y / (T(2) + y), s2 = s * s;
    T p = T(1) / T(2 * K::atanh_terms - 1);
#pragma GCC unroll 32
    for (int i = K::atanh_terms - 2; i >= 0; --i) p = p * s2 + T(1) / T(2 * i + 1);
    return (x > T(0) ? x : T(0)) + T(2) * s * p;
}

// The optional per-channel vector `v`, or zeros: the loops over channels read it without a branch (a branch
// inside a loop keeps the compiler from vectorising it).
template <typename T> const T* or_zeros(const T* v, std::vector<T>& zeros) { return v ? v : zeros.data(); }

// Delta_t for one step: the given row, or softplus(row + bias) (either optional) into `scratch`, as Mamba's
// block forms Delta from its dt projection (Gu & Dao 2023, Algorithm 2: Delta = softplus(Parameter + s(x))).
template <typename T>
inline const T* step_delta(const T* __restrict row, const T* __restrict bias, bool formed, bool soft,
                           T* __restrict scratch, int64_t e_size) {
    if (!formed) return row;
    if (soft) {
#pragma omp simd
        for (int64_t e = 0; e < e_size; ++e) scratch[e] = softplus(row[e] + bias[e]);
    } else {
#pragma omp simd
        for (int64_t e = 0; e < e_size; ++e) scratch[e] = row[e] + bias[e];
    }
    return scratch;
}

// y_t (and, where z is given, out_t = (y_t + D u_t) SiLU(z_t); D may be null) for batch rows [b0, b1).
template <typename T>
void scan_forward(const T* delta, const T* u, const T* a, const T* bm, const T* cm, const T* skip, const T* z,
                  const T* delta_bias, T* y, T* out, T* saved, T* delta_out, int64_t b0, int64_t b1, int64_t length,
                  int64_t e_size, int64_t n_size, int64_t span, int64_t soft) {
    const int64_t spans = (length + span - 1) / span, state_size = e_size * n_size;
    std::vector<T> state(state_size), input(2 * e_size), a2 = base2(a, state_size), zeros(e_size);
    T* __restrict x = input.data();
    T* __restrict dt = x + e_size;
    const bool formed = soft || delta_bias;
    const T* __restrict bias = or_zeros(delta_bias, zeros);
    const T* __restrict skip0 = or_zeros(skip, zeros);
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(state.begin(), state.end(), T(0));
        for (int64_t t = 0; t < length; ++t) {
            if (saved && t % span == 0)
                std::memcpy(saved + (b * spans + t / span) * state_size, state.data(), state_size * sizeof(T));
            const int64_t row = (b * length + t) * e_size;
            const T* __restrict d = step_delta(delta + row, bias, formed, soft, delta_out ? delta_out + row : dt, e_size);
            const T* __restrict ut = u + row;
            T* __restrict yt = y + row;
            for (int64_t e = 0; e < e_size; ++e) {
                x[e] = d[e] * ut[e];
                yt[e] = T(0);
            }
            for (int64_t n = 0; n < n_size; ++n) {
                const T* __restrict an = a2.data() + n * e_size;
                T* __restrict h = state.data() + n * e_size;
                const T bn = bm[(b * length + t) * n_size + n], cn = cm[(b * length + t) * n_size + n];
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) {
                    h[e] = vexp2(d[e] * an[e]) * h[e] + x[e] * bn;
                    yt[e] += cn * h[e];
                }
            }
            if (z) {
                const T* __restrict zt = z + row;
                T* __restrict ot = out + row;
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e)
                    ot[e] = (yt[e] + skip0[e] * ut[e]) * zt[e] * sigmoid(zt[e]);
            }
        }
    }
}

// `delta` is the Delta the forward used (its `delta_out` where it formed one); with `soft`, the gradient goes on
// through the softplus at pre + delta_bias.
// The adjoint g_t = dL/dh_t = C_t dy_t + exp(Delta_{t+1} A) g_{t+1}, walked backwards one span at a time after
// recomputing that span's states and decays from its saved start. With z, dy_t comes through the gate from
// grad_out (y is the saved scan output); without, grad_out is dy. grad_a [N, E] and grad_skip [E] hold one
// slice per batch row.
template <typename T>
void scan_backward(const T* delta, const T* u, const T* a, const T* bm, const T* cm, const T* skip, const T* z,
                   const T* pre, const T* delta_bias, const T* y, const T* saved, const T* grad_out, T* grad_delta,
                   T* grad_u,
                   T* grad_a, T* grad_b, T* grad_c, T* grad_skip, T* grad_z, T* grad_bias, int64_t b0, int64_t b1,
                   int64_t length, int64_t e_size, int64_t n_size, int64_t span, int64_t soft) {
    const int64_t spans = (length + span - 1) / span, state_size = e_size * n_size;
    std::vector<T> states((span + 1) * state_size), decays(span * state_size), adjoint(state_size), scratch(5 * e_size),
        a2 = base2(a, state_size), zeros(e_size), sinks(2 * e_size);
    const T* __restrict bias = or_zeros(delta_bias, zeros);
    const T* __restrict skip0 = or_zeros(skip, zeros);
    T* __restrict x = scratch.data();
    T* __restrict gx = x + e_size;
    T* __restrict gd = gx + e_size;
    T* __restrict dy = gd + e_size;
    T* __restrict gu_skip = dy + e_size;
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(adjoint.begin(), adjoint.end(), T(0));
        T* ga = grad_a + b * state_size;
        std::fill(ga, ga + state_size, T(0));
        T* __restrict gs = grad_skip ? grad_skip + b * e_size : sinks.data();  // sinks: sums nobody reads
        T* __restrict gbias = grad_bias ? grad_bias + b * e_size : sinks.data() + e_size;
        std::fill(gs, gs + e_size, T(0));
        std::fill(gbias, gbias + e_size, T(0));
        for (int64_t s = spans - 1; s >= 0; --s) {
            const int64_t t0 = s * span, t1 = std::min(length, t0 + span);
            std::memcpy(states.data(), saved + (b * spans + s) * state_size, state_size * sizeof(T));
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t row = (b * length + t) * e_size;
                const T* __restrict d = delta + row;
                const T* __restrict ut = u + row;
                for (int64_t e = 0; e < e_size; ++e) x[e] = d[e] * ut[e];
                for (int64_t n = 0; n < n_size; ++n) {
                    const T* __restrict an = a2.data() + n * e_size;
                    const T* __restrict before = states.data() + (t - t0) * state_size + n * e_size;
                    T* __restrict after = states.data() + (t - t0 + 1) * state_size + n * e_size;
                    T* __restrict decay = decays.data() + (t - t0) * state_size + n * e_size;
                    const T bn = bm[(b * length + t) * n_size + n];
#pragma omp simd
                    for (int64_t e = 0; e < e_size; ++e) {
                        const T dec = vexp2(d[e] * an[e]);
                        decay[e] = dec;
                        after[e] = dec * before[e] + x[e] * bn;
                    }
                }
            }
            for (int64_t t = t1 - 1; t >= t0; --t) {
                const int64_t row = (b * length + t) * e_size;
                const T* __restrict d = delta + row;
                const T* __restrict ut = u + row;
                const T* __restrict go = grad_out + row;
                if (z) {
                    const T* __restrict zt = z + row;
                    const T* __restrict yt = y + row;
                    T* __restrict gz = grad_z + row;
#pragma omp simd
                    for (int64_t e = 0; e < e_size; ++e) {
                        const T gate = sigmoid(zt[e]), skipped = yt[e] + skip0[e] * ut[e];
                        dy[e] = go[e] * zt[e] * gate;
                        gz[e] = go[e] * skipped * gate * (T(1) + zt[e] * (T(1) - gate));
                    }
                } else {
                    for (int64_t e = 0; e < e_size; ++e) dy[e] = go[e];
                }
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) {
                    x[e] = d[e] * ut[e];
                    gx[e] = T(0);
                    gd[e] = T(0);
                    gu_skip[e] = dy[e] * skip0[e];
                    gs[e] += dy[e] * ut[e];
                }
                for (int64_t n = 0; n < n_size; ++n) {
                    const T* __restrict an = a + n * e_size;
                    const T* __restrict before = states.data() + (t - t0) * state_size + n * e_size;
                    const T* __restrict after = before + state_size;
                    const T* __restrict decay = decays.data() + (t - t0) * state_size + n * e_size;
                    T* __restrict g = adjoint.data() + n * e_size;
                    T* __restrict gan = ga + n * e_size;
                    const T bn = bm[(b * length + t) * n_size + n], cn = cm[(b * length + t) * n_size + n];
                    T gb = 0, gc = 0;
#pragma omp simd reduction(+ : gb, gc)
                    for (int64_t e = 0; e < e_size; ++e) {
                        const T total = g[e] + dy[e] * cn;
                        gc += dy[e] * after[e];
                        gb += x[e] * total;
                        gx[e] += total * bn;
                        const T log_decay = total * before[e] * decay[e];  // dL / d(Delta_t A)
                        gan[e] += log_decay * d[e];
                        gd[e] += log_decay * an[e];
                        g[e] = total * decay[e];
                    }
                    grad_b[(b * length + t) * n_size + n] = gb;
                    grad_c[(b * length + t) * n_size + n] = gc;
                }
                T* __restrict gdt = grad_delta + row;
                T* __restrict gut = grad_u + row;
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) {
                    gdt[e] = gd[e] + gx[e] * ut[e];
                    gut[e] = gx[e] * d[e] + gu_skip[e];
                }
                if (soft) {
                    const T* __restrict pt = pre + row;
#pragma omp simd
                    for (int64_t e = 0; e < e_size; ++e) gdt[e] *= sigmoid(pt[e] + bias[e]);
                }
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) gbias[e] += gdt[e];
            }
        }
    }
}

// out_t = SiLU(bias + sum_k w_k x_{t-K+1+k}), causal (x before t = 0 is zero), per channel.
template <typename T>
void conv_forward(const T* x, const T* w, const T* bias, T* out, int64_t b0, int64_t b1, int64_t length,
                  int64_t e_size, int64_t k_size) {
    for (int64_t b = b0; b < b1; ++b) {
        for (int64_t t = 0; t < length; ++t) {
            T* __restrict ot = out + (b * length + t) * e_size;
            for (int64_t e = 0; e < e_size; ++e) ot[e] = bias[e];
            for (int64_t k = std::max<int64_t>(0, k_size - 1 - t); k < k_size; ++k) {
                const T* __restrict xs = x + (b * length + t - k_size + 1 + k) * e_size;
                const T* __restrict wk = w + k * e_size;
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) ot[e] += wk[e] * xs[e];
            }
#pragma omp simd
            for (int64_t e = 0; e < e_size; ++e) ot[e] = ot[e] * sigmoid(ot[e]);
        }
    }
}

// Gradients of conv_forward; grad_x must start at zero; grad_w [K, E] and grad_bias [E] hold one slice per
// batch row. The pre-activations are recomputed.
template <typename T>
void conv_backward(const T* x, const T* w, const T* bias, const T* grad_out, T* grad_x, T* grad_w, T* grad_bias,
                   int64_t b0, int64_t b1, int64_t length, int64_t e_size, int64_t k_size) {
    std::vector<T> scratch(e_size);
    T* __restrict pre = scratch.data();
    for (int64_t b = b0; b < b1; ++b) {
        T* __restrict gw = grad_w + b * k_size * e_size;
        T* __restrict gbias = grad_bias + b * e_size;
        std::fill(gw, gw + k_size * e_size, T(0));
        std::fill(gbias, gbias + e_size, T(0));
        for (int64_t t = 0; t < length; ++t) {
            const int64_t first = std::max<int64_t>(0, k_size - 1 - t);
            for (int64_t e = 0; e < e_size; ++e) pre[e] = bias[e];
            for (int64_t k = first; k < k_size; ++k) {
                const T* __restrict xs = x + (b * length + t - k_size + 1 + k) * e_size;
                const T* __restrict wk = w + k * e_size;
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) pre[e] += wk[e] * xs[e];
            }
            const T* __restrict go = grad_out + (b * length + t) * e_size;
#pragma omp simd
            for (int64_t e = 0; e < e_size; ++e) {
                const T gate = sigmoid(pre[e]);
                pre[e] = go[e] * gate * (T(1) + pre[e] * (T(1) - gate));
                gbias[e] += pre[e];
            }
            for (int64_t k = first; k < k_size; ++k) {
                const int64_t source = (b * length + t - k_size + 1 + k) * e_size;
                const T* __restrict xs = x + source;
                const T* __restrict wk = w + k * e_size;
                T* __restrict gxs = grad_x + source;
                T* __restrict gwk = gw + k * e_size;
#pragma omp simd
                for (int64_t e = 0; e < e_size; ++e) {
                    gwk[e] += pre[e] * xs[e];
                    gxs[e] += pre[e] * wk[e];
                }
            }
        }
    }
}

// The blocked backward below needs GCC 12's __builtin_shufflevector and AVX-512's 32 vector registers: with AVX2's
// 16 the block's adjoints spill, and on an AMD EPYC (AVX2) the row-wise backward took 77 ms where the blocked one
// took 228 (B = 64, T = 402, E = 128, N = 16, one thread). Elsewhere (or with -DSEPBENCH_BLOCKED=0) every shape
// takes the row-wise kernels above.
#ifndef SEPBENCH_BLOCKED
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__AVX512F__)
#define SEPBENCH_BLOCKED 1
#else
#define SEPBENCH_BLOCKED 0
#endif
#endif

#if SEPBENCH_BLOCKED
// The scan's backward again, register-blocked for Mamba's state size (N = 16) and E a multiple of one vector's
// channels: each batch row walks its spans back once per block of W channels (one 64-byte vector: 16 floats,
// 8 doubles) with the block's N adjoints in registers and the span's states and decays in L1, where the row-wise
// loop loaded and stored every per-channel term once per state index. The kernels above (runtime N and E) keep
// every other shape. GCC vector types: AVX-512 where the machine has it; forced on elsewhere
// (-DSEPBENCH_BLOCKED=1), the compiler splits each vector into the widest it has.
template <typename T> struct Simd;
template <> struct Simd<float> {
    typedef float V __attribute__((vector_size(64)));
    typedef int32_t I __attribute__((vector_size(64)));
    static constexpr int W = 16;
};
template <> struct Simd<double> {
    typedef double V __attribute__((vector_size(64)));
    typedef int64_t I __attribute__((vector_size(64)));
    static constexpr int W = 8;
};
constexpr int BLOCKED_STATES = 16;
// Rows the blocked backward reads ahead of itself: each block's walk steps back through the [T, E] tensors one
// 64-byte line every E floats, which the hardware prefetchers follow too late (on an Intel Xeon, hints 8 rows
// ahead took the backward from 16.4 to 14.2 ms at T = 100 and from 85 to 57 ms at T = 400, B = 64, E = 128).
constexpr int64_t PREFETCH_ROWS = 8;

template <typename V> inline V load(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename V> inline void store(void* p, V v) { std::memcpy(p, &v, sizeof v); }
template <typename V, typename T> inline V splat(T s) { return V{} + s; }

template <typename T> inline typename Simd<T>::V clamp_v(typename Simd<T>::V x, T low, T high) {
    using V = typename Simd<T>::V;
    return x < splat<V>(low) ? splat<V>(low) : (x > splat<V>(high) ? splat<V>(high) : x);
}

// vexp and vexp2 above, one vector at a time, by the same operations.
template <typename T> inline typename Simd<T>::V vexp_v(typename Simd<T>::V x) {
    using K = ExpConstants<T>;
    using V = typename Simd<T>::V;
    using I = typename Simd<T>::I;
    const V round = splat<V>(K::round), clamped = clamp_v<T>(x, K::lowest, K::highest);
    const V shifted = clamped * T(1.4426950408889634) + round;
    const V k = shifted - round;
    const V r = (clamped - k * K::ln2_hi) - k * K::ln2_lo;
    V p = splat<V>(T(TAYLOR.inverse_factorial[K::terms]));
#pragma GCC unroll 16
    for (int i = K::terms - 1; i >= 0; --i) p = p * r + T(TAYLOR.inverse_factorial[i]);
    const I power = (I)shifted - (I)round;
    const V scaled = p * (V)((power + K::bias) << K::mantissa);
    return x < splat<V>(K::lowest) ? V{} : scaled;
}

template <typename T> inline typename Simd<T>::V vexp2_v(typename Simd<T>::V x) {
    using K = ExpConstants<T>;
    using V = typename Simd<T>::V;
    using I = typename Simd<T>::I;
    const V round = splat<V>(K::round), clamped = clamp_v<T>(x, K::lowest2, K::highest2);
    const V shifted = clamped + round;
    const V r = clamped - (shifted - round);
    V p = splat<V>(T(TAYLOR.ln2_power_over_factorial[K::terms2]));
#pragma GCC unroll 16
    for (int i = K::terms2 - 1; i >= 0; --i) p = p * r + T(TAYLOR.ln2_power_over_factorial[i]);
    const I power = (I)shifted - (I)round;
    return p * (V)((power + K::bias) << K::mantissa);
}

template <typename T> inline typename Simd<T>::V sigmoid_v(typename Simd<T>::V x) {
    return T(1) / (T(1) + vexp_v<T>(-x));
}

// sums[j] = the sum of p[j]'s lanes, for W vectors at once: each level adds the two halves of every group of
// lanes, two vectors into one, so W vectors become one in log2(W) levels.
inline Simd<float>::V lane_sums(const Simd<float>::V* p) {
    using V = Simd<float>::V;
    V q[8], r[4], s[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
        q[k] = __builtin_shufflevector(p[2 * k], p[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(p[2 * k], p[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
        r[k] = __builtin_shufflevector(q[2 * k], q[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(q[2 * k], q[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k)
        s[k] = __builtin_shufflevector(r[2 * k], r[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               __builtin_shufflevector(r[2 * k], r[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    return __builtin_shufflevector(s[0], s[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(s[0], s[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

inline Simd<double>::V lane_sums(const Simd<double>::V* p) {
    using V = Simd<double>::V;
    V q[4], r[2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
        q[k] = __builtin_shufflevector(p[2 * k], p[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
               __builtin_shufflevector(p[2 * k], p[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15);
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k)
        r[k] = __builtin_shufflevector(q[2 * k], q[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
               __builtin_shufflevector(q[2 * k], q[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15);
    return __builtin_shufflevector(r[0], r[1], 0, 2, 4, 6, 8, 10, 12, 14) +
           __builtin_shufflevector(r[0], r[1], 1, 3, 5, 7, 9, 11, 13, 15);
}


// scan_backward for N = BLOCKED_STATES, one block of W channels at a time; grad_b and grad_c gather every
// block's sums (lane_sums) and so start at zero here.
template <typename T>
void scan_backward_blocked(const T* delta, const T* u, const T* a, const T* bm, const T* cm, const T* skip,
                           const T* z, const T* pre, const T* delta_bias, const T* y, const T* saved,
                           const T* grad_out, T* grad_delta, T* grad_u, T* grad_a, T* grad_b, T* grad_c,
                           T* grad_skip, T* grad_z, T* grad_bias, int64_t b0, int64_t b1, int64_t length,
                           int64_t e_size, int64_t span, int64_t soft) {
    using V = typename Simd<T>::V;
    constexpr int W = Simd<T>::W, N = BLOCKED_STATES;
    const int64_t spans = (length + span - 1) / span, state_size = e_size * N;
    const std::vector<T> a2 = base2(a, state_size);
    std::vector<T> zeros(e_size);
    std::vector<V> states((span + 1) * N), decays(span * N);
    const T* bias = or_zeros(delta_bias, zeros);
    const T* skip0 = or_zeros(skip, zeros);
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(grad_b + b * length * N, grad_b + (b + 1) * length * N, T(0));
        std::fill(grad_c + b * length * N, grad_c + (b + 1) * length * N, T(0));
        for (int64_t e0 = 0; e0 < e_size; e0 += W) {
            V g[N] = {}, gan[N] = {};
            V gs{}, gbias{};
            const V bias_e = load<V>(bias + e0), skip_e = load<V>(skip0 + e0);
            for (int64_t s = spans - 1; s >= 0; --s) {
                const int64_t t0 = s * span, t1 = std::min(length, t0 + span);
                V h[N];
                const T* start = saved + (b * spans + s) * state_size + e0;
#pragma GCC unroll 16
                for (int n = 0; n < N; ++n) states[n] = h[n] = load<V>(start + n * e_size);
                for (int64_t t = t0; t < t1; ++t) {
                    const int64_t row = (b * length + t) * e_size + e0, bc = (b * length + t) * N;
                    const V d = load<V>(delta + row), x = d * load<V>(u + row);
                    V* after = states.data() + (t - t0 + 1) * N;
                    V* decay = decays.data() + (t - t0) * N;
#pragma GCC unroll 16
                    for (int n = 0; n < N; ++n) {
                        decay[n] = vexp2_v<T>(d * load<V>(a2.data() + n * e_size + e0));
                        after[n] = h[n] = decay[n] * h[n] + x * bm[bc + n];
                    }
                }
                for (int64_t t = t1 - 1; t >= t0; --t) {
                    const int64_t row = (b * length + t) * e_size + e0, bc = (b * length + t) * N;
                    if (t >= PREFETCH_ROWS) {
                        const int64_t ahead = row - PREFETCH_ROWS * e_size;
                        __builtin_prefetch(grad_out + ahead);
                        __builtin_prefetch(delta + ahead);
                        __builtin_prefetch(u + ahead);
                        __builtin_prefetch(grad_u + ahead, 1);
                        __builtin_prefetch(grad_delta + ahead, 1);
                        if (z) {
                            __builtin_prefetch(z + ahead);
                            __builtin_prefetch(y + ahead);
                            __builtin_prefetch(grad_z + ahead, 1);
                        }
                        if (soft) __builtin_prefetch(pre + ahead);
                    }
                    const V d = load<V>(delta + row), ut = load<V>(u + row), go = load<V>(grad_out + row);
                    V dy = go;
                    if (z) {
                        const V zt = load<V>(z + row), gate = sigmoid_v<T>(zt);
                        const V skipped = load<V>(y + row) + skip_e * ut;
                        dy = go * zt * gate;
                        store(grad_z + row, go * skipped * gate * (T(1) + zt * (T(1) - gate)));
                    }
                    gs += dy * ut;
                    const V x = d * ut;
                    V gx{}, gd{}, pb[N], pc[N];
                    const V* before = states.data() + (t - t0) * N;
                    const V* decay = decays.data() + (t - t0) * N;
#pragma GCC unroll 16
                    for (int n = 0; n < N; ++n) {
                        const V total = g[n] + dy * cm[bc + n];
                        pc[n] = dy * before[N + n];
                        pb[n] = x * total;
                        gx += total * bm[bc + n];
                        const V log_decay = total * before[n] * decay[n];  // dL / d(Delta_t A)
                        gan[n] += log_decay * d;
                        gd += log_decay * load<V>(a + n * e_size + e0);
                        g[n] = total * decay[n];
                    }
#pragma GCC unroll 4
                    for (int k = 0; k < N; k += W) {
                        store(grad_b + bc + k, load<V>(grad_b + bc + k) + lane_sums(pb + k));
                        store(grad_c + bc + k, load<V>(grad_c + bc + k) + lane_sums(pc + k));
                    }
                    V gdt = gd + gx * ut;
                    store(grad_u + row, gx * d + dy * skip_e);
                    if (soft) gdt *= sigmoid_v<T>(load<V>(pre + row) + bias_e);
                    store(grad_delta + row, gdt);
                    gbias += gdt;
                }
            }
#pragma GCC unroll 16
            for (int n = 0; n < N; ++n) store(grad_a + b * state_size + n * e_size + e0, gan[n]);
            if (grad_skip) store(grad_skip + b * e_size + e0, gs);
            if (grad_bias) store(grad_bias + b * e_size + e0, gbias);
        }
    }
}
#endif  // SEPBENCH_BLOCKED

// scan_backward, blocked where the shape allows.
template <typename T>
void scan_backward_any(const T* delta, const T* u, const T* a, const T* bm, const T* cm, const T* skip, const T* z,
                       const T* pre, const T* delta_bias, const T* y, const T* saved, const T* grad_out, T* grad_delta,
                       T* grad_u, T* grad_a, T* grad_b, T* grad_c, T* grad_skip, T* grad_z, T* grad_bias, int64_t b0,
                       int64_t b1, int64_t length, int64_t e_size, int64_t n_size, int64_t span, int64_t soft) {
#if SEPBENCH_BLOCKED
    if (n_size == BLOCKED_STATES && e_size % Simd<T>::W == 0)
        return scan_backward_blocked(delta, u, a, bm, cm, skip, z, pre, delta_bias, y, saved, grad_out, grad_delta,
                                     grad_u, grad_a, grad_b, grad_c, grad_skip, grad_z, grad_bias, b0, b1, length,
                                     e_size, span, soft);
#endif
    scan_backward(delta, u, a, bm, cm, skip, z, pre, delta_bias, y, saved, grad_out, grad_delta, grad_u, grad_a,
                  grad_b, grad_c, grad_skip, grad_z, grad_bias, b0, b1, length, e_size, n_size, span, soft);
}

}  // namespace

#define SEPBENCH_KERNELS(T, SUFFIX)                                                                                \
    void scan_forward_##SUFFIX(const T* delta, const T* u, const T* a, const T* bm, const T* cm, const T* skip,    \
                               const T* z, const T* bias, T* y, T* out, T* saved, T* delta_out, int64_t b0,        \
                               int64_t b1, int64_t length, int64_t e, int64_t n, int64_t span, int64_t soft) {     \
        FlushSubnormals flush;                                                                                     \
        scan_forward(delta, u, a, bm, cm, skip, z, bias, y, out, saved, delta_out, b0, b1, length, e, n, span,    \
                     soft);                                                                                        \
    }                                                                                                              \
    void scan_backward_##SUFFIX(const T* delta, const T* u, const T* a, const T* bm, const T* cm, const T* skip,   \
                                const T* z, const T* pre, const T* bias, const T* y, const T* saved,               \
                                const T* grad_out,                                                                 \
                                T* grad_delta, T* grad_u, T* grad_a, T* grad_b, T* grad_c, T* grad_skip,           \
                                T* grad_z, T* grad_bias, int64_t b0, int64_t b1, int64_t length, int64_t e,        \
                                int64_t n, int64_t span, int64_t soft) {                                           \
        FlushSubnormals flush;                                                                                     \
        scan_backward_any(delta, u, a, bm, cm, skip, z, pre, bias, y, saved, grad_out, grad_delta, grad_u, grad_a, \
                          grad_b, grad_c, grad_skip, grad_z, grad_bias, b0, b1, length, e, n, span, soft);         \
    }                                                                                                              \
    void conv_forward_##SUFFIX(const T* x, const T* w, const T* bias, T* out, int64_t b0, int64_t b1,              \
                               int64_t length, int64_t e, int64_t k) {                                            \
        FlushSubnormals flush;                                                                                    \
        conv_forward(x, w, bias, out, b0, b1, length, e, k);                                                      \
    }                                                                                                              \
    void conv_backward_##SUFFIX(const T* x, const T* w, const T* bias, const T* grad_out, T* grad_x, T* grad_w,    \
                                T* grad_bias, int64_t b0, int64_t b1, int64_t length, int64_t e, int64_t k) {      \
        FlushSubnormals flush;                                                                                     \
        conv_backward(x, w, bias, grad_out, grad_x, grad_w, grad_bias, b0, b1, length, e, k);                     \
    }

extern "C" {
SEPBENCH_KERNELS(float, f32)
SEPBENCH_KERNELS(double, f64)
}
