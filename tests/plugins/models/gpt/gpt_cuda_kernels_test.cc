// Each step of the gpt model's CUDA backend (plugins/models/transformer_common/cuda)
// against the CPU kernel with the same arguments (cpu/kernels.h, the
// reference), for S = fp32 and bf16, on random inputs rounded to S first so
// both sides see the same values. Outputs that accumulate (+=) start from
// random values, so "adds" and "overwrites" are both checked. Label `gpu`:
// skipped (GTEST_SKIP) where no CUDA device is visible.
//
// Attention runs unfused and (bf16) fused (DSCORE_CUDA_ATTENTION).
// Tolerance: max|cuda - cpu| <= tol * max|cpu| per output, tol = 1e-4 for
// fp32 (summation order only) and 3e-2 for bf16 (outputs and intermediate
// activations rounded to 8 mantissa bits); LM head loss |rel| <= 1e-5 (fp32),
// 1e-3 (bf16: logits are fp32 from the same bf16 inputs on both sides).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/kernels.h"
#include "tests/fakes/scoped_env.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cuda/cuda_backend.h"

namespace {

namespace cpu = dscore::gpt::cpu;
using dscore::gpt::gpu::CudaBackend;
using dscore::gpt::gpu::DeviceBuffer;

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::vector<float> random_values(int64_t n, float scale, uint32_t seed, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = offset + u(rng);
  return v;
}

void expect_close(const std::vector<float>& ref, const std::vector<float>& got, double tol,
                  const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double scale = 0, diff = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
    const double d = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (d > diff) diff = d, worst = i;
  }
  EXPECT_GT(scale, 0.0) << what << ": the reference is all zero";
  EXPECT_LE(diff, tol * scale) << what << ": element " << worst << " is " << got[worst]
                               << ", expected " << ref[worst] << " (max|ref| " << scale << ")";
}

template <typename S>
class GptCudaKernels : public ::testing::Test {
 protected:
  static constexpr bool kFloat = std::is_same_v<S, float>;
  static constexpr double kTol = kFloat ? 1e-4 : 3e-2;
  static constexpr double kLossTol = kFloat ? 1e-5 : 1e-3;

  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    dscore::transformer::cpu::load_gemm_library();
    backend_ = std::make_unique<CudaBackend<S>>();
  }

  // Values as S holds them.
  static std::vector<float> rounded(std::vector<float> v) {
    if constexpr (!kFloat)
      for (float& x : v) x = dscore::sdk::bf16_to_float(dscore::sdk::float_to_bf16(x));
    return v;
  }
  std::vector<float> random(int64_t n, float scale, uint32_t seed, float offset = 0.0f) {
    return rounded(random_values(n, scale, seed, offset));
  }

  // X = S: stored as S; X = float: as is.
  template <typename X = S>
  DeviceBuffer<X> upload(const std::vector<float>& v) {
    DeviceBuffer<X> buffer = backend_->template alloc<X>(static_cast<int64_t>(v.size()));
    std::vector<uint16_t> bits;
    const void* src = v.data();
    if constexpr (!std::is_same_v<X, float>) {
      for (float x : v) bits.push_back(dscore::sdk::float_to_bf16(x));
      src = bits.data();
    }
    const cudaStream_t stream = backend_->context().stream();
    EXPECT_EQ(
        cudaMemcpyAsync(buffer.get(), src, v.size() * sizeof(X), cudaMemcpyHostToDevice, stream),
        cudaSuccess);
    backend_->synchronize();
    return buffer;
  }

  template <typename X>
  std::vector<float> download(const X* p, int64_t n) {
    backend_->synchronize();
    std::vector<float> out(static_cast<size_t>(n));
    const cudaStream_t stream = backend_->context().stream();
    if constexpr (std::is_same_v<X, float>) {
      EXPECT_EQ(cudaMemcpyAsync(out.data(), p, out.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                stream),
                cudaSuccess);
    } else {
      std::vector<uint16_t> bits(out.size());
      EXPECT_EQ(cudaMemcpyAsync(bits.data(), p, bits.size() * 2, cudaMemcpyDeviceToHost, stream),
                cudaSuccess);
      backend_->synchronize();
      for (size_t i = 0; i < bits.size(); ++i) out[i] = dscore::sdk::bf16_to_float(bits[i]);
    }
    backend_->synchronize();
    return out;
  }
  template <typename X>
  std::vector<float> download(const DeviceBuffer<X>& b) {
    return download(b.get(), b.size());
  }

  DeviceBuffer<int32_t> tokens(const std::vector<int32_t>& ids) {
    DeviceBuffer<int32_t> buffer =
        backend_->template alloc<int32_t>(static_cast<int64_t>(ids.size()));
    backend_->copy_tokens(buffer.get(), ids.data(), static_cast<int64_t>(ids.size()));
    return buffer;
  }

  std::unique_ptr<CudaBackend<S>> backend_;
};

using StorageTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(GptCudaKernels, StorageTypes);

TYPED_TEST(GptCudaKernels, EmbeddingForwardAndBackward) {
  const int64_t B = 2, T = 7, C = 40, V = 11;
  std::vector<int32_t> ids = {3, 3, 0, -1, 10, 5, 3, 7, 7, 2, 0, 1, 9, -1};  // repeats and padding
  const auto wte = this->random(V * C, 1.0f, 1), wpe = this->random(T * C, 1.0f, 2);
  const auto dout = this->random(B * T * C, 1.0f, 3), dwte0 = this->random(V * C, 1.0f, 4),
             dwpe0 = this->random(T * C, 1.0f, 5);
  std::vector<float> out(static_cast<size_t>(B * T * C)), dwte = dwte0, dwpe = dwpe0;
  cpu::encoder_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), B, T, C);

  auto tok = this->tokens(ids);
  auto d_wte = this->upload(wte), d_wpe = this->upload(wpe), d_dout = this->upload(dout);
  auto d_dwte = this->upload(dwte0), d_dwpe = this->upload(dwpe0);
  auto d_out = this->backend_->template alloc<TypeParam>(B * T * C);
  this->backend_->encoder_forward(d_out.get(), tok.get(), d_wte.get(), d_wpe.get(), B, T, C);
  this->backend_->encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), tok.get(), B, T, C);
  expect_close(out, this->download(d_out), this->kTol, "out");
  expect_close(dwte, this->download(d_dwte), this->kTol, "dwte");
  expect_close(dwpe, this->download(d_dwpe), this->kTol, "dwpe");
}

TYPED_TEST(GptCudaKernels, LayerNormForwardAndBackward) {
  const int64_t N = 37, C = 80;
  const auto inp = this->random(N * C, 1.0f, 1, 0.5f), w = this->random(C, 0.1f, 2, 1.0f),
             b = this->random(C, 0.1f, 3);
  const auto dout = this->random(N * C, 1.0f, 4), dinp0 = this->random(N * C, 1.0f, 5),
             dw0 = this->random(C, 1.0f, 6), db0 = this->random(C, 1.0f, 7);
  std::vector<float> out(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)),
      rstd(static_cast<size_t>(N));
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                         C);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);

  auto d_inp = this->upload(inp), d_w = this->upload(w), d_b = this->upload(b),
       d_dout = this->upload(dout);
  auto d_dinp = this->upload(dinp0), d_dw = this->upload(dw0), d_db = this->upload(db0);
  auto d_out = this->backend_->template alloc<TypeParam>(N * C);
  auto d_mean = this->backend_->template alloc<float>(N),
       d_rstd = this->backend_->template alloc<float>(N);
  this->backend_->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(),
                                    d_b.get(), N, C);
  this->backend_->layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(),
                                     d_inp.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C);
  expect_close(out, this->download(d_out), this->kTol, "out");
  expect_close(mean, this->download(d_mean), 1e-5, "mean (fp32 statistics)");
  expect_close(rstd, this->download(d_rstd), 1e-5, "rstd (fp32 statistics)");
  expect_close(dinp, this->download(d_dinp), this->kTol, "dinp (accumulated)");
  expect_close(dw, this->download(d_dw), this->kTol, "dweight");
  expect_close(db, this->download(d_db), this->kTol, "dbias");
}

TYPED_TEST(GptCudaKernels, MatmulForwardAndBackward) {
  const int64_t N = 45, C = 72, OC = 56;
  const auto inp = this->random(N * C, 1.0f, 1), w = this->random(OC * C, 0.2f, 2),
             b = this->random(OC, 1.0f, 3);
  const auto dout = this->random(N * OC, 1.0f, 4), dw0 = this->random(OC * C, 1.0f, 5),
             db0 = this->random(OC, 1.0f, 6);
  std::vector<float> out(static_cast<size_t>(N * OC)), out_nobias(out.size()),
      dinp(static_cast<size_t>(N * C));
  std::vector<float> dw = dw0, db = db0;
  cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  cpu::matmul_forward<float>(out_nobias.data(), inp.data(), w.data(), nullptr, N, C, OC);
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);

  auto d_inp = this->upload(inp), d_w = this->upload(w), d_b = this->upload(b),
       d_dout = this->upload(dout);
  auto d_dw = this->upload(dw0), d_db = this->upload(db0);
  auto d_dinp = this->upload(this->random(N * C, 5.0f, 7));  // overwritten
  auto d_out = this->upload(this->random(N * OC, 5.0f, 8)),
       d_out_nobias = this->upload(this->random(N * OC, 5.0f, 9));
  this->backend_->matmul_forward(d_out.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, OC);
  this->backend_->matmul_forward(d_out_nobias.get(), d_inp.get(), d_w.get(), nullptr, N, C, OC);
  this->backend_->matmul_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                                  d_w.get(), N, C, OC);
  expect_close(out, this->download(d_out), this->kTol, "out");
  expect_close(out_nobias, this->download(d_out_nobias), this->kTol, "out without bias");
  expect_close(dinp, this->download(d_dinp), this->kTol, "dinp");
  expect_close(dw, this->download(d_dw), this->kTol, "dweight (accumulated)");
  expect_close(db, this->download(d_db), this->kTol, "dbias (accumulated)");
}

// Unfused, the CUDA backend keeps the probabilities, rebuilt here from the
// CPU's logsumexp; fused (bf16's default, DSCORE_CUDA_ATTENTION), it keeps
// the logsumexp itself as fp32. bf16 runs both.
TYPED_TEST(GptCudaKernels, CausalAttentionForwardAndBackward) {
  const int64_t B = 2, T = 37, C = 48, NH = 4, hs = C / NH;
  const auto qkv = this->random(B * T * 3 * C, 1.0f, 1), dout = this->random(B * T * C, 1.0f, 2);
  std::vector<float> out(static_cast<size_t>(B * T * C)),
      lse(static_cast<size_t>(cpu::attention_state_elements(B, T, NH))),
      dqkv(static_cast<size_t>(B * T * 3 * C));
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                          NH);
  std::vector<float> att(static_cast<size_t>(B * NH * T * T), 0.0f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s <= t; ++s) {
          double score = 0;
          for (int64_t c = 0; c < hs; ++c)
            score += static_cast<double>(qkv[(b * T + t) * 3 * C + h * hs + c]) *
                     qkv[(b * T + s) * 3 * C + C + h * hs + c];
          att[((b * NH + h) * T + t) * T + s] =
              static_cast<float>(std::exp(score * scale - lse[(b * NH + h) * T + t]));
        }

  for (const char* mode : {"unfused", "fused"}) {
    if (this->kFloat && std::string(mode) == "fused") continue;  // fp32 runs unfused only
    SCOPED_TRACE(mode);
    dscore::ScopedEnv attention("DSCORE_CUDA_ATTENTION", std::string(mode));
    this->backend_ = std::make_unique<CudaBackend<TypeParam>>();
    ASSERT_EQ(this->backend_->fused_attention(), std::string(mode) == "fused");
    auto d_qkv = this->upload(qkv), d_dout = this->upload(dout);
    auto d_out = this->backend_->template alloc<TypeParam>(B * T * C);
    auto d_att = this->upload(this->random(this->backend_->attention_state_elements(B, T, NH), 1.0f,
                                           3));  // zeros above the diagonal get written
    auto d_dqkv = this->upload(this->random(B * T * 3 * C, 1.0f, 4));  // overwritten
    this->backend_->attention_forward(d_out.get(), d_att.get(), d_qkv.get(), B, T, C, NH);
    this->backend_->attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                                       d_att.get(), B, T, C, NH);
    expect_close(out, this->download(d_out), this->kTol, "out");
    if (this->backend_->fused_attention())
      expect_close(lse,
                   this->download(reinterpret_cast<const float*>(d_att.get()),
                                  static_cast<int64_t>(lse.size())),
                   1e-2, "logsumexp (B, NH, T)");
    else
      expect_close(att, this->download(d_att), this->kTol, "att (B, NH, T, T)");
    expect_close(dqkv, this->download(d_dqkv), this->kTol, "dqkv");
  }
}

// On every machine: the choice needs no GPU.
TEST(CudaAttentionKernels, TheEnvironmentChooses) {
  using dscore::gpt::gpu::attention_kernels_from_env;
  using dscore::gpt::gpu::AttentionKernels;
  {
    dscore::ScopedEnv unset("DSCORE_CUDA_ATTENTION", std::nullopt);
    EXPECT_EQ(attention_kernels_from_env(), AttentionKernels::kFused);
  }
  {
    dscore::ScopedEnv unfused("DSCORE_CUDA_ATTENTION", std::string("unfused"));
    EXPECT_EQ(attention_kernels_from_env(), AttentionKernels::kUnfused);
  }
  dscore::ScopedEnv wrong("DSCORE_CUDA_ATTENTION", std::string("flash"));
  try {
    attention_kernels_from_env();
    FAIL() << "\"flash\" was taken";
  } catch (const dscore::sdk::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"flash\""), std::string::npos) << what;
    EXPECT_NE(what.find("\"unfused\""), std::string::npos) << what;
  }
}

// n = 1003 from aligned buffers (16-byte loads) and from buffers one
// element in (the scalar path); add also in place.
TYPED_TEST(GptCudaKernels, GeluAndAdd) {
  for (int64_t shift : {0, 1}) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    const int64_t n = 1003;  // not a multiple of 8: a scalar tail after the 16-byte loads
    const auto inp = this->random(n + 1, 3.0f, 1), dout = this->random(n + 1, 1.0f, 2);
    std::vector<float> out(inp.size(), 0.0f), dinp(inp.size(), 0.0f), sum(inp.size(), 0.0f);
    cpu::gelu_forward(out.data() + shift, inp.data() + shift, n);
    cpu::gelu_backward(dinp.data() + shift, inp.data() + shift, dout.data() + shift, n);
    cpu::add(sum.data() + shift, inp.data() + shift, dout.data() + shift, n);
    auto d_inp = this->upload(inp), d_dout = this->upload(dout);
    auto d_out = this->upload(std::vector<float>(inp.size(), 0.0f)),
         d_dinp = this->upload(std::vector<float>(inp.size(), 0.0f));
    auto d_sum = this->upload(std::vector<float>(inp.size(), 0.0f)), d_acc = this->upload(inp);
    this->backend_->gelu_forward(d_out.get() + shift, d_inp.get() + shift, n);
    this->backend_->gelu_backward(d_dinp.get() + shift, d_inp.get() + shift, d_dout.get() + shift,
                                  n);
    this->backend_->add(d_sum.get() + shift, d_inp.get() + shift, d_dout.get() + shift, n);
    this->backend_->add(d_acc.get() + shift, d_acc.get() + shift, d_dout.get() + shift,
                        n);  // in place
    std::vector<float> in_place = sum;
    if (shift == 1)
      in_place[0] = inp[0];
    else
      in_place[n] = inp[static_cast<size_t>(n)];
    expect_close(out, this->download(d_out), this->kTol, "gelu");
    expect_close(dinp, this->download(d_dinp), this->kTol, "gelu backward");
    expect_close(sum, this->download(d_sum), this->kTol, "add");
    expect_close(in_place, this->download(d_acc), this->kTol, "add in place");
  }
}

// The LM head on a small vocabulary, and on GPT-2's with more rows than one
// chunk of logits holds (2^25 logits: 667 rows at V = 50257).
TYPED_TEST(GptCudaKernels, LmHeadForwardBackward) {
  struct Shape {
    int64_t N, C, V;
  };
  for (const Shape& s : {Shape{48, 32, 500}, Shape{700, 32, 50257}}) {
    SCOPED_TRACE("N " + std::to_string(s.N) + " V " + std::to_string(s.V));
    const auto x = this->random(s.N * s.C, 1.0f, 1), wte = this->random(s.V * s.C, 0.5f, 2);
    const auto dwte0 = this->random(s.V * s.C, 0.01f, 3);
    std::vector<int32_t> targets(static_cast<size_t>(s.N));
    std::mt19937 rng(4);
    for (size_t i = 0; i < targets.size(); ++i)
      targets[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(rng() % static_cast<uint32_t>(s.V));
    std::vector<float> dx(static_cast<size_t>(s.N * s.C)), dwte = dwte0;
    const double loss = cpu::lm_head_forward_backward(dx.data(), dwte.data(), x.data(), wte.data(),
                                                      targets.data(), s.N, s.C, s.V, 0.37);

    auto tok = this->tokens(targets);
    auto d_x = this->upload(x), d_wte = this->upload(wte), d_dwte = this->upload(dwte0);
    auto d_dx = this->upload(this->random(s.N * s.C, 1.0f, 5));  // overwritten
    const double got = this->backend_->lm_head_forward_backward(
        d_dx.get(), d_dwte.get(), d_x.get(), d_wte.get(), tok.get(), s.N, s.C, s.V, 0.37);
    EXPECT_NEAR(got, loss, this->kLossTol * loss);
    expect_close(dx, this->download(d_dx), this->kTol, "dx");
    expect_close(dwte, this->download(d_dwte), this->kTol, "dwte (accumulated)");
  }
}

TYPED_TEST(GptCudaKernels, LmHeadForwardLossAndLogits) {
  const int64_t N = 48, C = 32, V = 500;
  const auto x = this->random(N * C, 1.0f, 1), wte = this->random(V * C, 0.5f, 2);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (size_t i = 0; i < targets.size(); ++i)
    targets[i] = i % 5 == 0 ? -1 : static_cast<int32_t>((i * 37) % V);
  const std::vector<int64_t> rows = {0, 17, 47};
  std::vector<float> logits(rows.size() * V), got_logits(logits.size(), -1.0f);
  const double loss =
      cpu::lm_head_forward(x.data(), wte.data(), targets.data(), N, C, V, rows.data(),
                           static_cast<int64_t>(rows.size()), logits.data());

  auto tok = this->tokens(targets);
  auto d_x = this->upload(x), d_wte = this->upload(wte);
  const double got =
      this->backend_->lm_head_forward(d_x.get(), d_wte.get(), tok.get(), N, C, V, rows.data(),
                                      static_cast<int64_t>(rows.size()), got_logits.data());
  EXPECT_NEAR(got, loss, this->kLossTol * loss);
  // The logits are fp32 products of the same (S-rounded) inputs on both sides.
  expect_close(logits, got_logits, 1e-4, "logits");
  EXPECT_EQ(this->backend_->lm_head_forward(d_x.get(), d_wte.get(), nullptr, N, C, V, rows.data(),
                                            0, nullptr),
            0.0);
}

}  // namespace
