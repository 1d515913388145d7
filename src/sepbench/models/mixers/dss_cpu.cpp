// DSS on CPU as its recurrence (Gupta et al. 2022, sec. 3: the kernel K_k = Re(sum_n W_n B_n Lambda_n^k) of
// eq. 6 is the impulse response of h_t = Lambda h_{t-1} + u_t, y_t = Re(sum_n CB_n h_t)): y = K * u in
// O(B T D N) without the FFTs. Each batch row walks time with its complex [N, D] state in cache; the backward
// recomputes each span of `span` steps from a state saved every `span` steps by the forward. Layouts
// (contiguous): u, y [B, T, D]; decay and cb as real and imaginary planes [N, D]; saved [B, spans, 2, N, D].
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

template <typename T>
void dss_forward(const T* u, const T* decay_re, const T* decay_im, const T* cb_re, const T* cb_im, T* y, T* saved,
                 int64_t b0, int64_t b1, int64_t length, int64_t d_size, int64_t n_size, int64_t span) {
    const int64_t spans = (length + span - 1) / span, plane = n_size * d_size;
    std::vector<T> state(2 * plane);
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(state.begin(), state.end(), T(0));
        for (int64_t t = 0; t < length; ++t) {
            if (saved && t % span == 0)
                std::memcpy(saved + (b * spans + t / span) * 2 * plane, state.data(), 2 * plane * sizeof(T));
            const T* __restrict ut = u + (b * length + t) * d_size;
            T* __restrict yt = y + (b * length + t) * d_size;
            std::fill(yt, yt + d_size, T(0));
            for (int64_t n = 0; n < n_size; ++n) {
                T* __restrict hr = state.data() + n * d_size;
                T* __restrict hi = hr + plane;
                const T* __restrict lr = decay_re + n * d_size;
                const T* __restrict li = decay_im + n * d_size;
                const T* __restrict cr = cb_re + n * d_size;
                const T* __restrict ci = cb_im + n * d_size;
#pragma omp simd
                for (int64_t d = 0; d < d_size; ++d) {
                    const T re = lr[d] * hr[d] - li[d] * hi[d] + ut[d];
                    const T im = lr[d] * hi[d] + li[d] * hr[d];
                    hr[d] = re;
                    hi[d] = im;
                    yt[d] += cr[d] * re - ci[d] * im;
                }
            }
        }
    }
}

// The adjoint g_t = dL/dh_t = CB dy_t (as a real pair) + conj(Lambda) g_{t+1}, walked backwards one span at a
// time. grad_decay_* and grad_cb_* hold one [N, D] plane per batch row.
template <typename T>
void dss_backward(const T* u, const T* decay_re, const T* decay_im, const T* cb_re, const T* cb_im, const T* saved,
                  const T* grad_y, T* grad_u, T* grad_decay_re, T* grad_decay_im, T* grad_cb_re, T* grad_cb_im,
                  int64_t b0, int64_t b1, int64_t length, int64_t d_size, int64_t n_size, int64_t span) {
    const int64_t spans = (length + span - 1) / span, plane = n_size * d_size;
    std::vector<T> states((span + 1) * 2 * plane), adjoint(2 * plane);
    for (int64_t b = b0; b < b1; ++b) {
        std::fill(adjoint.begin(), adjoint.end(), T(0));
        T* glr_b = grad_decay_re + b * plane;
        T* gli_b = grad_decay_im + b * plane;
        T* gcr_b = grad_cb_re + b * plane;
        T* gci_b = grad_cb_im + b * plane;
        for (T* g : {glr_b, gli_b, gcr_b, gci_b}) std::fill(g, g + plane, T(0));
        for (int64_t s = spans - 1; s >= 0; --s) {
            const int64_t t0 = s * span, t1 = std::min(length, t0 + span);
            std::memcpy(states.data(), saved + (b * spans + s) * 2 * plane, 2 * plane * sizeof(T));
            for (int64_t t = t0; t < t1; ++t) {
                const T* __restrict ut = u + (b * length + t) * d_size;
                for (int64_t n = 0; n < n_size; ++n) {
                    const T* __restrict hr = states.data() + (t - t0) * 2 * plane + n * d_size;
                    const T* __restrict hi = hr + plane;
                    T* __restrict nr = states.data() + (t - t0 + 1) * 2 * plane + n * d_size;
                    T* __restrict ni = nr + plane;
                    const T* __restrict lr = decay_re + n * d_size;
                    const T* __restrict li = decay_im + n * d_size;
#pragma omp simd
                    for (int64_t d = 0; d < d_size; ++d) {
                        nr[d] = lr[d] * hr[d] - li[d] * hi[d] + ut[d];
                        ni[d] = lr[d] * hi[d] + li[d] * hr[d];
                    }
                }
            }
            for (int64_t t = t1 - 1; t >= t0; --t) {
                const T* __restrict dy = grad_y + (b * length + t) * d_size;
                T* __restrict gu = grad_u + (b * length + t) * d_size;
                std::fill(gu, gu + d_size, T(0));
                for (int64_t n = 0; n < n_size; ++n) {
                    const T* __restrict pr = states.data() + (t - t0) * 2 * plane + n * d_size;
                    const T* __restrict pi = pr + plane;
                    const T* __restrict hr = pr + 2 * plane;
                    const T* __restrict hi = hr + plane;
                    const T* __restrict lr = decay_re + n * d_size;
                    const T* __restrict li = decay_im + n * d_size;
                    const T* __restrict cr = cb_re + n * d_size;
                    const T* __restrict ci = cb_im + n * d_size;
                    T* __restrict gr = adjoint.data() + n * d_size;
                    T* __restrict gi = gr + plane;
                    T* __restrict glr = glr_b + n * d_size;
                    T* __restrict gli = gli_b + n * d_size;
                    T* __restrict gcr = gcr_b + n * d_size;
                    T* __restrict gci = gci_b + n * d_size;
#pragma omp simd
                    for (int64_t d = 0; d < d_size; ++d) {
                        const T re = gr[d] + dy[d] * cr[d], im = gi[d] - dy[d] * ci[d];
                        gcr[d] += dy[d] * hr[d];
                        gci[d] -= dy[d] * hi[d];
                        gu[d] += re;
                        glr[d] += re * pr[d] + im * pi[d];
                        gli[d] += im * pr[d] - re * pi[d];
                        gr[d] = re * lr[d] + im * li[d];
                        gi[d] = im * lr[d] - re * li[d];
                    }
                }
            }
        }
    }
}

}  // namespace

#define SEPBENCH_DSS_KERNELS(T, SUFFIX)                                                                            \
    void dss_forward_##SUFFIX(const T* u, const T* lr, const T* li, const T* cr, const T* ci, T* y, T* saved,      \
                              int64_t b0, int64_t b1, int64_t length, int64_t d, int64_t n, int64_t span) {        \
        dss_forward(u, lr, li, cr, ci, y, saved, b0, b1, length, d, n, span);                                     \
    }                                                                                                              \
    void dss_backward_##SUFFIX(const T* u, const T* lr, const T* li, const T* cr, const T* ci, const T* saved,     \
                               const T* grad_y, T* grad_u, T* glr, T* gli, T* gcr, T* gci, int64_t b0, int64_t b1, \
                               int64_t length, int64_t d, int64_t n, int64_t span) {                              \
        dss_backward(u, lr, li, cr, ci, saved, grad_y, grad_u, glr, gli, gcr, gci, b0, b1, length, d, n, span);   \
    }

extern "C" {
SEPBENCH_DSS_KERNELS(float, f32)
SEPBENCH_DSS_KERNELS(double, f64)
}
