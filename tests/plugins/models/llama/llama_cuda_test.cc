// The llama model on its CUDA backend against the CPU backend: the runner
// over each, on the same fp32 parameters (FakeLayers), gives the same loss
// and gradients on tiny configs (grouped-query attention; tied and untied;
// Llama 3 rope scaling; activation checkpointing), and the same logits.
// Tolerance (fp32 on both sides; cuBLAS sums in another order): loss within
// 1e-5 relative, each gradient tensor and the logits within 1e-4 of their
// largest element. The bf16 backend (the fused attention by default, and
// unfused) against the same fp32 CPU run, at the initialisation's own scale:
// loss within 1e-2 relative, each gradient's ||diff|| within 3e-2 ||grad||
// and max|diff| within 5e-2 max|grad| (seen on the CUDA emulation: 0.5-1.2%
// both ways; a wrong kernel is off by order 1). At the fp32 tests' 4x
// parameters the bf16 model is ill-conditioned: both attentions land 5-16%
// from fp32, each on its own side (the fused one farther with grouped
// heads, nearer without). Label `gpu`: skipped where no CUDA device is visible;
// there, make_cuda_compute's error is checked instead.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "compute.h"
#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "llama_params.h"
#include "runner.h"
#include "tests/fakes/scoped_env.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "transformer_common/cpu/gemm.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the CPU backend allocates with the C allocator

namespace dscore::llama {
namespace {

using transformer::testing::FakeLayers;

bool have_gpu() {
  int count = 0;
  const bool yes = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return yes;
}

LlamaConfig config_of(bool tied, bool llama3, int64_t checkpoint_blocks) {
  LlamaConfig c;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 16;
  c.block_size = 12;
  c.tie_word_embeddings = tied;
  c.rope_scaling.llama3 = llama3;
  c.rope_scaling.original_max_position_embeddings = 8;
  c.checkpoint_blocks = checkpoint_blocks;
  return c;
}

transformer::SplitTokens batch_of(const LlamaConfig& c) {
  std::vector<int32_t> tokens;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i <= c.block_size; ++i)
      tokens.push_back(static_cast<int32_t>((7 * b + 5 * i * i + 3) % c.vocab_size));
  tokens.back() = -1;  // one padding position
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = tokens.data();
  t.dtype = DSCORE_DTYPE_I32;
  t.device_type = DSCORE_DEVICE_CPU;
  t.numel = static_cast<int64_t>(tokens.size());
  const dscore_tensor* tensors[] = {&t};
  dscore_batch batch{sizeof(dscore_batch), 3, 1, tensors};
  return transformer::split_tokens(&batch, c.block_size, c.vocab_size, "llama");
}

// The model's initial parameters times `scale` (4: logits and attention
// far from uniform), plus a small ripple.
void init(const LlamaConfig& c, const LlamaParams& params, FakeLayers* layers, float scale = 4.0f) {
  size_t index = 0;
  for (size_t l = 0; l < layers->layer_count(); ++l)
    for (size_t i = 0; i < layers->param_count(l); ++i, ++index) {
      float* p = layers->param<float>(l, i);
      params.init(index, 0, layers->numel(l, i), p);
      for (int64_t k = 0; k < layers->numel(l, i); ++k)
        p[k] = p[k] * scale + 0.01f * std::sin(static_cast<float>(k + index));
    }
  (void)c;
}

void expect_close(const float* want, const float* got, int64_t n, const std::string& what) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(worst, 1e-4 * scale) << what << ": max |cuda - cpu| " << worst << " of " << scale;
}

// bf16 against fp32: ||got - want|| <= 3e-2 ||want||, max <= 5e-2 max|want|.
void expect_bf16_close(const float* want, const float* got, int64_t n, const std::string& what) {
  double norm = 0, diff_norm = 0, scale = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    norm += static_cast<double>(want[i]) * want[i];
    diff_norm += d * d;
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(d));
  }
  EXPECT_LE(std::sqrt(diff_norm), 3e-2 * std::sqrt(norm)) << what;
  EXPECT_LE(worst, 5e-2 * scale) << what << ": max |cuda - cpu| " << worst << " of " << scale;
}

class LlamaCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount): run on the GPU machine";
    transformer::cpu::load_gemm_library();
  }
};

// The runner over the CPU backend (fp32) and over the CUDA backend of S, on
// the same fp32 parameters (the initialisation times `scale`).
template <typename S>
struct BothBackends {
  BothBackends(const LlamaConfig& config, float scale)
      : c(config),
        params(c, 3),
        on_cpu(params.description(), DSCORE_DTYPE_F32),
        on_gpu(params.description(), DSCORE_DTYPE_F32),
        cpu_runner(c, params, cpu_backend),
        gpu_runner(c, params, gpu_backend) {
    init(c, params, &on_cpu, scale);
    init(c, params, &on_gpu, scale);
  }
  // Each runner's loss of one training call; each gradient checked by `check`.
  template <typename Check>
  std::pair<double, double> train(Check check) {
    const auto batch = batch_of(c);
    const double want = cpu_runner.forward_backward(batch, on_cpu.hooks(), 1.0);
    const double got = gpu_runner.forward_backward(batch, on_gpu.hooks(), 1.0);
    for (size_t l = 0; l < on_cpu.layer_count(); ++l)
      for (size_t i = 0; i < on_cpu.param_count(l); ++i)
        check(on_cpu.grad<float>(l, i), on_gpu.grad<float>(l, i), on_cpu.numel(l, i),
              params.description().layers[l]->params[i]->name);
    return {want, got};
  }

  LlamaConfig c;
  LlamaParams params;
  FakeLayers on_cpu, on_gpu;
  cpu::CpuBackend<float> cpu_backend;
  gpu::CudaBackend<S> gpu_backend;
  LlamaRunner<cpu::CpuBackend<float>> cpu_runner;
  LlamaRunner<gpu::CudaBackend<S>> gpu_runner;
};

TEST_F(LlamaCuda, LossGradientsAndLogitsMatchTheCpuBackend) {
  for (bool tied : {false, true})
    for (bool llama3 : {false, true})
      for (int64_t checkpoint_blocks : {0, 1}) {
        SCOPED_TRACE(std::string(tied ? "tied" : "untied") + (llama3 ? " llama3" : "") +
                     " checkpoint_blocks " + std::to_string(checkpoint_blocks));
        BothBackends<float> run(config_of(tied, llama3, checkpoint_blocks), 4.0f);
        const auto [want, got] = run.train(expect_close);
        EXPECT_NEAR(got, want, 1e-5 * want);
        const int64_t vocab = run.c.vocab_size;
        std::vector<float> logits_cpu(static_cast<size_t>(3 * vocab)),
            logits_gpu(logits_cpu.size());
        const auto batch = batch_of(run.c);
        run.cpu_runner.forward(batch, run.on_cpu.hooks(), nullptr, logits_cpu.data());
        run.gpu_runner.forward(batch, run.on_gpu.hooks(), nullptr, logits_gpu.data());
        expect_close(logits_cpu.data(), logits_gpu.data(), 3 * vocab, "logits");
      }
}

TEST_F(LlamaCuda, Bf16MatchesTheCpuBackendWithinBf16Error) {
  for (const char* attention : {"fused", "unfused"}) {
    SCOPED_TRACE(attention);
    ScopedEnv kernels("DSCORE_CUDA_ATTENTION", std::string(attention));
    BothBackends<__nv_bfloat16> run(config_of(false, false, 0), 1.0f);
    ASSERT_EQ(run.gpu_backend.fused_attention(), std::string(attention) == "fused");
    const auto [want, got] = run.train(expect_bf16_close);
    EXPECT_NEAR(got, want, 1e-2 * want);
  }
}

TEST(LlamaCudaDevice, WithoutADeviceCudaIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is visible";
  const LlamaConfig c = config_of(false, false, 0);
  LlamaParams params(c, 3);
  try {
    make_cuda_compute(c, params);
    FAIL() << "make_cuda_compute succeeded without a device";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dscore::llama
