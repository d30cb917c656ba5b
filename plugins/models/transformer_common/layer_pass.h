// One layer's turn in a model runner's pass through the host hooks
// (model.h): acquire it, lend its parameters (and gradient accumulators) to
// the work, add the gradients into the views, say grads_ready when this is
// the layer's last backward acquire, release. Written once for the gpt and
// llama runners; an exception releases the layer (sdk::AcquiredLayer).
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/model.hpp>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace dscore::transformer {

// The views' flags the backend asks for (DSCORE_VIEWS_*, model.h): a
// backend that computes on the host's stream takes views ready in its order.
template <class Backend>
uint32_t view_flags(const Backend& backend) {
  if constexpr (requires { backend.view_flags(); })
    return backend.view_flags();
  else
    return 0;
}

// gemm_weights (or nullptr): which of the layer's parameters only the
// linears read, as their weights; the backend may then skip making fp32
// copies of them where the linears multiply by 16-bit views
// (HostBackend::Params), nor zeroing their gradients' copies before the
// linears' weight-gradient products overwrite them (HostBackend::Grads).

// fn(params) with layer `index` acquired for forward.
template <class Backend, class Fn>
void forward_layer(const dscore_model_hooks& hooks, size_t index,
                   const std::vector<int64_t>& numels, Backend& backend, Fn&& fn,
                   const std::vector<bool>* gemm_weights = nullptr) {
  sdk::AcquiredLayer layer(hooks, index, DSCORE_ACQUIRE_FORWARD, numels.size(),
                           view_flags(backend));
  const auto params = backend.load_params(layer.views(), numels, gemm_weights);
  fn(params);
  backend.finish_reads(params);  // queued work may read views in place
  layer.release();
}

enum class GradsReady : bool { kNo = false, kYes = true };

// fn(params, grads) with layer `index` acquired for backward; the
// gradients are committed after fn (commit returns when the work is done),
// then grads_ready when `ready`.
template <class Backend, class Fn>
void backward_layer(const dscore_model_hooks& hooks, size_t index,
                    const std::vector<int64_t>& numels, Backend& backend, GradsReady ready, Fn&& fn,
                    const std::vector<bool>* gemm_weights = nullptr) {
  sdk::AcquiredLayer layer(hooks, index, DSCORE_ACQUIRE_BACKWARD, numels.size(),
                           view_flags(backend));
  const auto params = backend.load_params(layer.views(), numels, gemm_weights);
  auto grads = backend.grads(layer.views(), numels, gemm_weights);
  fn(params, grads);
  grads.commit();
  if (ready == GradsReady::kYes) layer.grads_ready();
  layer.release();
}

// gemm_weights of the block functions below: one vector for every block,
// or a callable giving block l's (a model whose blocks differ).
template <class Weights>
const std::vector<bool>* weights_of_block(const Weights& weights, int64_t l) {
  if constexpr (std::is_invocable_v<const Weights&, int64_t>)
    return &weights(l);
  else
    return (void)l, &weights;
}

// The blocks' turns: block l is layer l + 1 (after the embeddings), its
// linears' weights named by gemm_weights. Forward in order, fn(l, params);
// backward last block first, fn(l, params, grads), each block's gradients
// ready after its turn.
// The _range forms take blocks [lo, hi) only (a pipeline stage's).
template <class Backend, class Weights, class Fn>
void forward_block_range(const dscore_model_hooks& hooks, int64_t lo, int64_t hi,
                         const std::vector<std::vector<int64_t>>& numels, Backend& backend,
                         const Weights& gemm_weights, Fn&& fn) {
  for (int64_t l = lo; l < hi; ++l) {
    const size_t index = static_cast<size_t>(l + 1);
    forward_layer(
        hooks, index, numels[index], backend, [&](const auto& p) { fn(l, p); },
        weights_of_block(gemm_weights, l));
  }
}
template <class Backend, class Weights, class Fn>
void forward_block_layers(const dscore_model_hooks& hooks, int64_t blocks,
                          const std::vector<std::vector<int64_t>>& numels, Backend& backend,
                          const Weights& gemm_weights, Fn&& fn) {
  forward_block_range(hooks, 0, blocks, numels, backend, gemm_weights, std::forward<Fn>(fn));
}
template <class Backend, class Weights, class Fn>
void backward_block_range(const dscore_model_hooks& hooks, int64_t lo, int64_t hi,
                          const std::vector<std::vector<int64_t>>& numels, Backend& backend,
                          const Weights& gemm_weights, Fn&& fn) {
  for (int64_t l = hi - 1; l >= lo; --l) {
    const size_t index = static_cast<size_t>(l + 1);
    backward_layer(
        hooks, index, numels[index], backend, GradsReady::kYes,
        [&](const auto& p, auto& g) { fn(l, p, g); }, weights_of_block(gemm_weights, l));
  }
}
template <class Backend, class Weights, class Fn>
void backward_block_layers(const dscore_model_hooks& hooks, int64_t blocks,
                           const std::vector<std::vector<int64_t>>& numels, Backend& backend,
                           const Weights& gemm_weights, Fn&& fn) {
  backward_block_range(hooks, 0, blocks, numels, backend, gemm_weights, std::forward<Fn>(fn));
}

// The same without reading the parameters (fn(grads)): an embedding's
// last backward turn needs only its gradient.
template <class Backend, class Fn>
void backward_layer_grads(const dscore_model_hooks& hooks, size_t index,
                          const std::vector<int64_t>& numels, Backend& backend, GradsReady ready,
                          Fn&& fn) {
  sdk::AcquiredLayer layer(hooks, index, DSCORE_ACQUIRE_BACKWARD, numels.size(),
                           view_flags(backend));
  auto grads = backend.grads(layer.views(), numels);
  fn(grads);
  grads.commit();
  if (ready == GradsReady::kYes) layer.grads_ready();
  layer.release();
}

}  // namespace dscore::transformer
