// The vocab-parallel LM head (cpu/vocab_parallel.h) over 2 and 3 parts of
// an odd vocabulary (uneven parts, sdk::even_part), each part on its own
// thread with an in-memory group (the reductions meet at a barrier and sum
// the parts in part order, as the comm backends do): the loss and the
// input gradient equal the unsplit head's (linear.h), each part's weight
// gradient equals the unsplit head's rows, ignored targets included; and
// both gradients equal central finite differences of the split loss. Also
// sdk::for_each_whole_run's map of a part into its whole tensor.
#include <gtest/gtest.h>
#include <dscore/cpp/tensor_split.hpp>

#include <barrier>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "tests/plugins/models/transformer_common/gradient_check.h"
#include "transformer_common/cpu/linear.h"
#include "transformer_common/cpu/vocab_parallel.h"

namespace dscore::transformer::testing {
namespace {

// A group of `parts` threads: each reduction publishes every part's values,
// then each part reduces them in part order.
class ThreadGroup {
 public:
  explicit ThreadGroup(int parts) : parts_(parts), slots_(parts), barrier_(parts) {}

  cpu::GroupReductions<double> reductions(int part) {
    auto reduce = [this, part](double* data, int64_t n, bool max) {
      slots_[part].assign(data, data + n);
      barrier_.arrive_and_wait();
      for (int64_t i = 0; i < n; ++i) {
        double v = slots_[0][i];
        for (int p = 1; p < parts_; ++p) v = max ? std::max(v, slots_[p][i]) : v + slots_[p][i];
        data[i] = v;
      }
      barrier_.arrive_and_wait();
    };
    return {[reduce](double* d, int64_t n) { reduce(d, n, true); },
            [reduce](double* d, int64_t n) { reduce(d, n, false); },
            [reduce](double* d, int64_t n) { reduce(d, n, false); }};
  }

 private:
  int parts_;
  std::vector<std::vector<double>> slots_;
  std::barrier<> barrier_;
};

constexpr int64_t N = 7, C = 5, V = 11;
const std::vector<int32_t> kTargets = {3, 10, -1, 0, 7, 5, 10};

struct Split {
  double loss = 0;
  Vec dx, dw;  // dx from part 0 (every part's is the same); dw whole
};

// The split head over `parts` parts; dx and dw when `backward`.
Split split_head(const Vec& x, const Vec& w, int parts, double scale, bool backward) {
  ThreadGroup group(parts);
  Split out;
  out.dw.assign(static_cast<size_t>(V * C), 0.0);
  std::vector<Vec> dx(static_cast<size_t>(parts), Vec(static_cast<size_t>(N * C)));
  std::vector<double> loss(static_cast<size_t>(parts));
  std::vector<std::thread> threads;
  for (int p = 0; p < parts; ++p)
    threads.emplace_back([&, p] {
      const auto [v0, rows] = sdk::even_part(V, parts, p);
      loss[p] = cpu::vocab_parallel_lm_head<double>(
          backward ? dx[p].data() : nullptr, backward ? out.dw.data() + v0 * C : nullptr, x.data(),
          w.data() + v0 * C, kTargets.data(), N, C, rows, v0, V, scale, group.reductions(p));
    });
  for (std::thread& t : threads) t.join();
  for (int p = 1; p < parts; ++p) {
    EXPECT_EQ(loss[p], loss[0]) << "part " << p;
    if (backward) {
      EXPECT_EQ(dx[p], dx[0]) << "part " << p;
    }
  }
  out.loss = loss[0];
  out.dx = dx[0];
  return out;
}

TEST(VocabParallelHead, PartsGiveTheUnsplitHeadsLossAndGradients) {
  const Vec x = random_vec(N * C, 1), w = random_vec(V * C, 2, 0.5);
  const double scale = 0.37;
  Vec dx(static_cast<size_t>(N * C)), dw(static_cast<size_t>(V * C), 0.0);
  const double loss = cpu::lm_head_forward_backward<double>(
      dx.data(), dw.data(), x.data(), w.data(), kTargets.data(), N, C, V, scale);
  for (int parts : {1, 2, 3}) {
    const Split s = split_head(x, w, parts, scale, true);
    EXPECT_NEAR(s.loss, loss, 1e-12 * std::abs(loss)) << parts;
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(s.dx[i], dx[i], 1e-13) << parts << " " << i;
    for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(s.dw[i], dw[i], 1e-13) << parts << " " << i;
    // Forward only: the same loss.
    EXPECT_EQ(split_head(x, w, parts, scale, false).loss, s.loss) << parts;
  }
}

TEST(VocabParallelHead, GradientsEqualFiniteDifferencesOfTheSplitLoss) {
  Vec x = random_vec(N * C, 3), w = random_vec(V * C, 4, 0.5);
  const double scale = 1.0;
  const Split s = split_head(x, w, 3, scale, true);
  const auto loss = [&] { return split_head(x, w, 3, scale, false).loss; };
  expect_gradient("dx", &x, s.dx, loss);
  expect_gradient("dw", &w, s.dw, loss);
}

TEST(TensorSplit, APartsRunsLieInTheWholeTensor) {
  // c_attn's weight (3C, C) with C = 4, split by heads over 2 ranks: rank 1
  // holds rows 2-3 of each of the q, k and v blocks.
  const int64_t shape[2] = {6, 4};
  dscore_model_param p{};
  p.struct_size = sizeof p;
  p.ndim = 2;
  p.shape = shape;
  p.numel = 24;
  sdk::TensorSplit{0, 3, 12, 2}.declare(&p);
  std::vector<std::vector<int64_t>> runs;
  sdk::for_each_whole_run(p, 2, 20, [&](int64_t local, int64_t whole, int64_t n) {
    runs.push_back({local, whole, n});
  });
  const std::vector<std::vector<int64_t>> expected = {
      {2, 10, 6}, {8, 24, 8}, {16, 40, 6}};  // q rows 2-3, k rows 6-7, v rows 10-11
  EXPECT_EQ(runs, expected);
  EXPECT_EQ(sdk::whole_shape(p), (std::vector<int64_t>{12, 4}));
  // A column split: c_proj (C, C / 2) of rank 1 holds columns 2-3.
  const int64_t columns[2] = {4, 2};
  p.shape = columns;
  p.numel = 8;
  sdk::TensorSplit{1, 1, 4, 2}.declare(&p);
  runs.clear();
  sdk::for_each_whole_run(p, 0, 8, [&](int64_t local, int64_t whole, int64_t n) {
    runs.push_back({local, whole, n});
  });
  EXPECT_EQ(runs,
            (std::vector<std::vector<int64_t>>{{0, 2, 2}, {2, 6, 2}, {4, 10, 2}, {6, 14, 2}}));
  // even_part: 11 over 3 is 4, 4, 3.
  EXPECT_EQ(sdk::even_part(11, 3, 0), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(sdk::even_part(11, 3, 2), (std::pair<int64_t, int64_t>{8, 3}));
  // Without the flag the fields mean nothing: replicated.
  p.flags = 0;
  EXPECT_FALSE(sdk::TensorSplit::of(p).split());
}

}  // namespace
}  // namespace dscore::transformer::testing
