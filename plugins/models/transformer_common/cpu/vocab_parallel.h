// The LM head with cross-entropy over a vocabulary split across the
// tensor-parallel group (Megatron's vocab-parallel cross-entropy): each rank
// multiplies by its rows of the head's weight only, so no rank ever holds a
// full-vocabulary logit row. Per block of rows the group agrees on each
// row's maximum logit (a MAX reduction), then sums the exponentials and the
// target's logit (which one rank holds), so every rank gets the same loss
// and softmax; each rank's input gradient is its rows' part, summed over the
// group at the end. Weight gradients accumulate (+=), as linear.h's.
#pragma once

#include <cstdint>
#include <functional>

namespace dscore::transformer::cpu {

// The group's reductions, in place over n values, identical on every rank.
template <typename T>
struct GroupReductions {
  std::function<void(double*, int64_t)> max;
  std::function<void(double*, int64_t)> sum;
  std::function<void(T*, int64_t)> sum_values;
};

// x (N, C) the final hidden states; w (V_local, C) this rank's vocabulary
// rows [v0, v0 + V_local) of the head; targets are whole-vocabulary ids (<
// 0: not counted). V_whole (the whole vocabulary) sets the rows per block,
// so every rank takes the same number of turns. With dx non-null: dx = the
// gradient of sum_i grad_scale * loss_i at x (whole, after the group's sum)
// and dw += this rank's rows' gradient. Returns the loss summed over the
// counted rows (the same on every rank).
template <typename T>
double vocab_parallel_lm_head(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                              int64_t N, int64_t C, int64_t V_local, int64_t v0, int64_t V_whole,
                              double grad_scale, const GroupReductions<T>& group);

}  // namespace dscore::transformer::cpu
