#include "vector_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "isa_target.h"

// glibc's libmvec (2.35+): tanhf and expf on 8 (AVX2) and 16 (AVX-512) lanes.
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
extern "C" __m512 _ZGVeN16v_tanhf(__m512);
extern "C" __m256 _ZGVdN8v_expf(__m256);
extern "C" __m512 _ZGVeN16v_expf(__m512);

namespace dscore::transformer::cpu {
namespace {

constexpr float kScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

// Scalar reference, also the fallback.
inline float gelu_scalar(float x) {
  return 0.5f * x * (1.0f + std::tanh(kScale * (x + kCubic * x * x * x)));
}
inline float gelu_grad_scalar(float x) {
  const float th = std::tanh(kScale * (x + kCubic * x * x * x));
  const float du = kScale * (1.0f + 3.0f * kCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// SiLU, x sigmoid(x), and its derivative s (1 + x (1 - s)), s = sigmoid(x),
// with sigmoid(x) = 1 / (1 + exp(-x)): exp(-x) = inf (x below about -88)
// gives s = 0 and silu = -0, no NaN.
inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu_scalar(float x) { return x * sigmoid_scalar(x); }
inline float silu_grad_scalar(float x) {
  const float s = sigmoid_scalar(x);
  return s * (1.0f + x * (1.0f - s));
}

// Each kernel below handles full vectors, then the tail through a padded
// copy (Tail), so every element takes the vector path. Written without
// lambdas: a lambda does not inherit its function's target attribute.
template <int W>
struct Tail {
  alignas(64) float a[W] = {}, b[W] = {}, out[W] = {};
  Tail(const float* src_a, const float* src_b, int64_t rest) {
    std::memcpy(a, src_a, static_cast<size_t>(rest) * sizeof(float));
    if (src_b != nullptr) std::memcpy(b, src_b, static_cast<size_t>(rest) * sizeof(float));
  }
};

#define DSCORE_VECTOR_KERNEL(NAME, TARGET, W, BODY)                                \
  TARGET void NAME(float* out, const float* a, const float* b, int64_t n) {        \
    int64_t i = 0;                                                                 \
    for (; i + (W) <= n; i += (W)) BODY(out + i, a + i, b == nullptr ? b : b + i); \
    const int64_t rest = n - i;                                                    \
    if (rest == 0) return;                                                         \
    Tail<W> t(a + i, b == nullptr ? b : b + i, rest);                              \
    BODY(t.out, t.a, b == nullptr ? b : t.b);                                      \
    std::memcpy(out + i, t.out, static_cast<size_t>(rest) * sizeof(float));        \
  }

DSCORE_AVX2 inline void gelu8(float* o, const float* in, const float*) {
  const __m256 x = _mm256_loadu_ps(in);
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u =
      _mm256_mul_ps(_mm256_set1_ps(kScale), _mm256_fmadd_ps(_mm256_set1_ps(kCubic), x3, x));
  const __m256 th = _ZGVdN8v_tanhf(u);
  const __m256 half_x = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
  _mm256_storeu_ps(o, _mm256_fmadd_ps(half_x, th, half_x));
}

DSCORE_AVX2 inline void gelu_grad8(float* o, const float* in, const float* d) {
  const __m256 x = _mm256_loadu_ps(in);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 x3 = _mm256_mul_ps(x2, x);
  const __m256 u =
      _mm256_mul_ps(_mm256_set1_ps(kScale), _mm256_fmadd_ps(_mm256_set1_ps(kCubic), x3, x));
  const __m256 th = _ZGVdN8v_tanhf(u);
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256 du = _mm256_mul_ps(_mm256_set1_ps(kScale),
                                  _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kCubic), x2, one));
  const __m256 sech2 = _mm256_fnmadd_ps(th, th, one);
  const __m256 grad = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), sech2), du,
                                      _mm256_mul_ps(half, _mm256_add_ps(one, th)));
  _mm256_storeu_ps(o, _mm256_mul_ps(grad, _mm256_loadu_ps(d)));
}

DSCORE_AVX512 inline void gelu16(float* o, const float* in, const float*) {
  const __m512 x = _mm512_loadu_ps(in);
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u =
      _mm512_mul_ps(_mm512_set1_ps(kScale), _mm512_fmadd_ps(_mm512_set1_ps(kCubic), x3, x));
  const __m512 th = _ZGVeN16v_tanhf(u);
  const __m512 half_x = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
  _mm512_storeu_ps(o, _mm512_fmadd_ps(half_x, th, half_x));
}

DSCORE_AVX512 inline void gelu_grad16(float* o, const float* in, const float* d) {
  const __m512 x = _mm512_loadu_ps(in);
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 x3 = _mm512_mul_ps(x2, x);
  const __m512 u =
      _mm512_mul_ps(_mm512_set1_ps(kScale), _mm512_fmadd_ps(_mm512_set1_ps(kCubic), x3, x));
  const __m512 th = _ZGVeN16v_tanhf(u);
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  const __m512 du = _mm512_mul_ps(_mm512_set1_ps(kScale),
                                  _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kCubic), x2, one));
  const __m512 sech2 = _mm512_fnmadd_ps(th, th, one);
  const __m512 grad = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), sech2), du,
                                      _mm512_mul_ps(half, _mm512_add_ps(one, th)));
  _mm512_storeu_ps(o, _mm512_mul_ps(grad, _mm512_loadu_ps(d)));
}

DSCORE_AVX2 inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(one, _mm256_add_ps(one, e));
}
DSCORE_AVX2 inline void silu_mul8(float* o, const float* in, const float* m) {
  const __m256 x = _mm256_loadu_ps(in);
  _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_mul_ps(x, sigmoid8(x)), _mm256_loadu_ps(m)));
}
DSCORE_AVX2 inline void silu_grad_mul8(float* o, const float* in, const float* m) {
  const __m256 x = _mm256_loadu_ps(in), s = sigmoid8(x), one = _mm256_set1_ps(1.0f);
  const __m256 grad = _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
  _mm256_storeu_ps(o, _mm256_mul_ps(grad, _mm256_loadu_ps(m)));
}
DSCORE_AVX512 inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(one, _mm512_add_ps(one, e));
}
DSCORE_AVX512 inline void silu_mul16(float* o, const float* in, const float* m) {
  const __m512 x = _mm512_loadu_ps(in);
  _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_mul_ps(x, sigmoid16(x)), _mm512_loadu_ps(m)));
}
DSCORE_AVX512 inline void silu_grad_mul16(float* o, const float* in, const float* m) {
  const __m512 x = _mm512_loadu_ps(in), s = sigmoid16(x), one = _mm512_set1_ps(1.0f);
  const __m512 grad = _mm512_mul_ps(s, _mm512_fmadd_ps(x, _mm512_sub_ps(one, s), one));
  _mm512_storeu_ps(o, _mm512_mul_ps(grad, _mm512_loadu_ps(m)));
}

DSCORE_VECTOR_KERNEL(gelu_forward_avx2, DSCORE_AVX2, 8, gelu8)
DSCORE_VECTOR_KERNEL(gelu_backward_avx2, DSCORE_AVX2, 8, gelu_grad8)
DSCORE_VECTOR_KERNEL(gelu_forward_avx512, DSCORE_AVX512, 16, gelu16)
DSCORE_VECTOR_KERNEL(gelu_backward_avx512, DSCORE_AVX512, 16, gelu_grad16)
DSCORE_VECTOR_KERNEL(silu_mul_avx2, DSCORE_AVX2, 8, silu_mul8)
DSCORE_VECTOR_KERNEL(silu_grad_mul_avx2, DSCORE_AVX2, 8, silu_grad_mul8)
DSCORE_VECTOR_KERNEL(silu_mul_avx512, DSCORE_AVX512, 16, silu_mul16)
DSCORE_VECTOR_KERNEL(silu_grad_mul_avx512, DSCORE_AVX512, 16, silu_grad_mul16)

// The scalar paths, in the vector kernels' form.
void gelu_forward_scalar(float* out, const float* a, const float*, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_scalar(a[i]);
}
void gelu_backward_scalar(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_grad_scalar(a[i]) * b[i];
}
void silu_mul_scalar(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_scalar(a[i]) * b[i];
}
void silu_grad_mul_scalar(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_grad_scalar(a[i]) * b[i];
}

// One kernel on each ISA.
struct IsaKernels {
  void (*avx512)(float*, const float*, const float*, int64_t);
  void (*avx2)(float*, const float*, const float*, int64_t);
  void (*scalar)(float*, const float*, const float*, int64_t);
  void operator()(VectorIsa isa, float* out, const float* a, const float* b, int64_t n) const {
    switch (isa) {
      case VectorIsa::kAvx512:
        return avx512(out, a, b, n);
      case VectorIsa::kAvx2:
        return avx2(out, a, b, n);
      case VectorIsa::kScalar:
        break;
    }
    scalar(out, a, b, n);
  }
};
constexpr IsaKernels kGeluForward{gelu_forward_avx512, gelu_forward_avx2, gelu_forward_scalar};
constexpr IsaKernels kGeluBackward{gelu_backward_avx512, gelu_backward_avx2, gelu_backward_scalar};
constexpr IsaKernels kSiluMul{silu_mul_avx512, silu_mul_avx2, silu_mul_scalar};
constexpr IsaKernels kSiluGradMul{silu_grad_mul_avx512, silu_grad_mul_avx2, silu_grad_mul_scalar};

void add_rows_scalar(float* acc, const float* rows, int64_t n_rows, int64_t stride, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows + r * stride;
    for (int64_t i = 0; i < n; ++i) acc[i] += row[i];
  }
}

DSCORE_AVX2 void add_rows_avx2(float* acc, const float* rows, int64_t n_rows, int64_t stride,
                               int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows + r * stride;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_loadu_ps(row + i)));
    for (; i < n; ++i) acc[i] += row[i];
  }
}

DSCORE_AVX512 void add_rows_avx512(float* acc, const float* rows, int64_t n_rows, int64_t stride,
                                   int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows + r * stride;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), _mm512_loadu_ps(row + i)));
    for (; i < n; ++i) acc[i] += row[i];
  }
}

DSCORE_AVX512 void copy_streaming_avx512(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  _mm_sfence();  // the streamed stores before whatever follows
  std::memcpy(dst + i, src + i, static_cast<size_t>(n - i) * sizeof(float));
}

// softmax_row_f32's lanes: the row's maximum, then exp(z - max) stored and
// summed, then scaled by 1 / sum. Tails through masked loads and stores.
// The maskz forms with every lane set, and the lanes reduced through
// memory: GCC 12 warns that the unmasked forms (and its reduce helpers)
// read an uninitialised pass-through vector.
__attribute__((target("avx512f"))) double softmax_row_avx512(float* z, int64_t V) {
  constexpr __mmask16 all = 0xffff;
  alignas(64) float lanes[16];
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  __m512 mx = lowest;
  int64_t v = 0;
  for (; v + 16 <= V; v += 16) mx = _mm512_maskz_max_ps(all, mx, _mm512_loadu_ps(z + v));
  const __mmask16 tail = static_cast<__mmask16>((1u << (V - v)) - 1);
  mx = _mm512_maskz_max_ps(all, mx, _mm512_mask_loadu_ps(lowest, tail, z + v));
  _mm512_store_ps(lanes, mx);
  float m = lanes[0];
  for (int l = 1; l < 16; ++l) m = std::max(m, lanes[l]);
  const __m512 shift = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (v = 0; v + 16 <= V; v += 16) {
    const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_loadu_ps(z + v), shift));
    _mm512_storeu_ps(z + v, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail != 0) {
    const __m512 e =
        _ZGVeN16v_expf(_mm512_sub_ps(_mm512_mask_loadu_ps(lowest, tail, z + v), shift));
    _mm512_mask_storeu_ps(z + v, tail, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  const __m512 inv = _mm512_set1_ps(1.0f / total);
  for (v = 0; v + 16 <= V; v += 16)
    _mm512_storeu_ps(z + v, _mm512_mul_ps(_mm512_loadu_ps(z + v), inv));
  if (tail != 0)
    _mm512_mask_storeu_ps(z + v, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, z + v), inv));
  return static_cast<double>(m) + std::log(static_cast<double>(total));
}

DSCORE_AVX2 double softmax_row_avx2(float* z, int64_t V) {
  float m = -INFINITY;
  int64_t v = 0;
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (; v + 8 <= V; v += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(z + v));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  for (float x : lanes) m = std::max(m, x);
  for (int64_t t = v; t < V; ++t) m = std::max(m, z[t]);
  const __m256 shift = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (v = 0; v + 8 <= V; v += 8) {
    const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(z + v), shift));
    _mm256_storeu_ps(z + v, e);
    sum = _mm256_add_ps(sum, e);
  }
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  for (int64_t t = v; t < V; ++t) {
    z[t] = std::exp(z[t] - m);
    total += z[t];
  }
  const float inv = 1.0f / total;
  for (int64_t t = 0; t < V; ++t) z[t] *= inv;
  return static_cast<double>(m) + std::log(static_cast<double>(total));
}

VectorIsa detect() {
  VectorIsa best = VectorIsa::kScalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = VectorIsa::kAvx2;
  if (__builtin_cpu_supports("avx512f")) best = VectorIsa::kAvx512;
  return sdk::lowered_cpu_isa(best, std::getenv("DSCORE_CPU_ISA"), "cpu kernels");
}

}  // namespace

VectorIsa vector_isa() {
  static const VectorIsa isa = detect();
  return isa;
}

void gelu_forward_f32(float* out, const float* inp, int64_t n, VectorIsa isa) {
  kGeluForward(isa, out, inp, nullptr, n);
}

void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, VectorIsa isa) {
  kGeluBackward(isa, dinp, inp, dout, n);
}

void add_rows_f32(float* acc, const float* rows, int64_t n_rows, int64_t stride, int64_t n,
                  VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512:
      return add_rows_avx512(acc, rows, n_rows, stride, n);
    case VectorIsa::kAvx2:
      return add_rows_avx2(acc, rows, n_rows, stride, n);
    case VectorIsa::kScalar:
      break;
  }
  add_rows_scalar(acc, rows, n_rows, stride, n);
}

double softmax_row_f32(float* z, int64_t V, VectorIsa isa) {
  if (V <= 0) return -INFINITY;
  switch (isa) {
    case VectorIsa::kAvx512:
      return softmax_row_avx512(z, V);
    case VectorIsa::kAvx2:
      return softmax_row_avx2(z, V);
    case VectorIsa::kScalar:
      break;
  }
  return softmax_row_scalar(z, V);
}

void copy_streaming_f32(float* dst, const float* src, int64_t n, VectorIsa isa) {
  if (isa == VectorIsa::kAvx512 && reinterpret_cast<uintptr_t>(dst) % 64 == 0)
    return copy_streaming_avx512(dst, src, n);
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void silu_mul_f32(float* out, const float* x, const float* m, int64_t n, VectorIsa isa) {
  kSiluMul(isa, out, x, m, n);
}

void silu_grad_mul_f32(float* out, const float* x, const float* m, int64_t n, VectorIsa isa) {
  kSiluGradMul(isa, out, x, m, n);
}

}  // namespace dscore::transformer::cpu
