// DSS on CPU as its recurrence (Gupta et al. 2022, sec. 3: the kernel K_k = Re(sum_n W_n B_n Lambda_n^k) of
// eq. 6 is the impulse response of h_t = Lambda h_{t-1} + u_t, y_t = Re(sum_n CB_n h_t)): y = K * u in
// O(B T D N) without the FFTs. Every (state n, block of BLOCK channels) is its own recurrence: it walks time
// with its state, decay, weights and gradient sums held in registers. The backward recomputes the block's
// states into a [T, 2, BLOCK] buffer, then walks back. Layouts (contiguous, D a multiple of BLOCK): u, y [B, T, D];
// decay and cb as real and imaginary planes [N, D]; the gradients of decay and cb one [N, D] plane per batch row.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels_common.h"

namespace {

constexpr int64_t BLOCK = 32;

template <typename T>
void dss_forward(const T* u, const T* decay_re, const T* decay_im, const T* cb_re, const T* cb_im, T* y,
                 int64_t b0, int64_t b1, int64_t length, int64_t d_size, int64_t n_size) {
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(y + b * length * d_size, y + (b + 1) * length * d_size, T(0));
        for (int64_t n = 0; n < n_size; ++n) {
            for (int64_t d0 = 0; d0 < d_size; d0 += BLOCK) {
                const int64_t at = n * d_size + d0;
                T lr[BLOCK], li[BLOCK], cr[BLOCK], ci[BLOCK], hr[BLOCK] = {}, hi[BLOCK] = {};
                std::memcpy(lr, decay_re + at, sizeof lr);
                std::memcpy(li, decay_im + at, sizeof li);
                std::memcpy(cr, cb_re + at, sizeof cr);
                std::memcpy(ci, cb_im + at, sizeof ci);
                for (int64_t t = 0; t < length; ++t) {
                    const T* __restrict ut = u + (b * length + t) * d_size + d0;
                    T* __restrict yt = y + (b * length + t) * d_size + d0;
#pragma omp simd
                    for (int64_t j = 0; j < BLOCK; ++j) {
                        const T re = lr[j] * hr[j] - li[j] * hi[j] + ut[j];
                        const T im = lr[j] * hi[j] + li[j] * hr[j];
                        hr[j] = re;
                        hi[j] = im;
                        yt[j] += cr[j] * re - ci[j] * im;
                    }
                }
            }
        }
    }
}

// The adjoint g_t = dL/dh_t = CB dy_t (as a real pair) + conj(Lambda) g_{t+1}, walked backwards.
template <typename T>
void dss_backward(const T* u, const T* decay_re, const T* decay_im, const T* cb_re, const T* cb_im,
                  const T* grad_y, T* grad_u, T* grad_decay_re, T* grad_decay_im, T* grad_cb_re, T* grad_cb_im,
                  int64_t b0, int64_t b1, int64_t length, int64_t d_size, int64_t n_size) {
    std::vector<T> buffer((length + 1) * 2 * BLOCK);
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(grad_u + b * length * d_size, grad_u + (b + 1) * length * d_size, T(0));
        for (int64_t n = 0; n < n_size; ++n) {
            for (int64_t d0 = 0; d0 < d_size; d0 += BLOCK) {
                const int64_t at = n * d_size + d0;
                T lr[BLOCK], li[BLOCK], cr[BLOCK], ci[BLOCK];
                std::memcpy(lr, decay_re + at, sizeof lr);
                std::memcpy(li, decay_im + at, sizeof li);
                std::memcpy(cr, cb_re + at, sizeof cr);
                std::memcpy(ci, cb_im + at, sizeof ci);
                T* states = buffer.data();  // states[t + 1] = h_t, states[0] = 0
                std::fill(states, states + 2 * BLOCK, T(0));
                for (int64_t t = 0; t < length; ++t) {
                    const T* __restrict ut = u + (b * length + t) * d_size + d0;
                    const T* __restrict pr = states + t * 2 * BLOCK;
                    const T* __restrict pi = pr + BLOCK;
                    T* __restrict hr = states + (t + 1) * 2 * BLOCK;
                    T* __restrict hi = hr + BLOCK;
#pragma omp simd
                    for (int64_t j = 0; j < BLOCK; ++j) {
                        hr[j] = lr[j] * pr[j] - li[j] * pi[j] + ut[j];
                        hi[j] = lr[j] * pi[j] + li[j] * pr[j];
                    }
                }
                T gr[BLOCK] = {}, gi[BLOCK] = {}, glr[BLOCK] = {}, gli[BLOCK] = {}, gcr[BLOCK] = {}, gci[BLOCK] = {};
                for (int64_t t = length - 1; t >= 0; --t) {
                    const T* __restrict dy = grad_y + (b * length + t) * d_size + d0;
                    T* __restrict gu = grad_u + (b * length + t) * d_size + d0;
                    const T* __restrict pr = states + t * 2 * BLOCK;
                    const T* __restrict pi = pr + BLOCK;
                    const T* __restrict hr = pr + 2 * BLOCK;
                    const T* __restrict hi = hr + BLOCK;
#pragma omp simd
                    for (int64_t j = 0; j < BLOCK; ++j) {
                        const T re = gr[j] + dy[j] * cr[j], im = gi[j] - dy[j] * ci[j];
                        gcr[j] += dy[j] * hr[j];
                        gci[j] -= dy[j] * hi[j];
                        gu[j] += re;
                        glr[j] += re * pr[j] + im * pi[j];
                        gli[j] += im * pr[j] - re * pi[j];
                        gr[j] = re * lr[j] + im * li[j];
                        gi[j] = im * lr[j] - re * li[j];
                    }
                }
                const int64_t out = b * n_size * d_size + at;
                std::memcpy(grad_decay_re + out, glr, sizeof glr);
                std::memcpy(grad_decay_im + out, gli, sizeof gli);
                std::memcpy(grad_cb_re + out, gcr, sizeof gcr);
                std::memcpy(grad_cb_im + out, gci, sizeof gci);
            }
        }
    }
}

}  // namespace

#define SEPBENCH_DSS_KERNELS(T, SUFFIX)                                                                            \
    void dss_forward_##SUFFIX(const T* u, const T* lr, const T* li, const T* cr, const T* ci, T* y, int64_t b0,    \
                              int64_t b1, int64_t length, int64_t d, int64_t n) {                                  \
        FlushSubnormals flush;                                                                                     \
        dss_forward(u, lr, li, cr, ci, y, b0, b1, length, d, n);                                                  \
    }                                                                                                              \
    void dss_backward_##SUFFIX(const T* u, const T* lr, const T* li, const T* cr, const T* ci, const T* grad_y,    \
                               T* grad_u, T* glr, T* gli, T* gcr, T* gci, int64_t b0, int64_t b1, int64_t length,  \
                               int64_t d, int64_t n) {                                                             \
        FlushSubnormals flush;                                                                                     \
        dss_backward(u, lr, li, cr, ci, grad_y, grad_u, glr, gli, gcr, gci, b0, b1, length, d, n);                \
    }

extern "C" {
int64_t dss_block() { return BLOCK; }
SEPBENCH_DSS_KERNELS(float, f32)
SEPBENCH_DSS_KERNELS(double, f64)
}
