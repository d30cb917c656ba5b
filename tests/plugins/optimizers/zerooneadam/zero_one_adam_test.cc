// Tests of plugins/optimizers/zerooneadam through the C ABI: on one rank the
// parameters and momenta of 12 updates equal DeepSpeed's own ZeroOneAdam
// (numbers below); the variance-update and local-step intervals double as
// DeepSpeed's do; with 2 ranks as threads (thread_exchange.h) the updates
// between variance updates take the 1-bit compressed average of the
// gradients, and a synchronisation of the local steps the 1-bit average of
// the accumulated steps, both equal to the dense reference bit for bit;
// a checkpoint (slots + extra state) resumes exactly; bad params are
// refused.
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
  return g_lib->vtable<dscore_optimizer_vtable>(DSCORE_KIND_OPTIMIZER, "ZeroOneAdam");
}
CreateArgs defaults() {
  return CreateArgs::with_defaults(g_lib->find(DSCORE_KIND_OPTIMIZER, "zerooneadam"));
}
dscore_optimizer* create(CreateArgs a) {
  dscore_optimizer* opt = nullptr;
  EXPECT_EQ(vt()->create(a.get(), &opt), DSCORE_OK) << FakeHost::instance().last_error();
  return opt;
}

class ZeroOneAdamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_lib = new TestPluginLibrary(DSCORE_ZEROONEADAM_PLUGIN); }
  static void TearDownTestSuite() {
    delete g_lib;
    g_lib = nullptr;
  }
  void SetUp() override { FakeHost::instance().clear_error(); }
};

// The inputs of the DeepSpeed run that produced kDeepSpeed: two
// tensors, gradient element j of tensor i at update k ((7k + 3(5i + j)) % 11
// - 5) / 4, lr 0.01 (1 + 0.1 k), weight_decay 0.01, var_freeze_step 4,
// var_update_scaler 100, local_step_scaler 2, local_step_clipper 4.
const std::vector<std::vector<float>> kStart = {{1.5f, -0.25f, -2.0f, 0.5f, -1.0f, 0.75f},
                                                {0.3f, -0.6f, 0.9f}};
float golden_grad(int64_t k, size_t i, size_t j) {
  return static_cast<float>(((k * 7 + (i * 5 + j) * 3) % 11) - 5.0) / 4.0f;
}
double golden_lr(int64_t k) { return 0.01 * (1 + 0.1 * static_cast<double>(k)); }

// DeepSpeed 0.19.8's deepspeed/runtime/fp16/onebit/zoadam.py ZeroOneAdam on
// one process (torch CPU), after its initialisation step() with zero
// gradients, as the FP16 wrapper runs it: per update, p of both tensors
// then exp_avg of both tensors. Updates 1-4 update the variance, 5-12 are
// local steps (synchronised at updates 5, 6, 7, 11 and 12... as the
// intervals 1, 1, 2, 2, 4 say).
const double kDeepSpeed[12][18] = {
    {1.46504998, -0.284757555, -1.96499491, 0.499945015, -1.034675, 0.784702539, 0.334752053,
     -0.565149009, 0.865115941, 0.0500000007, 0.125, -0.075000003, 0, 0.075000003, -0.125, -0.125,
     -0.0500000007, 0.0250000004},
    {1.46755815, -0.325674534, -1.97462714, 0.53783232, -1.05496001, 0.802232563, 0.352336079,
     -0.587632, 0.89021337, -0.00500000268, 0.137500003, 0.0324999988, -0.100000001, 0.0425000042,
     -0.0624999963, -0.0624999963, 0.0800000057, -0.0525000021},
    {1.43286788, -0.339192212, -1.98399663, 0.542697132, -1.03070402, 0.832567275, 0.382729292,
     -0.616693199, 0.873082697, 0.120499998, 0.0487499982, 0.0292499978, -0.014999995,
     -0.0867500007, -0.106249996, -0.106249996, 0.0970000029, 0.0527500026},
    {1.3921113, -0.374851793, -1.96332836, 0.556002617, -1.02259302, 0.825615108, 0.375840098,
     -0.620097578, 0.85646081, 0.133450001, 0.143875003, -0.0736750066, -0.0384999961,
     -0.0280749984, 0.0293750111, 0.0293750111, 0.0123000015, 0.0474750027},
    {1.37721574, -0.409227401, -1.96561146, 0.615372539, -0.999555886, 0.812666714, 0.362959146,
     -0.653777301, 0.877658844, 0.0457463004, 0.129276037, 0.00769934896, -0.159426048,
     -0.0757720172, 0.0519342273, 0.0516636297, 0.110764086, -0.0569275022},
    {1.32796383, -0.413798928, -1.95958126, 0.652407944, -1.01781797, 0.820052087, 0.370481223,
     -0.686005235, 0.868079007, 0.141806111, 0.0161175821, -0.0190648865, -0.0932355747,
     0.0563120358, -0.0277702734, -0.0282843672, 0.0993651599, 0.024118796},
    {1.28064096, -0.440702319, -1.91147304, 0.708814681, -1.04372227, 0.798718274, 0.349354595,
     -0.682245612, 0.869321167, 0.128237247, 0.0892723948, -0.143149644, -0.133649215, 0.0751786679,
     0.0755001158, 0.0747669637, -0.0109097753, -0.00294339913},
    {1.27438784, -0.458283097, -1.88307655, 0.706579745, -1.04085684, 0.778244674, 0.32915929,
     -0.705906153, 0.926203728, 0.0154135153, 0.0553451553, -0.0788346827, 0.00471571274,
     -0.0073392, 0.0679500997, 0.0672902688, 0.0651812032, -0.127649054},
    {1.23749125, -0.432870924, -1.83728862, 0.692650914, -1.07662606, 0.790364385, 0.34155187,
     -0.718737423, 0.956631482, 0.0888721645, -0.0751893669, -0.12095122, 0.0292441417,
     0.0933947191, -0.0388449132, -0.0394387618, 0.0336630791, -0.0648841411},
    {1.21337211, -0.426519394, -1.84330404, 0.716683626, -1.11048472, 0.77689594, 0.328350842,
     -0.680198789, 1.01025772, 0.0549849495, -0.0176704265, 0.016143905, -0.0486802757,
     0.0840552449, 0.0400395766, 0.0395051166, -0.0947032273, -0.108395725},
    {1.24754059, -0.401895851, -1.85932744, 0.68723923, -1.09988689, 0.772880793, 0.324597776,
     -0.66505748, 0.995738626, 0.0195492618, -0.028065227, -0.0338175818, 0.0111416364,
     0.0355254896, 0.019928962, 0.0190954003, -0.0108706094, -0.0652875528},
    {1.21498561, -0.440706462, -1.81306291, 0.68161118, -1.14734566, 0.811861277, 0.363951206,
     -0.638249755, 1.01395667, 0.0675943345, 0.099741295, -0.105435826, 0.0100274729, 0.10697294,
     -0.107063934, -0.107814141, -0.0597835481, -0.0337587968},
};

TEST_F(ZeroOneAdamTest, OneRankMatchesDeepSpeed) {
  dscore_optimizer* opt = create(defaults()
                                     .number("weight_decay", 0.01)
                                     .integer("var_freeze_step", 4)
                                     .integer("var_update_scaler", 100)
                                     .integer("local_step_scaler", 2)
                                     .integer("local_step_clipper", 4));
  HandTensors t(kStart, 3);
  for (int64_t k = 1; k <= 12; ++k) {
    SCOPED_TRACE("update " + std::to_string(k));
    for (size_t i = 0; i < 2; ++i)
      for (size_t j = 0; j < t.p[i].size(); ++j) t.g[i][j] = golden_grad(k, i, j);
    ASSERT_EQ(t.step(vt(), opt, hparams(golden_lr(k), k)), DSCORE_OK)
        << FakeHost::instance().last_error();
    const double* want = kDeepSpeed[k - 1];
    // fp32 both sides, operations grouped differently (DeepSpeed's 1 - beta1
    // is rounded from double): a few ulps of the values' scale.
    for (size_t i = 0, at = 0; i < 2; ++i)
      for (size_t j = 0; j < t.p[i].size(); ++j, ++at) {
        EXPECT_NEAR(t.p[i][j], want[at], 2e-6) << "p[" << i << "][" << j << "]";
        EXPECT_NEAR(t.state[0][i][j], want[9 + at], 2e-6) << "exp_avg[" << i << "][" << j << "]";
      }
  }
  vt()->destroy(opt);
}

// Variance updates on every gradient and copy dtype: Adam without bias
// correction (double reference); the accumulator is not touched.
TEST_F(ZeroOneAdamTest, VarianceUpdatesAreAdamWithoutBiasCorrectionOnEveryDtype) {
  const RefStep reference = [](RefTensor& t, const std::vector<double>& grad,
                               const dscore_optimizer_hparams& h) {
    const double b1 = f32(0.9), b2 = f32(0.999), eps = f32(1e-8), wd = f32(0.01);
    // DeepSpeed's 1 - beta: from the double, rounded to fp32 once.
    const double c1 = f32(1 - 0.9), c2 = f32(1 - 0.999);
    for (size_t i = 0; i < t.p.size(); ++i) {
      const double g = grad[i] * h.grad_scale;
      double& m = t.state[0][i];
      double& v = t.state[1][i];
      m = b1 * m + c1 * g;
      v = b2 * v + c2 * g * g;
      t.p[i] -= h.lr * (m / (std::sqrt(v) + eps) + wd * t.p[i]);
    }
  };
  const Tolerance tol{1e-6, 1.0, {1e-6, 1e-6, 0.0}, {1.0, 1e-12, 1.0}};
  for (dscore_dtype g : grad_dtypes())
    for (dscore_dtype out : copy_dtypes()) {
      dscore_optimizer* opt = create(defaults()
                                         .number("weight_decay", 0.01)
                                         .integer("var_freeze_step", 100)
                                         .integer("var_update_scaler", 100));
      OptimizerHarness run(vt(), opt);
      run.setup({7, 4097}, g, out, 5, [](size_t slot) { return slot == 1 ? 0.01 : 0.05; });
      for (int64_t k = 1; k <= 3; ++k) run.step(hparams(1e-3, k, 0.5), reference, tol);
      vt()->destroy(opt);
    }
}

// The updates (1-based) for which wants_reduced_gradients answers 1.
std::vector<int64_t> reduced_updates(dscore_optimizer* opt, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= last; ++k)
    if (vt()->wants_reduced_gradients(opt, k)) out.push_back(k);
  return out;
}

TEST_F(ZeroOneAdamTest, VarianceIntervalDoublesAsDeepSpeeds) {
  // DeepSpeed's run with var_freeze_step 6, var_update_scaler 2 enabled the
  // backward allreduce for updates 1, 2, 3 and 5 (its
  // enable_backward_allreduce after each step()).
  dscore_optimizer* opt =
      create(defaults().integer("var_freeze_step", 6).integer("var_update_scaler", 2));
  EXPECT_EQ(reduced_updates(opt, 12), (std::vector<int64_t>{1, 2, 3, 5}));
  vt()->destroy(opt);
  // var_update_scaler 1: the interval doubles after every variance update,
  // so they happen where k + 1 is a power of two.
  opt = create(defaults().integer("var_freeze_step", 100).integer("var_update_scaler", 1));
  EXPECT_EQ(reduced_updates(opt, 100), (std::vector<int64_t>{1, 3, 7, 15, 31, 63}));
  // Asking again, and for earlier updates, gives the same answers.
  EXPECT_EQ(vt()->wants_reduced_gradients(opt, 7), 1);
  EXPECT_EQ(vt()->wants_reduced_gradients(opt, 8), 0);
  vt()->destroy(opt);
}

TEST_F(ZeroOneAdamTest, LocalStepIntervalDoublesUpToTheClipper) {
  // Local steps from update 1; the interval doubles every 2 updates up to 4:
  // updates 1-2 at interval 1, 3-4 at 2, then 4. A synchronisation empties
  // the momentum accumulator.
  dscore_optimizer* opt = create(defaults()
                                     .integer("var_freeze_step", 0)
                                     .integer("local_step_scaler", 2)
                                     .integer("local_step_clipper", 4));
  HandTensors t({{0.5f, -1.0f, 2.0f}}, 3);
  t.state[1][0] = {0.01f, 0.02f, 0.03f};  // a frozen variance
  std::vector<int64_t> synced;
  for (int64_t k = 1; k <= 16; ++k) {
    t.g[0] = {0.1f * static_cast<float>(k), -0.2f, 0.3f};
    ASSERT_EQ(t.step(vt(), opt, hparams(1e-3, k)), DSCORE_OK) << FakeHost::instance().last_error();
    EXPECT_EQ(vt()->wants_reduced_gradients(opt, k), 0);
    if (t.state[2][0] == std::vector<float>(3, 0.0f)) synced.push_back(k);
  }
  EXPECT_EQ(synced, (std::vector<int64_t>{1, 2, 3, 7, 11, 15}));
  // Syncs at 19 and 23 (interval 4); updates 17-23 at lr 0, so the sync at
  // 23 follows only local steps at lr 0: the momentum is kept (no 0 / 0).
  for (int64_t k = 17; k <= 23; ++k) ASSERT_EQ(t.step(vt(), opt, hparams(0.0, k)), DSCORE_OK);
  EXPECT_EQ(t.state[2][0], std::vector<float>(3, 0.0f)) << "synchronised at 23";
  for (float x : t.state[0][0]) EXPECT_TRUE(std::isfinite(x)) << "exp_avg after a sync at lr 0";
  EXPECT_EQ(t.state[1][0], (std::vector<float>{0.01f, 0.02f, 0.03f})) << "variance frozen";
  vt()->destroy(opt);
}

// A long run through both phases (var_freeze_step 100000, then local steps
// whose interval doubles up to local_step_clipper) stays finite. The
// schedule is advanced update by update, not recomputed from update 1: a
// quadratic schedule would make this run take minutes instead of a fraction
// of a second (not asserted here: timings belong to bench/, and the
// sanitizer builds run this on loaded machines).
TEST_F(ZeroOneAdamTest, LongRunsThroughBothPhasesStayFinite) {
  dscore_optimizer* opt = create(defaults().integer("var_freeze_step", 100000));
  HandTensors t({{0.5f}}, 3);
  for (int64_t k = 1; k <= 150000; ++k) {
    vt()->wants_reduced_gradients(opt, k);
    t.g[0][0] = k % 2 ? 0.1f : -0.1f;
    ASSERT_EQ(t.step(vt(), opt, hparams(1e-6, k)), DSCORE_OK) << "update " << k;
  }
  EXPECT_TRUE(std::isfinite(t.p[0][0]));
  for (float x : t.state[0][0]) EXPECT_TRUE(std::isfinite(x)) << "exp_avg";
  vt()->destroy(opt);
}

// Runs body(rank) on one thread per rank, each seeing its own communicator.
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

TEST_F(ZeroOneAdamTest, TwoRanksCompressGradientsThenLocalStepsBitForBit) {
  const int world = 2;
  const int64_t n = 4097;
  const float b1 = 0.9f, eps = 1e-8f, lr = 1e-3f;
  ThreadExchange exchange(world);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> start(n), v0(n);
  for (int64_t i = 0; i < n; ++i)
    start[i] = normal(rng), v0[i] = 0.01f + 0.01f * std::abs(normal(rng));
  std::vector<HandTensors> t(world, HandTensors({start}, 3));
  std::vector<dscore_optimizer*> opts(world);
  // var_update_scaler 1: variance updates at 1 and 3; update 2 averages the
  // gradients in 1 bit; from update 4 local steps, synchronised every update.
  for (int r = 0; r < world; ++r) {
    t[r].state[1][0] = v0;
    opts[r] = create(defaults()
                         .integer("var_freeze_step", 3)
                         .integer("var_update_scaler", 1)
                         .rank(r, world)
                         .context(FakeHost::new_context(exchange.communicator(r))));
  }
  ReferenceCompression reference(world, n);
  for (int64_t k = 1; k <= 6; ++k) {
    SCOPED_TRACE("update " + std::to_string(k));
    const bool reduced = vt()->wants_reduced_gradients(opts[0], k) != 0;
    EXPECT_EQ(reduced, k == 1 || k == 3);
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i) t[r].g[0][i] = normal(rng) * (i % 5 == 0 ? 1e-3f : 1.0f);
    if (reduced)  // the host's part: every rank gets the average
      for (int64_t i = 0; i < n; ++i) {
        const float avg = (t[0].g[0][i] + t[1].g[0][i]) / 2;
        t[0].g[0][i] = t[1].g[0][i] = avg;
      }
    // The expected momentum of each rank, in the plugin's fp32 order.
    std::vector<std::vector<float>> expected_m(world, std::vector<float>(n));
    std::vector<std::vector<float>> expected_p(world, std::vector<float>(n));
    if (k == 2) {  // m takes the 1-bit average of the gradients
      const std::vector<float> avg = reference.allreduce({t[0].g[0], t[1].g[0]});
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i)
          expected_m[r][i] = b1 * t[r].state[0][0][i] + static_cast<float>(1 - 0.9) * avg[i];
    } else if (k >= 4) {                     // one local step, then the synchronisation
      if (k == 4) reference.reset_errors();  // local steps start with fresh errors
      std::vector<std::vector<float>> u(world, std::vector<float>(n));
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i) {
          const float m = b1 * t[r].state[0][0][i] + static_cast<float>(1 - 0.9) * t[r].g[0][i];
          const float update = m / (std::sqrt(v0[i]) + eps);
          float p = t[r].p[0][i] - lr * update;
          const float acc = 0.0f + -lr * update;
          p -= acc;
          expected_p[r][i] = p;
          u[r][i] = acc * (std::sqrt(v0[i]) + eps);
        }
      const std::vector<float> avg = reference.allreduce(u);
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i) {
          expected_m[r][i] = -(avg[i] / lr);
          expected_p[r][i] += avg[i] / (std::sqrt(v0[i]) + eps);
        }
    }
    run_ranks(exchange, [&](int r) {
      EXPECT_EQ(t[r].step(vt(), opts[r], hparams(lr, k)), DSCORE_OK)
          << FakeHost::instance().last_error();
    });
    if (k == 2 || k >= 4)
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(std::memcmp(t[r].state[0][0].data(), expected_m[r].data(), n * sizeof(float)), 0)
            << "rank " << r << ": exp_avg differs from the dense reference";
        if (k >= 4) {
          ASSERT_EQ(std::memcmp(t[r].p[0].data(), expected_p[r].data(), n * sizeof(float)), 0)
              << "rank " << r << ": params differ from the reference";
          ASSERT_EQ(t[r].state[2][0], std::vector<float>(n, 0.0f)) << "accumulator emptied";
        }
      }
    if (k <= 3) {
      EXPECT_NE(t[0].state[1][0], v0) << "the variance still moves";
    }
    if (k == 3) v0 = t[0].state[1][0];  // frozen from here
    if (k >= 4) {
      EXPECT_EQ(t[0].state[1][0], v0) << "the variance is frozen";
      // A synchronisation leaves the ranks equal up to the rounding of
      // undoing each rank's own local step (p - lr u + lr u).
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(t[0].p[0][i], t[1].p[0][i], 4e-7 * std::max(1.0f, std::abs(t[0].p[0][i])))
            << "element " << i;
    }
  }
  for (dscore_optimizer* o : opts) vt()->destroy(o);
}

// 1 rank: an uninterrupted run equals one that saves after update `cut`
// (slots + extra state) and resumes in a new instance, across the
// variance phase and local steps that span the cut (lrs restored).
TEST_F(ZeroOneAdamTest, CheckpointResumesExactly) {
  auto make = [] {
    return create(defaults()
                      .integer("var_freeze_step", 3)
                      .integer("var_update_scaler", 1)
                      .integer("local_step_scaler", 1)
                      .integer("local_step_clipper", 8));
  };
  auto feed = [](HandTensors& t, int64_t k) {
    for (size_t j = 0; j < t.p[0].size(); ++j) t.g[0][j] = golden_grad(k, 0, j);
  };
  const int64_t last = 14;
  for (int64_t cut : {2, 5, 8}) {
    SCOPED_TRACE("saved after update " + std::to_string(cut));
    dscore_optimizer* straight = make();
    dscore_optimizer* first = make();
    HandTensors a({kStart[0]}, 3), b({kStart[0]}, 3);
    for (int64_t k = 1; k <= last; ++k) {
      feed(a, k), feed(b, k);
      ASSERT_EQ(a.step(vt(), straight, hparams(golden_lr(k), k)), DSCORE_OK);
      ASSERT_EQ(b.step(vt(), first, hparams(golden_lr(k), k)), DSCORE_OK);
      if (k == cut) {  // the host restores the slots; the plugin its extra state
        const std::string bytes = save_extra(vt(), first);
        vt()->destroy(first);
        first = make();
        ASSERT_EQ(vt()->load_extra_state(first, bytes.data(), bytes.size()), DSCORE_OK)
            << FakeHost::instance().last_error();
      }
    }
    EXPECT_EQ(a.p, b.p);
    EXPECT_EQ(a.state, b.state);
    vt()->destroy(straight);
    vt()->destroy(first);
  }
}

TEST_F(ZeroOneAdamTest, RefusesBadParams) {
  auto error = [](CreateArgs a) {
    dscore_optimizer* opt = nullptr;
    EXPECT_EQ(vt()->create(a.get(), &opt), DSCORE_INVALID_ARGUMENT);
    return FakeHost::instance().last_error();
  };
  EXPECT_NE(error(defaults().boolean("amsgrad", true)).find("amsgrad is not supported"),
            std::string::npos);
  EXPECT_NE(error(defaults().integer("var_update_scaler", 0)).find("var_update_scaler = 0"),
            std::string::npos);
  EXPECT_NE(error(defaults().integer("local_step_clipper", 0)).find("local_step_clipper = 0"),
            std::string::npos);
  dscore_optimizer* opt = create(defaults());
  EXPECT_EQ(vt()->load_extra_state(opt, "garbage", 7), DSCORE_DATA_LOSS);
  EXPECT_NE(FakeHost::instance().last_error().find("not 0/1 Adam's"), std::string::npos);
  vt()->destroy(opt);
}

}  // namespace
}  // namespace dscore::testing
