// The whole GPT model (the runner over the CPU backend) in double
// precision on a tiny config: every parameter's gradient against central
// finite differences of the loss, the hook protocol (order, one
// grads_ready per layer, everything released, also on error), activation
// checkpointing (the same gradients, bit for bit), and padding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "gpt_params.h"
#include "runner.h"
#include "tests/plugins/models/gpt/tiny_gpt.h"
#include "tests/plugins/models/transformer_common/fake_layers.h"
#include "tests/plugins/models/transformer_common/model_checks.h"
#include "transformer_common/cpu/gemm.h"
#include "transformer_common/cpu/gemm_bf16.h"

DSCORE_PLUGIN_HOST_STORAGE;  // no host attached: the backend allocates with the C allocator

namespace dscore::gpt {
namespace {

using transformer::testing::expect_same_grads;
using transformer::testing::expect_scaled_grads;
using transformer::testing::FakeLayers;
using Runner = GptRunner<cpu::CpuBackend<double>>;

class GptModel : public ::testing::Test {
 protected:
  void SetUp() override { transformer::cpu::load_gemm_library(); }
};

TEST_F(GptModel, EveryParameterGradientMatchesFiniteDifferences) {
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  const SplitTokens batch = tiny_batch(c);
  ASSERT_EQ(batch.counted_targets, 5 + 3);

  const double loss = runner.forward_backward(batch, layers.hooks(), 1.0);
  EXPECT_GT(loss, 0.0);
  auto loss_at = [&] {
    double l = 0;
    runner.forward(batch, layers.hooks(), &l, nullptr);
    return l;
  };
  EXPECT_NEAR(loss_at(), loss, 1e-12);
  EXPECT_GT(transformer::testing::expect_finite_differences(
                layers, params.description(), transformer::testing::grads_of(layers), loss_at),
            150);
}

TEST_F(GptModel, HooksAreCalledInOrderAndEveryAcquireIsReleased) {
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
  const std::vector<std::string> expected = {
      "F0", "R0", "F1", "R1", "F2", "R2", "F3", "R3",        // embeddings, blocks, ln_f
      "B0", "R0",                                            // LM head (wte gradient, part 1)
      "B3", "G3", "R3", "B2", "G2", "R2", "B1", "G1", "R1",  // ln_f, blocks in reverse
      "B0", "G0", "R0"};                                     // embeddings: grads_ready once
  EXPECT_EQ(layers.events, expected);
  EXPECT_EQ(layers.outstanding(), 0);
  for (size_t l = 0; l < layers.layer_count(); ++l) EXPECT_EQ(layers.grads_ready_calls(l), 1) << l;
}

TEST_F(GptModel, ActivationCheckpointingGivesTheSameGradientsBitForBit) {
  expect_checkpointing_bit_for_bit(tiny_config(), {1, 2});
}

TEST_F(GptModel, LossScaleScalesTheGradientsOnly) {
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers one(params.description(), DSCORE_DTYPE_F64),
      scaled(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &one);
  init_layers(c, &scaled);
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  const double l1 = runner.forward_backward(tiny_batch(c), one.hooks(), 1.0);
  const double l2 = runner.forward_backward(tiny_batch(c), scaled.hooks(), 1024.0);
  EXPECT_EQ(l1, l2);
  expect_scaled_grads(scaled, one, 1024.0);
}

TEST_F(GptModel, AFailingAcquireReleasesWhatWasAcquired) {
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  dscore_model_hooks failing = layers.hooks();
  static int calls = 0;
  calls = 0;
  struct Ctx {
    const dscore_model_hooks* inner;
  } ctx{&layers.hooks()};
  failing.ctx = &ctx;
  failing.acquire = [](void* x, size_t l, dscore_acquire_mode m,
                       dscore_layer_views* out) -> dscore_status {
    auto* c2 = static_cast<Ctx*>(x);
    if (++calls == 6) return DSCORE_UNAVAILABLE;  // the 6th acquire (backward of ln_f) fails
    return c2->inner->acquire(c2->inner->ctx, l, m, out);
  };
  failing.release = [](void* x, size_t l) -> dscore_status {
    auto* c2 = static_cast<Ctx*>(x);
    return c2->inner->release(c2->inner->ctx, l);
  };
  failing.grads_ready = [](void* x, size_t l) -> dscore_status {
    auto* c2 = static_cast<Ctx*>(x);
    return c2->inner->grads_ready(c2->inner->ctx, l);
  };
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  EXPECT_THROW(runner.forward_backward(tiny_batch(c), failing, 1.0), sdk::Reported);
  EXPECT_EQ(layers.outstanding(), 0);
}

TEST_F(GptModel, PaddingAfterAPromptDoesNotChangeItsLogits) {
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
  init_layers(c, &layers);
  cpu::CpuBackend<double> backend;
  Runner runner(c, params, backend);
  auto logits_of = [&](std::vector<int32_t> tokens) {
    dscore_tensor t{};
    t.struct_size = sizeof t;
    t.data = tokens.data();
    t.dtype = DSCORE_DTYPE_I32;
    t.device_type = DSCORE_DEVICE_CPU;
    t.numel = static_cast<int64_t>(tokens.size());
    const dscore_tensor* tensors[] = {&t};
    dscore_batch batch{sizeof(dscore_batch), 1, 1, tensors};
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    runner.forward(split_tokens(&batch, c), layers.hooks(), nullptr, logits.data());
    return logits;
  };
  // The prompt "4 2" padded two ways: the logits after "2" are the same.
  EXPECT_EQ(logits_of({4, 2, -1, -1, -1, -1}), logits_of({4, 2, -1, -1, -1, 9}));
  EXPECT_NE(logits_of({4, 2, -1, -1, -1, -1}), logits_of({4, 3, -1, -1, -1, -1}));
}

}  // namespace
}  // namespace dscore::gpt

namespace dscore::gpt {
namespace {

// bf16 parameter and gradient views (a bf16 engine). Without the bf16 GEMM
// (gemm_bf16.h: the build, the CPU, or DSCORE_CPU_ISA=avx2) parameters
// converted on use give exactly the fp32 computation on the same
// (bf16-representable) values, and gradients land in bf16, so they agree to
// bf16 rounding (2^-8). With it the linear layers round their activation
// and gradient operands to bf16 too, and attention its operands and its
// probabilities (attention_bf16.h): the loss differs (so the bf16 GEMM did
// run) but within bf16 rounding, and gradients agree to some roundings
// (relative L2 error per tensor at most 0.031 with fp32 attention, 0.069
// with bf16 attention, on these 5x-scaled weights).
TEST_F(GptModel, Bf16ViewsComputeLikeFp32OnTheSameValues) {
  const bool bf16_gemm = transformer::cpu::bf16_gemm_available();
  SCOPED_TRACE(bf16_gemm
                   ? "bf16 GEMM"
                   : std::string("fp32 GEMM: ") + transformer::cpu::bf16_gemm_unavailable_reason());
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers f32(params.description(), DSCORE_DTYPE_F32),
      b16(params.description(), DSCORE_DTYPE_BF16);
  transformer::testing::fill_same_bf16_values(params, &f32, &b16);
  cpu::CpuBackend<float> backend;
  GptRunner<cpu::CpuBackend<float>> runner(c, params, backend);
  const double loss32 = runner.forward_backward(tiny_batch(c), f32.hooks(), 1.0);
  const double loss16 = runner.forward_backward(tiny_batch(c), b16.hooks(), 1.0);
  if (bf16_gemm) {
    EXPECT_NE(loss16, loss32);
    EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  } else {
    EXPECT_EQ(loss16, loss32);
  }
  for (size_t l = 0; l < f32.layer_count(); ++l)
    for (size_t i = 0; i < f32.param_count(l); ++i) {
      double max_abs = 0, norm = 0, error = 0;
      for (int64_t e = 0; e < f32.numel(l, i); ++e) {
        const double want = f32.grad<float>(l, i)[e];
        const double got = sdk::bf16_to_float(b16.grad<uint16_t>(l, i)[e]);
        max_abs = std::max(max_abs, std::abs(want));
        norm += want * want;
        error += (got - want) * (got - want);
        if (!bf16_gemm) {
          EXPECT_NEAR(got, want, max_abs / 128 + 1e-12) << l << "." << i << "[" << e << "]";
        }
      }
      // Rounded operands through several layers: a relative error of some
      // bf16 roundings over the whole gradient (elements near zero move
      // more, relative to themselves).
      if (bf16_gemm) {
        EXPECT_LE(std::sqrt(error), std::sqrt(norm) / 8 + 1e-12) << l << "." << i;
      }
    }
}

using CountedCpuBackend = transformer::testing::CountedBackend<cpu::CpuBackend<double>>;

TEST_F(GptModel, DeclaredActivationBytesAreWhatAPassAllocates) {
  // What the model declares (model.h activation_bytes) comes from the
  // runner's own allocation code: a real pass allocates exactly that, with
  // and without checkpointing, and nothing more on a second pass.
  GptConfig c = tiny_config();
  GptParams params(c, 7);
  uint64_t previous = 0;
  for (int64_t checkpoint_blocks : {0, 1, 2}) {
    c.checkpoint_blocks = checkpoint_blocks;
    FakeLayers layers(params.description(), DSCORE_DTYPE_F64);
    init_layers(c, &layers);
    CountedCpuBackend backend;
    GptRunner<CountedCpuBackend> runner(c, params, backend);
    runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
    runner.forward_backward(tiny_batch(c), layers.hooks(), 1.0);
    const uint64_t declared = runner_activation_bytes<double, double>(c, params, 2, false);
    EXPECT_EQ(backend.bytes, declared) << "checkpoint_blocks " << checkpoint_blocks;
    // Checkpointed blocks share one set of block activations: 2 layers with
    // 1 checkpointed keep as many as with none; with both, one set fewer.
    if (checkpoint_blocks == 1) {
      EXPECT_EQ(declared, previous);
    } else if (checkpoint_blocks == 2) {
      EXPECT_LT(declared, previous);
    }
    previous = declared;
  }
}

// In bf16 layers on the bf16 GEMM the buffers that only hold operands
// (ln1, ln2, fch_gelu, dfch, and qkv with attention's rounded heads) hold
// bf16, and dfch_gelu is not made (GELU's backward takes the projection's
// input gradient in chunks): a pass allocates what
// runner_activation_bytes declares for that form, less than for fp32. A
// pass over fp32 views after it makes the activations again in fp32 form
// (the tokens' buffers stay).
TEST_F(GptModel, Bf16OperandBuffersAreHalfTheSizeAndDeclared) {
  if (!transformer::cpu::bf16_gemm_available())
    GTEST_SKIP() << "no bf16 GEMM here: " << transformer::cpu::bf16_gemm_unavailable_reason();
  const GptConfig c = tiny_config();
  GptParams params(c, 7);
  FakeLayers f32(params.description(), DSCORE_DTYPE_F32),
      b16(params.description(), DSCORE_DTYPE_BF16);
  transformer::testing::fill_same_bf16_values(params, &f32, &b16);
  using Counted = transformer::testing::CountedBackend<cpu::CpuBackend<float>>;
  Counted backend;
  GptRunner<Counted> runner(c, params, backend);
  runner.forward_backward(tiny_batch(c), b16.hooks(), 1.0);
  const uint64_t bf16_form = runner_activation_bytes<float, float>(c, params, 2, true);
  const uint64_t fp32_form = runner_activation_bytes<float, float>(c, params, 2, false);
  EXPECT_EQ(backend.bytes, bf16_form);
  const int64_t N = 2 * c.block_size, C = c.n_embd;
  // Half of ln1, qkv, ln2 and fch_gelu in each of the 2 blocks, and of
  // dfch; all of dfch_gelu.
  EXPECT_EQ(fp32_form - bf16_form,
            (2 * (N * C + N * 3 * C + N * C + N * 4 * C) / 2 + N * 4 * C / 2 + N * 4 * C) * 4);
  runner.forward_backward(tiny_batch(c), f32.hooks(), 1.0);
  const uint64_t tokens = 2 * N * sizeof(int32_t);
  EXPECT_EQ(backend.bytes, bf16_form + fp32_form - tokens);
}

}  // namespace
}  // namespace dscore::gpt
