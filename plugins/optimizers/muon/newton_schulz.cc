#include "newton_schulz.h"

#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <vector>

#include "matmul.h"

namespace dscore::muon {
namespace {

using Matrix = std::vector<float>;

constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
constexpr int kSteps = 5;

// Each operation's result as the method's dtype holds it.
struct Rounding {
  NsMethod method;
  float operator()(float v) const { return round_to_method(method, v); }
  void all(Matrix& m) const {
    for (float& v : m) v = (*this)(v);
  }
};

// C = round(A B), A: r x k, B: k x c, or B^T when `transpose_b` (B: c x k).
Matrix product(const Rounding& round, const Matrix& a, const Matrix& b, int64_t r, int64_t k,
               int64_t c, bool transpose_b = false) {
  Matrix out(static_cast<size_t>(r * c));
  matmul(a.data(), b.data(), out.data(), r, k, c, transpose_b, /*accumulate=*/false);
  round.all(out);
  return out;
}

// round(round(s * bias) + A B): torch's `s * Y + A @ B`, which
// torch.compile (DeepSpeed compiles Muon) turns into addmm with the scaled
// bias in the method's dtype and one rounding after the fp32 sum.
Matrix scaled_plus_product(const Rounding& round, float s, const Matrix& bias, const Matrix& a,
                           const Matrix& b, int64_t r, int64_t k, int64_t c) {
  Matrix out(bias.size());
  for (size_t i = 0; i < bias.size(); ++i) out[i] = round(s * bias[i]);
  matmul(a.data(), b.data(), out.data(), r, k, c, /*transpose_b=*/false, /*accumulate=*/true);
  round.all(out);
  return out;
}

Matrix scaled(const Rounding& round, float s, const Matrix& x) {
  Matrix out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = round(s * x[i]);
  return out;
}

// Z = b * S + c * S @ S for a square S (n x n): Python reads the second
// term as (c * S) @ S.
Matrix polynomial(const Rounding& round, const Matrix& s, int64_t n) {
  return scaled_plus_product(round, kB, s, scaled(round, kC, s), s, n, n, n);
}

// The standard iteration on X (n x m), in place: A = X X^T, B = b A + c A A,
// X = a X + B X. `unrounded`: X before its rounding, which the first a X
// reads (compiled, it fuses into the normalisation).
void standard_steps(const Rounding& round, Matrix& x, const Matrix& unrounded, int64_t n,
                    int64_t m) {
  for (int step = 0; step < kSteps; ++step) {
    const Matrix a = product(round, x, x, n, m, n, /*transpose_b=*/true);
    const Matrix b = polynomial(round, a, n);
    x = scaled_plus_product(round, kA, step == 0 ? unrounded : x, b, x, n, n, m);
  }
}

// The Gram iteration: the polynomial's product Q accumulates on R = X X^T,
// applied to X at the restart (step 2) and at the end.
void gram_steps(const Rounding& round, Matrix& x, int64_t n, int64_t m) {
  constexpr int kRestart = 2;
  Matrix r = product(round, x, x, n, m, n, /*transpose_b=*/true);
  Matrix q;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kRestart) {
      x = product(round, q, x, n, n, m);
      r = product(round, x, x, n, m, n, /*transpose_b=*/true);
      q.clear();
    }
    const Matrix z = polynomial(round, r, n);
    if (q.empty()) {
      // Q.diagonal().add_(a): the in-place add takes a in the tensor's dtype.
      q = z;
      for (int64_t i = 0; i < n; ++i) q[i * n + i] = round(q[i * n + i] + round(kA));
    } else {
      q = scaled_plus_product(round, kA, q, z, q, n, n, n);
    }
    if (step < kSteps - 1 && step + 1 != kRestart) {
      const Matrix rz = scaled_plus_product(round, kA, r, z, r, n, n, n);
      r = scaled_plus_product(round, kA, rz, z, rz, n, n, n);
    }
  }
  x = product(round, q, x, n, n, m);
}

}  // namespace

float round_to_method(NsMethod method, float v) {
  return method == NsMethod::kGram ? sdk::half_to_float(sdk::float_to_half(v))
                                   : sdk::bf16_to_float(sdk::float_to_bf16(v));
}

void orthogonalize(NsMethod method, int64_t rows, int64_t cols, float* x) {
  const Rounding round{method};
  // The wide orientation: n <= m.
  const bool transposed = rows > cols;
  const int64_t n = transposed ? cols : rows, m = transposed ? rows : cols;
  Matrix w(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) w[transposed ? j * m + i : i * m + j] = x[i * cols + j];
  // Normalised to a spectral norm of at most 1, in fp32, then rounded to
  // the method's dtype (compiled, kStandard's cast of the input to bf16
  // folds into this one rounding too).
  double squares = 0;
  for (float v : w) squares += static_cast<double>(v) * v;
  const float norm = static_cast<float>(std::sqrt(squares)) + 1e-7f;
  for (float& v : w) v /= norm;
  const Matrix unrounded = w;
  round.all(w);
  if (method == NsMethod::kGram && m > n)
    gram_steps(round, w, n, m);
  else
    standard_steps(round, w, unrounded, n, m);  // square: Gram has no advantage
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = w[transposed ? j * m + i : i * m + j];
}

}  // namespace dscore::muon
