// Tests of plugins/optimizers/onebitadam through the C ABI, with W = 2 and 4
// "ranks" as threads of this process, each with its own plugin instance and
// a communicator over a shared in-memory exchange (thread_exchange.h):
// the warm-up equals Adam without bias correction (double reference);
// compression moves ~1/32 of the fp32 bytes; the compressed allreduce equals
// a straightforward dense reference of docs/deepspeed-reference.md#onebitadam bit for bit, error
// feedback included; training a quadratic converges with every rank in
// lockstep; errors are dropped on checkpoint load; bad params are refused.
// (The multi-process test over the real comm backends lives with the engine.)
#include <functional>
#include <thread>

#include "tests/plugins/optimizers/onebitadam/onebit_reference.h"
#include "tests/plugins/optimizers/onebitadam/thread_exchange.h"
#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

TestPluginLibrary* g_lib = nullptr;

const dscore_optimizer_vtable* vt() {
  return g_lib->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "OneBitAdam");
}
CreateArgs defaults() {
  return CreateArgs::with_defaults(g_lib->find(DSCORE_KIND_OPTIMIZER, "onebitadam"));
}
// `context`: the host context of the instance (default: this thread's).
dscore_optimizer* create(int64_t freeze_step, double weight_decay = 0, int world = 1,
                         dscore_host_context* context = nullptr) {
  CreateArgs a = defaults();
  a.integer("freeze_step", freeze_step)
      .number("weight_decay", weight_decay)
      .rank(0, world)
      .context(context);
  dscore_optimizer* opt = nullptr;
  EXPECT_EQ(vt()->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
  return opt;
}

class OneBitAdamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_lib = new TestPluginLibrary(DSCORE_ONEBITADAM_PLUGIN); }
  static void TearDownTestSuite() {
    delete g_lib;
    g_lib = nullptr;
  }
  void SetUp() override {
    FakeHost::instance().clear_error();
    FakeHost::instance().clear_logs();
  }
};

// One tensor's views over caller-owned vectors, for hand-driven steps.
struct Views {
  int64_t shape[1];
  dscore_tensor p{}, g{}, m{}, v{};
  dscore_tensor* params[1] = {&p};
  const dscore_tensor* grads[1] = {&g};
  dscore_tensor* states[2] = {&m, &v};
  Views(std::vector<float>& pv, std::vector<float>& gv, std::vector<float>& mv,
        std::vector<float>& vv)
      : shape{static_cast<int64_t>(pv.size())} {
    p = dscore_tensor{sizeof(dscore_tensor),
                      pv.data(),
                      DSCORE_DTYPE_F32,
                      DSCORE_DEVICE_CPU,
                      0,
                      1,
                      shape,
                      nullptr,
                      shape[0],
                      "w"};
    g = m = v = p;
    g.data = gv.data(), m.data = mv.data(), v.data = vv.data();
  }
  dscore_status step(dscore_optimizer* opt, const dscore_optimizer_hparams& h) {
    dscore_optimizer_step_args a{sizeof a, &h, 1, params, grads, 2, states, nullptr, nullptr};
    return vt()->step(opt, &a);
  }
};

// Runs body(rank) on one thread per rank, each seeing its own communicator.
void run_ranks(ThreadExchange& exchange, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < exchange.world_size(); ++r)
    threads.emplace_back([&, r] {
      FakeHost::set_thread_communicator(exchange.communicator(r));
      body(r);
      FakeHost::set_thread_communicator(nullptr);
    });
  for (std::thread& t : threads) t.join();
}

// Adam without bias correction (docs/deepspeed-reference.md#onebitadam warm-up), in double.
RefStep warmup_reference(double weight_decay) {
  return [weight_decay](RefTensor& t, const std::vector<double>& grad,
                        const dscore_optimizer_hparams& h) {
    // As the kernel gets them: DeepSpeed passes 1 - beta from Python (double), then fp32.
    const double b1 = f32(0.9), b2 = f32(0.999), eps = f32(1e-8);
    const double c1 = f32(1 - 0.9), c2 = f32(1 - 0.999);
    for (size_t i = 0; i < t.p.size(); ++i) {
      const double g = grad[i] * h.grad_scale;
      double& m = t.state[0][i];
      double& v = t.state[1][i];
      m = b1 * m + c1 * g;
      v = b2 * v + c2 * g * g;
      double update = m / (std::sqrt(v) + eps);
      if (weight_decay > 0) update += weight_decay * t.p[i];
      t.p[i] -= h.lr * update;
    }
  };
}

// Single step in fp32: p - lr m / (sqrt(v) + eps) may cancel, so p is within
// a few ulps of its terms, relative to max(|p|, 1); m relative to
// max(|m|, 1) (mixed signs); v relative (positive terms).
const Tolerance kWarmupTol{1e-6, 1.0, {1e-6, 1e-6}, {1.0, 1e-12}};

TEST_F(OneBitAdamTest, WarmupIsAdamWithoutBiasCorrection) {
  for (double wd : {0.0, 0.01})
    for (dscore_dtype g : grad_dtypes()) {
      dscore_optimizer* opt = create(/*freeze_step=*/100, wd);
      OptimizerHarness run(vt(), opt);
      run.setup(kAwkwardSizes, g, DSCORE_DTYPE_INVALID, 51,
                [](size_t slot) { return slot == 0 ? 0.05 : 0.01; });
      for (int64_t step = 1; step <= 3; ++step)
        run.step(hparams(1e-3, step, 0.5), warmup_reference(wd), kWarmupTol);
      vt()->destroy(opt);
    }
}

TEST_F(OneBitAdamTest, WarmupWantsReducedGradientsAndSendsNothing) {
  dscore_optimizer* opt = create(5);
  for (int64_t step = 1; step < 5; ++step) EXPECT_EQ(vt()->wants_reduced_gradients(opt, step), 1);
  for (int64_t step : {5, 6, 1000}) EXPECT_EQ(vt()->wants_reduced_gradients(opt, step), 0);
  vt()->destroy(opt);
  ThreadExchange exchange(2);
  run_ranks(exchange, [&](int) {
    dscore_optimizer* o = create(5, 0.0, 2);
    OptimizerHarness run(vt(), o);
    run.setup({4097}, DSCORE_DTYPE_F32, DSCORE_DTYPE_INVALID, 3);
    for (int64_t step = 1; step < 5; ++step)
      run.step(hparams(1e-3, step), warmup_reference(0.0), kWarmupTol);
    vt()->destroy(o);
  });
  EXPECT_EQ(exchange.total_bytes_sent(0) + exchange.total_bytes_sent(1), 0);
}

// W ranks, one tensor of `n` elements each; compressed from update 1. Each
// rank's m, v and gradient differ. After every step, each rank's exp_avg
// must equal the dense reference bitwise, and be identical on all ranks.
void check_compressed_steps(int world, int64_t n, int steps, bool reload_between = false) {
  SCOPED_TRACE("W=" + std::to_string(world) + " n=" + std::to_string(n));
  ThreadExchange exchange(world);
  std::vector<std::vector<float>> m(world), v(world), p(world), g(world);
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) {
      p[r].push_back(normal(rng));
      m[r].push_back(0.1f * normal(rng));
      v[r].push_back(0.01f + 0.01f * std::abs(normal(rng)));
    }
  std::vector<dscore_optimizer*> opts(world);
  // Created here, stepped on each rank's thread: each with its rank's communicator.
  for (int r = 0; r < world; ++r)
    opts[r] = create(1, 0.0, world, FakeHost::new_context(exchange.communicator(r)));
  ReferenceCompression reference(world, n);
  for (int s = 1; s <= steps; ++s) {
    for (int r = 0; r < world; ++r) {
      g[r].clear();
      for (int64_t i = 0; i < n; ++i) g[r].push_back(normal(rng) * (i % 5 == 0 ? 1e-3f : 1.0f));
    }
    // The reference: each worker's local momentum exactly as the plugin
    // forms it in fp32, then the dense compressed average.
    std::vector<std::vector<float>> local(world);
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i)
        local[r].push_back(0.9f * m[r][i] + static_cast<float>(1 - 0.9) * g[r][i]);
    const std::vector<float> expected = reference.allreduce(local);
    std::vector<std::vector<float>> p_before = p;
    exchange.reset_counters();
    run_ranks(exchange, [&](int r) {
      Views views(p[r], g[r], m[r], v[r]);
      EXPECT_EQ(views.step(opts[r], hparams(1e-3, s)), DSCORE_OK)
          << FakeHost::instance().last_error();
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(std::memcmp(m[r].data(), expected.data(), n * sizeof(float)), 0)
          << "rank " << r << " step " << s << ": exp_avg differs from the dense reference";
      // The update uses the compressed m and the frozen v.
      for (int64_t i = 0; i < n; ++i) {
        const float update = expected[i] / (std::sqrt(v[r][i]) + 1e-8f);
        ASSERT_EQ(p[r][i], p_before[r][i] - 1e-3f * update) << "rank " << r << " element " << i;
      }
    }
    // Volume: the all_to_all of signs, the allgather of server signs and two
    // fp32 scales; ~1/32 of an fp32 allreduce of the same tensor.
    const int64_t padded = reference.padded();
    const auto sent = exchange.bytes_sent(0);
    EXPECT_EQ(sent.at("all_to_all"), padded / 8);
    EXPECT_EQ(sent.at("allgather"), padded / 8 / world + 2 * 4);
    const double ratio = static_cast<double>(exchange.total_bytes_sent(0)) / (4.0 * n);
    if (n >= (1 << 20)) {
      EXPECT_GE(ratio, 1.0 / 32);
      EXPECT_LE(ratio, (1.0 + 1.0 / world) / 32 * 1.001) << "compressed bytes / fp32 bytes";
    }
    if (reload_between) {  // a checkpoint load drops both error buffers
      for (int r = 0; r < world; ++r) {
        std::string bytes;
        ASSERT_EQ(vt()->save_extra_state(
                      opts[r],
                      [](void* ctx, const void* d, size_t size) -> dscore_status {
                        static_cast<std::string*>(ctx)->append(static_cast<const char*>(d), size);
                        return DSCORE_OK;
                      },
                      &bytes),
                  DSCORE_OK);
        ASSERT_EQ(vt()->load_extra_state(opts[r], bytes.data(), bytes.size()), DSCORE_OK);
      }
      reference.reset_errors();
    }
  }
  for (dscore_optimizer* o : opts) vt()->destroy(o);
}

TEST_F(OneBitAdamTest, CompressedAllreduceEqualsTheDenseReferenceWithErrorFeedback) {
  for (int world : {2, 4})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{(1 << 20) + 3}})
      check_compressed_steps(world, n, 3);
}

TEST_F(OneBitAdamTest, CheckpointLoadDropsTheErrorFeedback) {
  check_compressed_steps(2, 4097, 3, /*reload_between=*/true);
}

TEST_F(OneBitAdamTest, QuadraticConvergesWithRanksInLockstep) {
  for (int world : {2, 4}) {
    SCOPED_TRACE("W=" + std::to_string(world));
    const int64_t n = 1000, freeze_step = 20, steps = 300;
    std::vector<float> a(n), c(n);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) a[i] = uniform(rng), c[i] = normal(rng);
    auto loss = [&](const std::vector<float>& p) {
      double f = 0;
      for (int64_t i = 0; i < n; ++i) f += 0.5 * a[i] * (p[i] - c[i]) * (p[i] - c[i]);
      return f;
    };
    // Every coordinate starts 2-4 away from its optimum, so the warm-up sees
    // its gradient scale: 1-bit Adam freezes the variance after warm-up,
    // and a coordinate whose frozen variance is ~0 would take huge steps
    // (an assumption of the method, not of this implementation).
    std::vector<float> start(n);
    for (int64_t i = 0; i < n; ++i) {
      const float z = normal(rng);
      start[i] = c[i] + (z > 0 ? 1.0f : -1.0f) * (3.0f + 0.5f * z);
    }
    std::vector<std::vector<float>> final_p(world);
    ThreadExchange exchange(world);
    run_ranks(exchange, [&](int r) {
      dscore_optimizer* opt = create(freeze_step, 0.0, world);
      std::vector<float> p = start, g(n), m(n, 0.0f), v(n, 0.0f);
      std::mt19937 noise_rng(100 + r);
      std::normal_distribution<float> noise(0.0f, 0.1f);
      const dscore_communicator* comm = exchange.communicator(r);
      Views views(p, g, m, v);
      for (int64_t step = 1; step <= steps; ++step) {
        for (int64_t i = 0; i < n; ++i) g[i] = a[i] * (p[i] - c[i]) + noise(noise_rng);
        // The host's part: average the gradients while the optimizer asks.
        if (vt()->wants_reduced_gradients(opt, step)) {
          ASSERT_EQ(
              comm->vtable->allreduce(comm->comm, &views.g, &views.g, DSCORE_REDUCE_AVG, nullptr),
              DSCORE_OK);
        }
        ASSERT_EQ(views.step(opt, hparams(0.02, step)), DSCORE_OK)
            << FakeHost::instance().last_error();
      }
      final_p[r] = p;
      vt()->destroy(opt);
    });
    const double initial = loss(start), final_loss = loss(final_p[0]);
    EXPECT_LT(final_loss, 1e-2 * initial) << "initial " << initial << " final " << final_loss;
    for (int r = 1; r < world; ++r)
      EXPECT_EQ(std::memcmp(final_p[r].data(), final_p[0].data(), n * sizeof(float)), 0)
          << "rank " << r << " drifted from rank 0";
  }
}

TEST_F(OneBitAdamTest, SingleRankCompressedPhaseFreezesTheVariance) {
  dscore_optimizer* opt = create(1);  // no communicator, world 1: m stays local
  OptimizerHarness run(vt(), opt);
  run.setup({7, 4097}, DSCORE_DTYPE_BF16, DSCORE_DTYPE_BF16, 9,
            [](size_t slot) { return slot == 0 ? 0.05 : 0.01; });
  run.step(
      hparams(1e-3, 1),
      [](RefTensor& t, const std::vector<double>& grad, const dscore_optimizer_hparams& h) {
        for (size_t i = 0; i < t.p.size(); ++i) {
          double& m = t.state[0][i];
          m = 0.9 * m + 0.1 * grad[i] * h.grad_scale;  // v untouched
          t.p[i] -= h.lr * m / (std::sqrt(t.state[1][i]) + 1e-8);
        }
      },
      kWarmupTol);
  vt()->destroy(opt);
}

TEST_F(OneBitAdamTest, RefusesBadParamsAndAMissingCommunicator) {
  auto error = [](CreateArgs a) {
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt()->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  };
  EXPECT_NE(error(defaults().boolean("amsgrad", true)).find("amsgrad is not supported"),
            std::string::npos);
  EXPECT_NE(error(defaults().integer("freeze_step", 0)).find("freeze_step = 0 must be >= 1"),
            std::string::npos);
  EXPECT_NE(error(defaults().numbers("betas", {0.9, 1.5})).find("betas[1] = 1.5"),
            std::string::npos);
  EXPECT_NE(error(defaults().number("lr", -1)).find("lr = -1 must be >= 0"), std::string::npos);
  dscore_optimizer* opt = create(1, 0.0, /*world=*/2);  // a 2-rank job, but no communicator
  std::vector<float> p(8), g(8), m(8), v(8, 1.0f);
  Views views(p, g, m, v);
  EXPECT_EQ(views.step(opt, hparams(1e-3, 1)), DSCORE_FAILED_PRECONDITION);
  EXPECT_NE(FakeHost::instance().last_error().find("needs the job's communicator"),
            std::string::npos);
  EXPECT_EQ(vt()->load_extra_state(opt, "garbage", 7), DSCORE_DATA_LOSS);
  vt()->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
