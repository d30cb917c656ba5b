// The memory one pass of the mlp allocates for a micro-batch: the kept
// pre-activations and activations (one flat buffer), the backward scratch,
// and fp32 copies of 16-bit views. Each is allocated once at its largest,
// so a pass never reallocates and the model's declared activation memory
// (model.h activation_bytes) is the sum of what PassSizes counts.
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <vector>

namespace dscore::mlp {

// Floats of each buffer, for layer widths `dims` (dims[l]: input width of
// layer l; dims.back(): the output) and `batch` samples.
struct PassSizes {
  PassSizes(const std::vector<int64_t>& dims, int64_t batch);
  int64_t trace = 0;     // every layer's pre-activation, every hidden activation
  int64_t grad_out = 0;  // dz: gradient of the widest layer output, (B, max dims[1..L])
  int64_t grad_in = 0;   // da: of the widest hidden input, (B, max dims[1..L-1]); 0 with one layer
  int64_t weight = 0;    // gw, or a 16-bit weight's fp32 copy: the largest weight
  int64_t bias = 0;      // gb, or a 16-bit bias's fp32 copy: the widest output
  int64_t inputs = 0;    // fp32 copies of 16-bit "x" and "y": (B, dims[0] + dims.back())

  // Bytes a forward_backward() allocates: with 16-bit views (parameters
  // and inputs) every buffer; with fp32 views no copies (weight + bias +
  // inputs fewer floats: the backward's own gw and gb remain).
  uint64_t forward_backward_bytes(bool sixteen_bit_views) const;
};

// One pass's buffers (it allocates nothing else). `dims` must outlive it.
// input(l) is layer l's input (B, dims[l]): the batch's
// "x" (as fp32) for l = 0, else the previous layer's activation; input(L)
// is the prediction, the last layer's pre-activation (no activation there).
class PassBuffers {
 public:
  PassBuffers(const std::vector<int64_t>& dims, int64_t batch);

  // x as fp32: the tensor's memory when it is fp32, else a copy. Call first.
  void set_input(const dscore_tensor* x);
  const float* input(size_t l) const;
  float* activation(size_t l);  // (B, dims[l]) for 1 <= l < L
  float* pre(size_t l);         // (B, dims[l + 1]): layer l's output before its activation

  // A tensor of `numel` elements as fp32: its own memory when fp32, else
  // converted into the copy buffer `which`.
  enum Copy { kWeight, kBias, kTargets };
  const float* fp32(const dscore_tensor* t, int64_t numel, Copy which);

  // The backward scratch, reserved at its largest by start_backward().
  void start_backward();
  std::vector<float> dz, da, gw, gb;

 private:
  // trace_ holds, layer by layer, pre(l) then activation(l + 1) (for l + 1 < L).
  int64_t pre_offset(size_t l) const;

  const std::vector<int64_t>& dims_;
  int64_t batch_;
  PassSizes sizes_;
  std::vector<float> trace_;  // (sizes_.trace)
  const float* x_ = nullptr;
  std::vector<float> copies_[4];  // fp32 copies: weight, bias, targets, x
};

}  // namespace dscore::mlp
