// Hand-driven steps for the 1-bit optimizer tests (zerooneadam, onebitlamb):
// fp32 tensors held in plain vectors the test reads and writes, each with
// its state slots, passed to one step() call through the C ABI; the extra
// state saved and loaded as bytes.
#pragma once

#include <dscore/optimizer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {

struct HandTensors {
  std::vector<std::vector<float>> p, g;
  std::vector<std::vector<std::vector<float>>> state;  // [slot][tensor][element]

  HandTensors(const std::vector<std::vector<float>>& params, size_t slots) : p(params) {
    for (const auto& t : p) g.emplace_back(t.size(), 0.0f);
    state.assign(slots, std::vector<std::vector<float>>());
    for (auto& slot : state)
      for (const auto& t : p) slot.emplace_back(t.size(), 0.0f);
  }

  dscore_status step(const dscore_optimizer_vtable* vt, dscore_optimizer* opt,
                     const dscore_optimizer_hparams& h) {
    const size_t n = p.size();
    std::vector<int64_t> shapes;
    for (const auto& t : p) shapes.push_back(static_cast<int64_t>(t.size()));
    std::vector<dscore_tensor> views;
    views.reserve(n * (2 + state.size()));
    auto view = [&](std::vector<float>& v, size_t i) -> dscore_tensor* {
      views.push_back(dscore_tensor{sizeof(dscore_tensor), v.data(), DSCORE_DTYPE_F32,
                                    DSCORE_DEVICE_CPU, 0, 1, &shapes[i], nullptr,
                                    static_cast<int64_t>(v.size()), nullptr});
      return &views.back();
    };
    std::vector<dscore_tensor*> params, states;
    std::vector<const dscore_tensor*> grads;
    for (size_t i = 0; i < n; ++i) params.push_back(view(p[i], i)), grads.push_back(view(g[i], i));
    for (auto& slot : state)
      for (size_t i = 0; i < n; ++i) states.push_back(view(slot[i], i));
    dscore_optimizer_step_args a{sizeof a,      &h,           n,
                                 params.data(), grads.data(), state.size(),
                                 states.data(), nullptr,      nullptr};
    return vt->step(opt, &a);
  }
};

inline std::string save_extra(const dscore_optimizer_vtable* vt, dscore_optimizer* opt) {
  std::string bytes;
  EXPECT_EQ(vt->save_extra_state(
                opt,
                [](void* ctx, const void* d, size_t size) -> dscore_status {
                  static_cast<std::string*>(ctx)->append(static_cast<const char*>(d), size);
                  return DSCORE_OK;
                },
                &bytes),
            DSCORE_OK);
  return bytes;
}

}  // namespace dscore::testing
