// PassBuffers and PassSizes (pass_buffers.h): the sizes, counted once, and
// the buffers a pass allocates from them.
#include "pass_buffers.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

namespace dscore::mlp {

PassSizes::PassSizes(const std::vector<int64_t>& dims, int64_t batch) {
  const size_t L = dims.size() - 1;
  int64_t widest_out = 0, widest_hidden = 0;
  for (size_t l = 0; l < L; ++l) {
    const int64_t in = dims[l], out = dims[l + 1];
    trace += batch * out;                 // pre(l)
    if (l + 1 < L) trace += batch * out;  // activation(l + 1)
    if (l > 0) widest_hidden = std::max(widest_hidden, in);
    widest_out = std::max(widest_out, out);
    weight = std::max(weight, out * in);
  }
  grad_out = batch * widest_out;
  grad_in = batch * widest_hidden;
  bias = widest_out;
  inputs = batch * (dims.front() + dims.back());
}

uint64_t PassSizes::forward_backward_bytes(bool sixteen_bit_views) const {
  int64_t floats = trace + grad_out + grad_in + weight + bias;
  if (sixteen_bit_views) floats += weight + bias + inputs;
  return static_cast<uint64_t>(floats) * sizeof(float);
}

PassBuffers::PassBuffers(const std::vector<int64_t>& dims, int64_t batch)
    : dims_(dims), batch_(batch), sizes_(dims, batch) {
  trace_.resize(static_cast<size_t>(sizes_.trace));
}

int64_t PassBuffers::pre_offset(size_t l) const {
  int64_t at = 0;  // every earlier layer's pre-activation and activation
  for (size_t j = 0; j < l; ++j) at += 2 * batch_ * dims_[j + 1];
  return at;
}

void PassBuffers::set_input(const dscore_tensor* x) {
  const int64_t numel = batch_ * dims_.front();
  if (x->dtype == DSCORE_DTYPE_F32) {
    x_ = static_cast<const float*>(x->data);
    return;
  }
  std::vector<float>& copy = copies_[3];
  copy.resize(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) copy[i] = sdk::load_float(x, i);
  x_ = copy.data();
}

const float* PassBuffers::input(size_t l) const {
  const size_t L = dims_.size() - 1;
  if (l == 0) return x_;
  if (l == L) return trace_.data() + pre_offset(L - 1);
  return trace_.data() + pre_offset(l - 1) + batch_ * dims_[l];
}

float* PassBuffers::activation(size_t l) {
  return trace_.data() + pre_offset(l - 1) + batch_ * dims_[l];
}

float* PassBuffers::pre(size_t l) { return trace_.data() + pre_offset(l); }

const float* PassBuffers::fp32(const dscore_tensor* t, int64_t numel, Copy which) {
  if (t->dtype == DSCORE_DTYPE_F32) return static_cast<const float*>(t->data);
  const int64_t capacity = which == kWeight ? sizes_.weight
                           : which == kBias ? sizes_.bias
                                            : batch_ * dims_.back();
  std::vector<float>& copy = copies_[which];
  copy.reserve(static_cast<size_t>(capacity));  // once: later layers reuse it
  copy.resize(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) copy[i] = sdk::load_float(t, i);
  return copy.data();
}

void PassBuffers::start_backward() {
  dz.reserve(static_cast<size_t>(sizes_.grad_out));
  da.reserve(static_cast<size_t>(sizes_.grad_in));
  gw.reserve(static_cast<size_t>(sizes_.weight));
  gb.reserve(static_cast<size_t>(sizes_.bias));
}

}  // namespace dscore::mlp
