// Where a decoder model computes: its runner over one backend (CPU, or
// CUDA in CUDA builds) behind one interface, so the model picks the
// backend by its "device" param at creation.
#pragma once

#include <dscore/model.h>
#include <dscore/cpp/plugin.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kv_cache.h"
#include "moe/stats.h"
#include "stage_blocks.h"
#include "tokens.h"

namespace dscore::transformer {

class Compute {
 public:
  virtual ~Compute() = default;
  virtual double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                                  double loss_scale) = 0;
  // What the MoE layers did in the last pass (none in a dense model).
  virtual moe::PassStats moe_stats() const { return {}; }
  virtual void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
                       float* logits) = 0;
  // Pipeline stages (model.h boundary_bytes, stage_forward, stage_backward;
  // the runner's stage passes), UNIMPLEMENTED where the runner or its
  // backend has none.
  virtual uint64_t boundary_bytes(int64_t /*micro_batch*/) const { no_stages(); }
  virtual void stage_forward(const SplitTokens&, const dscore_pipeline_stage&, size_t,
                             const dscore_model_hooks&, const void*, void*) {
    no_stages();
  }
  virtual double stage_backward(const SplitTokens&, const dscore_pipeline_stage&, size_t,
                                const dscore_model_hooks&, double, const void*, void*) {
    no_stages();
  }
  // KV-cached generation (model.h decode; the runner's Decoder), where
  // this compute has one: a cache, and one step of new tokens through it
  // with the logits (count, vocab) at each sequence's last.
  virtual std::unique_ptr<sdk::DecodeCache> decode_cache(int64_t /*slots*/,
                                                         int64_t /*max_positions*/) {
    no_decode();
  }
  virtual void decode(sdk::DecodeCache&, const DecodeRows&, const dscore_model_hooks&, float*) {
    no_decode();
  }
  // model.h decode's call as a model plugin receives it: the batch's
  // tokens checked against the vocabulary, the logits tensor checked.
  void decode_batch(sdk::DecodeCache& cache, const dscore_decode_batch& batch,
                    const dscore_model_hooks& hooks, dscore_tensor* logits, int64_t vocab_size,
                    const char* model) {
    const DecodeRows rows = DecodeRows::of(batch, vocab_size, model);
    decode(cache, rows, hooks, decode_logits(logits, rows.count(), vocab_size, model));
  }

 protected:
  [[noreturn]] static void no_decode() {
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     "this model's compute has no KV-cached generation (it decodes on the CPU)");
  }
  [[noreturn]] static void no_stages() {
    throw sdk::Error(DSCORE_UNIMPLEMENTED,
                     "this model's compute cannot run pipeline stages (they run on the CPU)");
  }
};

// The compute of an instance made only to describe the model
// (DSCORE_CREATE_DESCRIBE_ONLY, for `dscore plan`) on "device": "cuda":
// nothing loaded, no GPU needed. A call to compute on it is the host's
// mistake, and says so.
class DescribeOnlyCompute final : public Compute {
 public:
  explicit DescribeOnlyCompute(const char* model) : model_(model) {}
  double forward_backward(const SplitTokens&, const dscore_model_hooks&, double) override {
    refuse();
  }
  void forward(const SplitTokens&, const dscore_model_hooks&, double*, float*) override {
    refuse();
  }

 private:
  [[noreturn]] void refuse() const {
    throw sdk::Error(DSCORE_FAILED_PRECONDITION,
                     model_ +
                         ": this instance was created only to describe the model "
                         "(DSCORE_CREATE_DESCRIBE_ONLY) and does not compute");
  }
  std::string model_;
};

// For one call, a backend that computes on a device stream (use_stream)
// computes on the host's (dscore_model_hooks.stream, where the host gives
// one), and on its own again after the call.
template <class Backend>
class HostStreamScope {
 public:
  HostStreamScope(Backend& backend, const dscore_model_hooks& hooks) : backend_(backend) {
    if constexpr (kStreams) {
      const bool given =
          hooks.struct_size >= offsetof(dscore_model_hooks, stream) + sizeof(hooks.stream);
      backend_.use_stream(given ? hooks.stream : nullptr);
    }
  }
  ~HostStreamScope() {
    if constexpr (kStreams) {
      try {
        backend_.use_stream(nullptr);
      } catch (...) {  // a failed device: the call's own error says so
      }
    }
  }
  HostStreamScope(const HostStreamScope&) = delete;
  HostStreamScope& operator=(const HostStreamScope&) = delete;

 private:
  static constexpr bool kStreams = requires(Backend & b) { b.use_stream(nullptr); };
  Backend& backend_;
};

// A runner's Decoder type (KV-cached generation), void where it has none.
template <class Runner, class = void>
struct DecoderOf {
  using type = void;
};
template <class Runner>
struct DecoderOf<Runner, std::void_t<typename Runner::Decoder>> {
  using type = typename Runner::Decoder;
};

// Runner<Backend> constructed from (config, params, backend), owning the
// backend (constructed from `args`).
// Its pipeline stages run one runner per activation slot, each keeping
// only the stage's blocks (stage_blocks.h; where the runner and backend
// have stage passes).
template <template <class> class Runner, class Config, class Params, class Backend>
class RunnerCompute final : public Compute {
 public:
  template <typename... BackendArgs>
  RunnerCompute(const Config& config, const Params& params, BackendArgs&&... args)
      : config_(config),
        params_(params),
        backend_(std::forward<BackendArgs>(args)...),
        runner_(config, params, backend_) {}
  double forward_backward(const SplitTokens& tokens, const dscore_model_hooks& hooks,
                          double loss_scale) override {
    const HostStreamScope<Backend> on(backend_, hooks);
    return runner_.forward_backward(tokens, hooks, loss_scale);
  }
  moe::PassStats moe_stats() const override {
    if constexpr (requires { runner_.moe_stats(); })
      return runner_.moe_stats();
    else
      return {};
  }
  void forward(const SplitTokens& tokens, const dscore_model_hooks& hooks, double* loss,
               float* logits) override {
    const HostStreamScope<Backend> on(backend_, hooks);
    runner_.forward(tokens, hooks, loss, logits);
  }

  std::unique_ptr<sdk::DecodeCache> decode_cache(int64_t slots, int64_t max_positions) override {
    if constexpr (kDecode)
      return decoder().make_cache(slots, max_positions);
    else
      no_decode();
  }
  void decode(sdk::DecodeCache& cache, const DecodeRows& rows, const dscore_model_hooks& hooks,
              float* logits) override {
    if constexpr (kDecode) {
      auto* own = dynamic_cast<typename Decoder::Cache*>(&cache);
      if (own == nullptr)
        throw sdk::Error(DSCORE_INVALID_ARGUMENT, "decode: the cache is not this instance's");
      const HostStreamScope<Backend> on(backend_, hooks);
      decoder().decode(*own, rows, hooks, logits);
    } else {
      no_decode();
    }
  }

  uint64_t boundary_bytes(int64_t micro_batch) const override {
    if constexpr (kStages)
      return static_cast<uint64_t>(runner_.boundary_elements(micro_batch)) * sizeof(Scalar);
    no_stages();
  }
  void stage_forward(const SplitTokens& tokens, const dscore_pipeline_stage& stage, size_t slot,
                     const dscore_model_hooks& hooks, const void* input, void* output) override {
    if constexpr (kStages) {
      const HostStreamScope<Backend> on(backend_, hooks);
      slot_runner(stage, slot)
          .stage_forward(tokens, stage.first_layer, stage.end_layer, hooks,
                         static_cast<const Scalar*>(input), static_cast<Scalar*>(output));
    } else {
      no_stages();
    }
  }
  double stage_backward(const SplitTokens& tokens, const dscore_pipeline_stage& stage, size_t slot,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad) override {
    if constexpr (kStages) {
      const HostStreamScope<Backend> on(backend_, hooks);
      return slot_runner(stage, slot)
          .stage_backward(tokens, stage.first_layer, stage.end_layer, hooks, loss_scale,
                          static_cast<const Scalar*>(output_grad),
                          static_cast<Scalar*>(input_grad));
    } else {
      no_stages();
    }
  }

 private:
  using Scalar = typename Backend::Scalar;
  static constexpr bool kStages =
      requires(Runner<Backend> & r, const SplitTokens& t, const dscore_model_hooks& h, Backend& b) {
    r.stage_forward(t, size_t{}, size_t{}, h, static_cast<const Scalar*>(nullptr),
                    static_cast<Scalar*>(nullptr));
    b.copy_from_host(static_cast<Scalar*>(nullptr), static_cast<const Scalar*>(nullptr), int64_t{});
  };

  // The runner's decoder for a host-memory backend (made on first use).
  using Decoder = typename DecoderOf<Runner<Backend>>::type;
  static constexpr bool kDecode = requires { Backend::kHostMemory; }
  &&!std::is_void_v<Decoder>;
  auto& decoder() {
    if (!decoder_) decoder_ = std::make_unique<Decoder>(config_, params_, backend_);
    return *decoder_;
  }

  // Slot `slot`'s runner, made for the stage's blocks (layer l + 1 is block
  // l) on first use and again when the stage changes.
  Runner<Backend>& slot_runner(const dscore_pipeline_stage& stage, size_t slot) {
    if (slot >= slots_.size()) slots_.resize(slot + 1);
    const auto [lo, hi] = stage_blocks(stage, config_.layer_count() - 2);
    SlotRunner& s = slots_[slot];
    if (s.runner == nullptr || s.lo != lo || s.hi != hi) {
      s.runner = std::make_unique<Runner<Backend>>(config_, params_, backend_, lo, hi);
      s.lo = lo;
      s.hi = hi;
    }
    return *s.runner;
  }
  struct SlotRunner {
    std::unique_ptr<Runner<Backend>> runner;
    int64_t lo = 0, hi = 0;
  };

  const Config& config_;
  const Params& params_;
  Backend backend_;
  Runner<Backend> runner_;
  std::vector<SlotRunner> slots_;
  std::conditional_t<kDecode, std::unique_ptr<Decoder>, std::nullptr_t> decoder_{};
};

}  // namespace dscore::transformer
