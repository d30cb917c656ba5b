// The MLP's numerical kernels on dense fp32 row-major buffers: activations
// and the forward/backward of one linear layer. Plain loops (the model is for
// tests and examples; the gpt model carries the fast kernels).
#pragma once

#include <cstdint>

namespace dscore::mlp {

enum class Activation { kTanh, kRelu, kGelu };

float activate(Activation a, float z);
// d activate / d z at z.
float activate_grad(Activation a, float z);

// y (B, out) = x (B, in) * w^T + b;  w (out, in), b (out).
void linear_forward(const float* x, const float* w, const float* b, int64_t batch, int64_t in,
                    int64_t out, float* y);

// Given dy (B, out): gw (out, in) += dy^T x; gb (out) += column sums of dy;
// dx (B, in) = dy * w when dx is not null.
void linear_backward(const float* x, const float* w, const float* dy, int64_t batch, int64_t in,
                     int64_t out, float* gw, float* gb, float* dx);

}  // namespace dscore::mlp
