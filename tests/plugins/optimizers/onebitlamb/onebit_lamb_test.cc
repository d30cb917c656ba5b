// Tests of plugins/optimizers/onebitlamb through the C ABI: on one rank the
// parameters and momenta of 12 updates equal DeepSpeed's own OnebitLamb
// (numbers below), warm-up and compressed phase; the phases follow
// freeze_step as DeepSpeed's; with 2 ranks as threads (thread_exchange.h)
// the compressed phase averages the scaled momenta of all tensors of a
// step() call as one buffer, equal to the dense reference bit for bit, and
// the ranks stay identical; a checkpoint (slots + extra state) resumes
// exactly; bad params and extra state are refused.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "tests/plugins/optimizers/onebit_steps.h"
#include "tests/plugins/optimizers/onebitadam/onebit_reference.h"
#include "tests/plugins/optimizers/onebitadam/thread_exchange.h"
#include "tests/plugins/optimizers/optimizer_harness.h"

namespace dscore::testing {
namespace {

TestPluginLibrary* g_lib = nullptr;

const dscore_optimizer_vtable* vt() {
  return g_lib->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "OneBitLamb");
}
CreateArgs defaults() {
  return CreateArgs::with_defaults(g_lib->find(DSCORE_KIND_OPTIMIZER, "onebitlamb"));
}
dscore_optimizer* create(CreateArgs a) {
  dscore_optimizer* opt = nullptr;
  EXPECT_EQ(vt()->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
  return opt;
}

class OneBitLambTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_lib = new TestPluginLibrary(DSCORE_ONEBITLAMB_PLUGIN); }
  static void TearDownTestSuite() {
    delete g_lib;
    g_lib = nullptr;
  }
  void SetUp() override { FakeHost::instance().clear_error(); }
};

// The inputs of the DeepSpeed run that produced kDeepSpeed: two tensors,
// gradient element j of tensor i at update k ((7k + 3(5i + j)) % 11 - 5) / 4,
// lr 0.01 (1 + 0.1 k), weight_decay 0.01, freeze_step 4, coeff_beta 0.5.
const std::vector<std::vector<float>> kStart = {{1.5f, -0.25f, -2.0f, 0.5f, -1.0f, 0.75f},
                                                {0.3f, -0.6f, 0.9f}};
float golden_grad(int64_t k, size_t i, size_t j) {
  return static_cast<float>(((k * 7 + (i * 5 + j) * 3) % 11) - 5.0) / 4.0f;
}
double golden_lr(int64_t k) { return 0.01 * (1 + 0.1 * static_cast<double>(k)); }

// DeepSpeed 0.19.8's deepspeed/runtime/fp16/onebit/lamb.py OnebitLamb on
// one process (torch CPU), after its initialisation step() with zero
// gradients, as the FP16 wrapper runs it: per update, p of both tensors
// then exp_avg of both tensors. Updates 1-3 are the warm-up, 4-12 the
// compressed phase (no communication on one rank, but the scaled momentum,
// reconstructed gradients, fresh variance and trust-ratio factor).
const double kDeepSpeed[12][18] = {
    {1.4859246, -0.263997823, -1.98590255, 0.499977857, -1.01396465, 0.76397568, 0.307113051,
     -0.592866719, 0.892859936, 0.0500000007, 0.125, -0.075000003, 0, 0.075000003, -0.125, -0.125,
     -0.0500000007, 0.0250000004},
    {1.48728859, -0.286273301, -1.99114478, 0.520602703, -1.02500868, 0.773519933, 0.313304335,
     -0.600780249, 0.901693821, -0.00500000268, 0.137500003, 0.0324999988, -0.100000001,
     0.0425000042, -0.0624999963, -0.0624999963, 0.0800000057, -0.0525000021},
    {1.4637655, -0.295442283, -1.99749625, 0.523902774, -1.00856483, 0.794090629, 0.323119879,
     -0.61016351, 0.896161854, 0.120499998, 0.0487499982, 0.0292499978, -0.014999995, -0.0867500007,
     -0.106249996, -0.106249996, 0.0970000029, 0.0527500026},
    {1.442348, -0.317743093, -1.98382711, 0.530929565, -1.00413787, 0.789339006, 0.320613533,
     -0.611234903, 0.891589224, 0.133450001, 0.143875003, -0.0736750066, -0.0384999961,
     -0.0280749984, 0.0293750111, 0.0293750111, 0.0123000015, 0.0474750027},
    {1.43517578, -0.337438196, -1.98525202, 0.559644818, -0.992610276, 0.781215608, 0.316390604,
     -0.620746374, 0.896835208, 0.0451049954, 0.1294875, 0.00869249366, -0.159649998, -0.0752675012,
     0.051437512, 0.051437512, 0.11107, -0.0572725013},
    {1.41392303, -0.339832842, -1.98214555, 0.575804412, -1.00090897, 0.785484314, 0.318635404,
     -0.628961742, 0.894727767, 0.140594497, 0.0165387467, -0.0171767566, -0.0936850011,
     0.0572592542, -0.0287062433, -0.0287062414, 0.0999629945, 0.02345475},
    {1.39517403, -0.35268417, -1.95821035, 0.598519206, -1.01179874, 0.774491131, 0.313050836,
     -0.628149688, 0.895026445, 0.126535043, 0.0898848698, -0.140459076, -0.134316504, 0.076533325,
     0.0741643831, 0.0741643831, -0.0100333095, -0.00389072672},
    {1.39312601, -0.360324055, -1.94569135, 0.597813666, -1.01089537, 0.76501745, 0.308260381,
     -0.633083105, 0.90535903, 0.0138815343, 0.0558963791, -0.0764131695, 0.00411515124,
     -0.00612000935, 0.0667479411, 0.0667479411, 0.065970026, -0.128501654},
    {1.38093674, -0.350264192, -1.92668533, 0.593214095, -1.02352381, 0.770495415, 0.311053604,
     -0.635593176, 0.91051954, 0.0874933824, -0.0746932626, -0.118771859, 0.0287036374,
     0.0944919959, -0.0399268568, -0.0399268568, 0.0343730226, -0.0656514913},
    {1.37307894, -0.347822815, -1.92956662, 0.601340115, -1.03539193, 0.764795363, 0.308419883,
     -0.62894839, 0.918742359, 0.0537440404, -0.0172239356, 0.0181053299, -0.0491667278,
     0.085042797, 0.0390658304, 0.0390658304, -0.0940642804, -0.109086342},
    {1.38352072, -0.339058697, -1.93596733, 0.592502058, -1.03219736, 0.763351083, 0.307694227,
     -0.626367807, 0.916585147, -0.0766303688, -0.0655015409, 0.0412947983, 0.0557499491,
     -0.0234614834, 0.0101592448, 0.0101592448, -0.0346578509, 0.0268222932},
    {1.38605905, -0.347918957, -1.92982614, 0.584484875, -1.03937507, 0.779348969, 0.315638244,
     -0.620503962, 0.91275835, -0.0189673267, 0.0660486147, -0.0378346816, 0.0501749516,
     0.0538846664, -0.115856685, -0.115856685, -0.0811920613, 0.0491400659},
};

TEST_F(OneBitLambTest, OneRankMatchesDeepSpeed) {
  dscore_optimizer* opt = create(
      defaults().number("weight_decay", 0.01).integer("freeze_step", 4).number("coeff_beta", 0.5));
  HandTensors t(kStart, 3);
  for (int64_t k = 1; k <= 12; ++k) {
    SCOPED_TRACE("update " + std::to_string(k));
    EXPECT_EQ(vt()->wants_reduced_gradients(opt, k), k < 4 ? 1 : 0);
    for (size_t i = 0; i < 2; ++i)
      for (size_t j = 0; j < t.p[i].size(); ++j) t.g[i][j] = golden_grad(k, i, j);
    ASSERT_EQ(t.step(vt(), opt, hparams(golden_lr(k), k)), DSCORE_OK)
        << FakeHost::instance().last_error();
    const double* want = kDeepSpeed[k - 1];
    // fp32 both sides, operations grouped differently and norms in double
    // here: a few ulps of the values' scale.
    for (size_t i = 0, at = 0; i < 2; ++i)
      for (size_t j = 0; j < t.p[i].size(); ++j, ++at) {
        EXPECT_NEAR(t.p[i][j], want[at], 2e-6) << "p[" << i << "][" << j << "]";
        EXPECT_NEAR(t.state[0][i][j], want[9 + at], 2e-6) << "exp_avg[" << i << "][" << j << "]";
      }
  }
  vt()->destroy(opt);
}

// The warm-up on every gradient and copy dtype: LAMB without bias
// correction (double reference); the fresh variance is not touched before
// update freeze_step - 1.
TEST_F(OneBitLambTest, WarmupIsLambWithoutBiasCorrectionOnEveryDtype) {
  const RefStep reference = [](RefTensor& t, const std::vector<double>& grad,
                               const dscore_optimizer_hparams& h) {
    const double b1 = f32(0.9), b2 = f32(0.999), eps = f32(1e-8), wd = f32(0.01);
    // DeepSpeed's 1 - beta: from the double, rounded to fp32 once.
    const double c1 = f32(1 - 0.9), c2 = f32(1 - 0.999);
    std::vector<double> u(t.p.size());
    double p_sq = 0, u_sq = 0;
    for (size_t i = 0; i < t.p.size(); ++i) {
      const double g = grad[i] * h.grad_scale;
      double& m = t.state[0][i];
      double& v = t.state[1][i];
      m = b1 * m + c1 * g;
      v = b2 * v + c2 * g * g;
      u[i] = m / (std::sqrt(v) + eps) + wd * t.p[i];
      p_sq += t.p[i] * t.p[i], u_sq += u[i] * u[i];
    }
    const double ratio =
        p_sq != 0 && u_sq != 0 ? std::clamp(std::sqrt(p_sq / u_sq), 0.01, 10.0) : 1.0;
    for (size_t i = 0; i < t.p.size(); ++i) t.p[i] -= h.lr * ratio * u[i];
  };
  const Tolerance tol{2e-6, 1.0, {1e-6, 1e-6, 0.0}, {1.0, 1e-12, 1.0}};
  for (dscore_dtype g : grad_dtypes())
    for (dscore_dtype out : copy_dtypes()) {
      dscore_optimizer* opt =
          create(defaults().number("weight_decay", 0.01).integer("freeze_step", 100));
      OptimizerHarness run(vt(), opt);
      run.setup({7, 4097}, g, out, 5, [](size_t slot) { return slot == 1 ? 0.01 : 0.05; });
      for (int64_t k = 1; k <= 3; ++k) run.step(hparams(1e-3, k, 0.5), reference, tol);
      vt()->destroy(opt);
    }
}

TEST_F(OneBitLambTest, PhasesFollowFreezeStepAsDeepSpeed) {
  // DeepSpeed tests the phase after each update on its state step (update
  // + 1), so update 1 is always a warm-up update.
  for (auto [freeze_step, last_warmup] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {5, 4}}) {
    SCOPED_TRACE("freeze_step " + std::to_string(freeze_step));
    dscore_optimizer* opt = create(defaults().integer("freeze_step", freeze_step));
    for (int64_t k = 1; k <= 8; ++k)
      EXPECT_EQ(vt()->wants_reduced_gradients(opt, k), k <= last_warmup ? 1 : 0) << k;
    vt()->destroy(opt);
  }
  // The last warm-up update (freeze_step - 1) copies the variance into the
  // fresh variance; the compressed phase leaves the variance alone.
  dscore_optimizer* opt = create(defaults().integer("freeze_step", 3));
  HandTensors t({{0.5f, -1.0f, 2.0f, 0.25f}}, 3);
  for (int64_t k = 1; k <= 4; ++k) {
    t.g[0] = {0.1f * static_cast<float>(k), -0.2f, 0.3f, -0.05f};
    ASSERT_EQ(t.step(vt(), opt, hparams(1e-3, k)), DSCORE_OK) << FakeHost::instance().last_error();
    if (k == 1) {
      EXPECT_EQ(t.state[2][0], std::vector<float>(4, 0.0f)) << "fresh still 0";
    }
    if (k == 2) {
      EXPECT_EQ(t.state[2][0], t.state[1][0]) << "fresh = v at update 2";
    }
  }
  vt()->destroy(opt);
}

void run_ranks(ThreadExchange& exchange, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < exchange.world_size(); ++r)
    threads.emplace_back([&, r] {
      FakeHost::set_thread_communicator(exchange.communicator(r));
      body(r);
      FakeHost::set_thread_communicator(nullptr);
    });
  for (std::thread& th : threads) th.join();
}

TEST_F(OneBitLambTest, TwoRanksAverageAllMomentaAsOneBufferBitForBit) {
  const int world = 2;
  const std::vector<int64_t> sizes = {7, 4097};
  const int64_t total = 7 + 4097;
  const float b1 = 0.9f;
  ThreadExchange exchange(world);
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> start;
  for (int64_t n : sizes) {
    start.emplace_back();
    for (int64_t i = 0; i < n; ++i) start.back().push_back(normal(rng));
  }
  std::vector<HandTensors> t(world, HandTensors(start, 3));
  std::vector<dscore_optimizer*> opts(world);
  for (int r = 0; r < world; ++r)
    opts[r] = create(defaults()
                         .integer("freeze_step", 2)
                         .rank(r, world)
                         .context(FakeHost::new_context(exchange.communicator(r))));
  ReferenceCompression reference(world, total);
  std::vector<double> scaling(sizes.size());
  for (int64_t k = 1; k <= 5; ++k) {
    SCOPED_TRACE("update " + std::to_string(k));
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < sizes.size(); ++i)
        for (float& g : t[r].g[i]) g = normal(rng) * 0.1f;
    if (k == 1) {  // the warm-up: the host averages the gradients
      ASSERT_EQ(vt()->wants_reduced_gradients(opts[0], 1), 1);
      t[1].g = t[0].g;
    } else {
      ASSERT_EQ(vt()->wants_reduced_gradients(opts[0], k), 0);
    }
    if (k == 2) {  // fixed once: mean over tensors of |m| / sqrt(n), over the tensor's
      std::vector<double> scales;
      double united = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        double sum = 0;
        for (float m : t[0].state[0][i]) sum += static_cast<double>(m) * m;
        scales.push_back(std::sqrt(sum) / std::sqrt(static_cast<double>(sizes[i])));
        united += scales.back() / static_cast<double>(sizes.size());
      }
      for (size_t i = 0; i < sizes.size(); ++i) scaling[i] = united / scales[i];
    }
    std::vector<std::vector<float>> expected(world);
    if (k >= 2) {
      std::vector<std::vector<float>> flat(world);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < sizes.size(); ++i)
          for (int64_t j = 0; j < sizes[i]; ++j)
            flat[r].push_back(
                (b1 * t[r].state[0][i][j] + static_cast<float>(1 - 0.9) * t[r].g[i][j]) *
                static_cast<float>(scaling[i]));
      const std::vector<float> avg = reference.allreduce(flat);
      for (size_t i = 0, at = 0; i < sizes.size(); ++i)
        for (int64_t j = 0; j < sizes[i]; ++j, ++at)
          expected[0].push_back(avg[at] / static_cast<float>(scaling[i]));
    }
    exchange.reset_counters();
    run_ranks(exchange, [&](int r) {
      EXPECT_EQ(t[r].step(vt(), opts[r], hparams(1e-3, k)), DSCORE_OK)
          << FakeHost::instance().last_error();
    });
    for (int r = 0; r < world; ++r) {
      std::vector<float> m;
      for (const auto& tensor : t[r].state[0]) m.insert(m.end(), tensor.begin(), tensor.end());
      if (k >= 2) {
        ASSERT_EQ(std::memcmp(m.data(), expected[0].data(), total * sizeof(float)), 0)
            << "rank " << r << ": exp_avg differs from the dense reference";
      }
      EXPECT_EQ(t[r].p, t[0].p) << "rank " << r << " drifted from rank 0";
    }
    if (k >= 2) {  // one buffer: the signs of padded(7 + 4097) elements in one all_to_all
      EXPECT_EQ(exchange.bytes_sent(0).at("all_to_all"), reference.padded() / 8);
    }
  }
  for (dscore_optimizer* o : opts) vt()->destroy(o);
}

// 1 rank, two step() calls per update (two parameter groups, as the host
// makes them): an uninterrupted run equals one that saves after update
// `cut` and resumes in a new instance, in the warm-up (lamb_coeff_freeze)
// and in the compressed phase (scaling_coeff, last_factor).
TEST_F(OneBitLambTest, CheckpointResumesExactly) {
  auto make = [] {
    return create(defaults().integer("freeze_step", 4).number("weight_decay", 0.01));
  };
  auto run_update = [](HandTensors& decay, HandTensors& no_decay, dscore_optimizer* opt,
                       int64_t k) {
    for (size_t j = 0; j < decay.p[0].size(); ++j) decay.g[0][j] = golden_grad(k, 0, j);
    for (size_t j = 0; j < no_decay.p[0].size(); ++j) no_decay.g[0][j] = golden_grad(k, 1, j);
    dscore_optimizer_hparams h = hparams(golden_lr(k), k);
    ASSERT_EQ(decay.step(vt(), opt, h), DSCORE_OK) << FakeHost::instance().last_error();
    h.weight_decay_multiplier = 0;
    ASSERT_EQ(no_decay.step(vt(), opt, h), DSCORE_OK) << FakeHost::instance().last_error();
  };
  for (int64_t cut : {2, 6}) {
    SCOPED_TRACE("saved after update " + std::to_string(cut));
    dscore_optimizer* straight = make();
    dscore_optimizer* resumed = make();
    HandTensors a1({kStart[0]}, 3), a2({kStart[1]}, 3), b1({kStart[0]}, 3), b2({kStart[1]}, 3);
    for (int64_t k = 1; k <= 10; ++k) {
      run_update(a1, a2, straight, k);
      run_update(b1, b2, resumed, k);
      if (k == cut) {
        const std::string bytes = save_extra(vt(), resumed);
        vt()->destroy(resumed);
        resumed = make();
        ASSERT_EQ(vt()->load_extra_state(resumed, bytes.data(), bytes.size()), DSCORE_OK)
            << FakeHost::instance().last_error();
      }
    }
    EXPECT_EQ(a1.p, b1.p);
    EXPECT_EQ(a2.p, b2.p);
    EXPECT_EQ(a1.state, b1.state);
    EXPECT_EQ(a2.state, b2.state);
    vt()->destroy(straight);
    vt()->destroy(resumed);
  }
}

TEST_F(OneBitLambTest, RefusesBadParamsAndExtraState) {
  auto error = [](CreateArgs a) {
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt()->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  };
  EXPECT_NE(error(defaults().boolean("amsgrad", true)).find("amsgrad is not supported"),
            std::string::npos);
  EXPECT_NE(error(defaults().integer("freeze_step", 0)).find("freeze_step = 0 must be >= 1"),
            std::string::npos);
  EXPECT_NE(error(defaults().number("factor_min", 5)).find("factor_max = 4 must be >= factor_min"),
            std::string::npos);
  EXPECT_NE(error(defaults().number("min_coeff", 20)).find("max_coeff = 10 must be >= min_coeff"),
            std::string::npos);
  dscore_optimizer* opt = create(defaults());
  EXPECT_EQ(vt()->load_extra_state(opt, "garbage!", 8), DSCORE_DATA_LOSS);
  EXPECT_NE(FakeHost::instance().last_error().find("not 1-bit LAMB's"), std::string::npos);
  HandTensors t({{1.0f, 2.0f}}, 3);
  t.g[0] = {0.5f, -0.5f};
  ASSERT_EQ(t.step(vt(), opt, hparams(1e-3, 1)), DSCORE_OK);
  const std::string bytes = save_extra(vt(), opt);
  EXPECT_EQ(vt()->load_extra_state(opt, bytes.data(), bytes.size() - 1), DSCORE_DATA_LOSS);
  EXPECT_NE(FakeHost::instance().last_error().find("truncated"), std::string::npos);
  EXPECT_EQ(vt()->load_extra_state(opt, bytes.data(), bytes.size()), DSCORE_OK);
  vt()->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
