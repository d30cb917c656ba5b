#include "vector_math.h"

#include <immintrin.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// glibc's libmvec (2.35+): tanhf on 8 (AVX2) and 16 (AVX-512) lanes.
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
extern "C" __m512 _ZGVeN16v_tanhf(__m512);

#define DSCORE_AVX2 __attribute__((target("avx2,fma")))
#define DSCORE_AVX512 __attribute__((target("avx512f")))

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

DSCORE_VECTOR_KERNEL(gelu_forward_avx2, DSCORE_AVX2, 8, gelu8)
DSCORE_VECTOR_KERNEL(gelu_backward_avx2, DSCORE_AVX2, 8, gelu_grad8)
DSCORE_VECTOR_KERNEL(gelu_forward_avx512, DSCORE_AVX512, 16, gelu16)
DSCORE_VECTOR_KERNEL(gelu_backward_avx512, DSCORE_AVX512, 16, gelu_grad16)

VectorIsa detect() {
  VectorIsa best = VectorIsa::kScalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = VectorIsa::kAvx2;
  if (__builtin_cpu_supports("avx512f")) best = VectorIsa::kAvx512;
  const char* cap = std::getenv("DSCORE_CPU_ISA");
  if (cap == nullptr) return best;
  const std::string want = cap;
  VectorIsa limit = VectorIsa::kAvx512;
  if (want == "scalar") {
    limit = VectorIsa::kScalar;
  } else if (want == "avx2") {
    limit = VectorIsa::kAvx2;
  } else if (want != "avx512") {
    std::fprintf(stderr,
                 "[dscore] gpt: DSCORE_CPU_ISA=%s is not one of avx512, avx2, scalar; "
                 "ignored\n",
                 cap);
  }
  return limit < best ? limit : best;
}

}  // namespace

VectorIsa vector_isa() {
  static const VectorIsa isa = detect();
  return isa;
}

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512:
      return "avx512";
    case VectorIsa::kAvx2:
      return "avx2";
    case VectorIsa::kScalar:
      break;
  }
  return "scalar";
}

void gelu_forward_f32(float* out, const float* inp, int64_t n, VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512:
      return gelu_forward_avx512(out, inp, nullptr, n);
    case VectorIsa::kAvx2:
      return gelu_forward_avx2(out, inp, nullptr, n);
    case VectorIsa::kScalar:
      break;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_scalar(inp[i]);
}

void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512:
      return gelu_backward_avx512(dinp, inp, dout, n);
    case VectorIsa::kAvx2:
      return gelu_backward_avx2(dinp, inp, dout, n);
    case VectorIsa::kScalar:
      break;
  }
  for (int64_t i = 0; i < n; ++i) dinp[i] = gelu_grad_scalar(inp[i]) * dout[i];
}

}  // namespace dscore::transformer::cpu
