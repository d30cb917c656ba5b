// Activations (GELU is GPT-2's tanh approximation) and linear layer kernels.
#include "mlp_math.h"

#include <cmath>

namespace dscore::mlp {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

}  // namespace

float activate(Activation a, float z) {
  switch (a) {
    case Activation::kTanh:
      return std::tanh(z);
    case Activation::kRelu:
      return z > 0 ? z : 0.0f;
    case Activation::kGelu:
      return 0.5f * z * (1.0f + std::tanh(kSqrt2OverPi * (z + kGeluCoeff * z * z * z)));
  }
  return z;
}

float activate_grad(Activation a, float z) {
  switch (a) {
    case Activation::kTanh: {
      float t = std::tanh(z);
      return 1.0f - t * t;
    }
    case Activation::kRelu:
      return z > 0 ? 1.0f : 0.0f;
    case Activation::kGelu: {
      float u = kSqrt2OverPi * (z + kGeluCoeff * z * z * z);
      float t = std::tanh(u);
      float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * z * z);
      return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * du;
    }
  }
  return 1.0f;
}

void linear_forward(const float* x, const float* w, const float* b, int64_t batch, int64_t in,
                    int64_t out, float* y) {
  for (int64_t s = 0; s < batch; ++s) {
    const float* xs = x + s * in;
    for (int64_t o = 0; o < out; ++o) {
      const float* wo = w + o * in;
      float acc = 0.0f;
      for (int64_t i = 0; i < in; ++i) acc += xs[i] * wo[i];
      y[s * out + o] = acc + b[o];
    }
  }
}

void linear_backward(const float* x, const float* w, const float* dy, int64_t batch, int64_t in,
                     int64_t out, float* gw, float* gb, float* dx) {
  for (int64_t s = 0; s < batch; ++s) {
    const float* xs = x + s * in;
    const float* dys = dy + s * out;
    for (int64_t o = 0; o < out; ++o) {
      float d = dys[o];
      gb[o] += d;
      float* gwo = gw + o * in;
      for (int64_t i = 0; i < in; ++i) gwo[i] += d * xs[i];
    }
    if (dx != nullptr) {
      float* dxs = dx + s * in;
      for (int64_t i = 0; i < in; ++i) dxs[i] = 0.0f;
      for (int64_t o = 0; o < out; ++o) {
        float d = dys[o];
        const float* wo = w + o * in;
        for (int64_t i = 0; i < in; ++i) dxs[i] += d * wo[i];
      }
    }
  }
}

}  // namespace dscore::mlp
