// Test harness shared by the optimizer plugin tests: drives one optimizer
// instance through the C ABI over random tensors (given sizes, gradient
// dtype, 16-bit copy dtype, every declared state slot) and, for each step,
// runs a straightforward double-precision reference written in the test on
// the SAME inputs (the plugin's fp32 state before the step, the gradients as
// stored), then asserts the maximum relative error of parameters, states
// and the 16-bit copy. Starting every step from the plugin's own state keeps
// one step's rounding from compounding, so tolerances state single-step
// fp32 error.
#pragma once

#include <dscore/optimizer.h>
#include <gtest/gtest.h>
#include <dscore/cpp/dtype.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {

const std::vector<int64_t> kAwkwardSizes = {1, 7, 4097, (1 << 20) + 3};

// One tensor as the reference sees it, in double.
struct RefTensor {
  std::vector<double> p;
  std::vector<std::vector<double>> state;  // [slot][element]
};
// The step's hyper-parameters as the plugin receives them.
using RefStep = std::function<void(RefTensor& t, const std::vector<double>& grad,
                                   const dscore_optimizer_hparams& h)>;

// Max relative error |x - ref| / max(|ref|, floor). A NaN reference value
// marks an element the reference cannot decide (e.g. Lion's sign of ~0): it
// is skipped and counted.
struct Tolerance {
  double param = 1e-6, param_floor = 1e-2;
  std::vector<double> state, state_floor;  // per slot
};

class OptimizerHarness {
 public:
  OptimizerHarness(const dscore_optimizer_vtable* vt, dscore_optimizer* opt) : vt_(vt), opt_(opt) {
    const dscore_optimizer_state_slot* const* slots = nullptr;
    EXPECT_EQ(vt->state_slots(opt, &slots, &slot_count_), DSCORE_OK);
    for (size_t s = 0; s < slot_count_; ++s) initial_.push_back(slots[s]->initial_value);
  }

  // Fresh tensors: params ~ N(0, 1), each slot at its initial value plus
  // `state_noise(slot)` * |N(0, 1)| (a history), 16-bit copies when asked.
  void setup(const std::vector<int64_t>& sizes, dscore_dtype grad_dtype, dscore_dtype out16,
             uint32_t seed, std::function<double(size_t)> state_noise = nullptr) {
    rng_.seed(seed);
    grad_dtype_ = grad_dtype;
    p_.clear(), g_.clear(), s_.clear(), out_.clear();
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t n : sizes) {
      p_.emplace_back(DSCORE_DTYPE_F32, n, "w");
      g_.emplace_back(grad_dtype, n);
      if (out16 != DSCORE_DTYPE_INVALID) out_.emplace_back(out16, n);
      for (int64_t j = 0; j < n; ++j) p_.back().set(j, normal(rng_));
    }
    for (size_t s = 0; s < slot_count_; ++s)
      for (int64_t n : sizes) {
        s_.emplace_back(DSCORE_DTYPE_F32, n);
        const double noise = state_noise ? state_noise(s) : 0.0;
        for (int64_t j = 0; j < n; ++j)
          s_.back().set(j, static_cast<float>(initial_[s] + noise * std::abs(normal(rng_))));
      }
  }

  // Random gradients of mixed magnitude, one step of plugin and reference,
  // errors checked against `tol`. Returns false when the plugin failed.
  bool step(const dscore_optimizer_hparams& h, const RefStep& reference, const Tolerance& tol) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float scales[] = {1e-3f, 0.3f, 2.0f};
    const size_t n = p_.size();
    std::vector<RefTensor> ref(n);
    std::vector<std::vector<double>> grads(n);
    for (size_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < g_[i].numel(); ++j) g_[i].set(j, normal(rng_) * scales[j % 3]);
      for (int64_t j = 0; j < g_[i].numel(); ++j) grads[i].push_back(g_[i].get(j));
      for (float v : p_[i].values()) ref[i].p.push_back(v);
      ref[i].state.resize(slot_count_);
      for (size_t s = 0; s < slot_count_; ++s)
        for (float v : s_[s * n + i].values()) ref[i].state[s].push_back(v);
    }
    std::vector<dscore_tensor*> pp, sp, op;
    std::vector<const dscore_tensor*> gp;
    for (size_t i = 0; i < n; ++i) pp.push_back(p_[i].view()), gp.push_back(g_[i].view());
    for (TestTensor& t : s_) sp.push_back(t.view());
    for (TestTensor& t : out_) op.push_back(t.view());
    dscore_optimizer_step_args a{};
    a.struct_size = sizeof a;
    a.hparams = &h;
    a.tensor_count = n;
    a.params = pp.data();
    a.grads = gp.data();
    a.slot_count = slot_count_;
    a.states = sp.empty() ? nullptr : sp.data();
    a.params_16bit = op.empty() ? nullptr : op.data();
    const dscore_status st = vt_->step(opt_, &a);
    EXPECT_EQ(st, DSCORE_OK) << FakeHost::instance().last_error();
    if (st != DSCORE_OK) return false;
    for (size_t i = 0; i < n; ++i) {
      reference(ref[i], grads[i], h);
      SCOPED_TRACE("tensor of " + std::to_string(p_[i].numel()) + " elements, grad " +
                   sdk::dtype_name(grad_dtype_));
      check(p_[i], ref[i].p, tol.param, tol.param_floor, "param");
      for (size_t s = 0; s < slot_count_; ++s)
        check(s_[s * n + i], ref[i].state[s], tol.state.at(s), tol.state_floor.at(s),
              ("state " + std::to_string(s)).c_str());
      if (!out_.empty()) {  // exactly the fp32 parameter rounded to the copy's dtype
        TestTensor expect(out_[i].view()->dtype, 1);
        for (int64_t e = 0; e < p_[i].numel(); ++e) {
          expect.set(0, p_[i].get(e));
          if (out_[i].get(e) != expect.get(0) && !std::isnan(expect.get(0))) {
            ADD_FAILURE() << "params_16bit element " << e << " is " << out_[i].get(e)
                          << ", expected " << expect.get(0);
            break;
          }
        }
      }
    }
    return true;
  }

  double worst_param_error() const { return worst_param_; }
  size_t undecided() const { return undecided_; }
  const TestTensor& param(size_t i) const { return p_[i]; }
  TestTensor& state(size_t slot, size_t i) { return s_[slot * p_.size() + i]; }

 private:
  void check(const TestTensor& actual, const std::vector<double>& expected, double tol,
             double floor, const char* what) {
    double worst = 0;
    int64_t at = -1;
    for (size_t e = 0; e < expected.size(); ++e) {
      if (std::isnan(expected[e])) {
        ++undecided_;
        continue;
      }
      const double err = std::abs(actual.get(static_cast<int64_t>(e)) - expected[e]) /
                         std::max(std::abs(expected[e]), floor);
      if (!(err <= worst)) worst = err, at = static_cast<int64_t>(e);
    }
    if (std::string(what) == "param") worst_param_ = std::max(worst_param_, worst);
    EXPECT_LE(worst, tol) << what << ": max relative error at element " << at << " (actual "
                          << (at >= 0 ? actual.get(at) : 0.0f) << ", reference "
                          << (at >= 0 ? expected[at] : 0.0) << ")";
  }

  const dscore_optimizer_vtable* vt_;
  dscore_optimizer* opt_;
  size_t slot_count_ = 0;
  std::vector<double> initial_;
  std::mt19937 rng_;
  dscore_dtype grad_dtype_ = DSCORE_DTYPE_F32;
  std::vector<TestTensor> p_, g_, s_, out_;
  double worst_param_ = 0;
  size_t undecided_ = 0;
};

// x rounded to fp32: the hyper-parameters as the plugins' kernels get them.
inline double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// Plain hparams: lr, step, scale, multiplier 1, no overrides.
inline dscore_optimizer_hparams hparams(double lr, int64_t step, double grad_scale = 1.0) {
  dscore_optimizer_hparams h{};
  h.struct_size = sizeof h;
  h.lr = lr;
  h.weight_decay_multiplier = 1;
  h.step = step;
  h.grad_scale = grad_scale;
  return h;
}

// The gradient dtypes every optimizer accepts, and the 16-bit copy dtypes.
inline const std::vector<dscore_dtype>& grad_dtypes() {
  static const std::vector<dscore_dtype> v = {DSCORE_DTYPE_F32, DSCORE_DTYPE_BF16,
                                              DSCORE_DTYPE_F16};
  return v;
}
inline const std::vector<dscore_dtype>& copy_dtypes() {
  static const std::vector<dscore_dtype> v = {DSCORE_DTYPE_BF16, DSCORE_DTYPE_F16,
                                              DSCORE_DTYPE_F32};
  return v;
}

}  // namespace dscore::testing
