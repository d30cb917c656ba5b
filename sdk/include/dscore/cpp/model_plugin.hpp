// Optional header-only adapter for model plugins written in C++: a class
// that is its description, initialisation and forward/backward becomes a
// dscore_model_vtable and a descriptor.
//
//   class MyModel : public sdk::Instance {
//    public:
//     MyModel(sdk::HostRef host, const sdk::Params& p);
//     const dscore_model_description* description() const;
//     void init_param(size_t index, int64_t offset, int64_t count, dscore_tensor* out) const;
//     double forward_backward(const dscore_batch* batch, const dscore_model_hooks& hooks,
//                             double loss_scale);                 // returns the loss
//     // optional:
//     void forward(const dscore_batch* batch, const dscore_model_hooks& hooks, double* loss,
//                  dscore_tensor* output);
//     void synthetic_batch(uint64_t seed, int64_t first_sample, const dscore_batch* out) const;
//     double layer_flops(size_t layer, int64_t batch_size) const;
//     uint64_t activation_bytes(int64_t micro_batch, bool checkpointing) const;
//     // the same for the parameter and gradient dtypes the host lends
//     uint64_t activation_bytes(int64_t micro_batch, bool checkpointing,
//                               dscore_dtype param_dtype, dscore_dtype grad_dtype) const;
//     // Hugging Face export (both or neither): the name (alive until destroy)
//     // and layout of a parameter, and config.json's text.
//     dscore_hf_tensor hf_tensor(size_t index) const;
//     std::string hf_config(dscore_dtype dtype) const;
//     // pipeline stages (all three or none): the boundary's bytes, and one
//     // stage's forward and backward of a micro-batch (backward returns the
//     // loss on the last stage, anything elsewhere)
//     uint64_t boundary_bytes(size_t layer, int64_t micro_batch, dscore_dtype dtype) const;
//     void stage_forward(const dscore_pipeline_stage& stage, size_t slot,
//                        const dscore_batch* batch, const dscore_model_hooks& hooks,
//                        const void* input, void* output);
//     double stage_backward(const dscore_pipeline_stage& stage, size_t slot,
//                           const dscore_batch* batch, const dscore_model_hooks& hooks,
//                           double loss_scale, const void* output_grad, void* input_grad);
//     // a stage's activation memory (with the three above): one slot's, and
//     // what its slots share
//     sdk::StageMemory stage_activation_bytes(const dscore_pipeline_stage& stage,
//                                             int64_t micro_batch, bool checkpointing,
//                                             dscore_dtype param_dtype,
//                                             dscore_dtype grad_dtype) const;
//     // what its own collectives move per micro-batch through the layers
//     // (model.h collective_bytes; the struct_size is set here)
//     dscore_model_collectives collective_bytes(const dscore_pipeline_stage& layers,
//                                               int64_t micro_batch, bool checkpointing) const;
//     // what the last pass measured besides its loss (model.h metrics; the
//     // names owned by the model, the struct_size set here)
//     std::vector<dscore_model_metric> metrics() const;
//     // KV-cached generation (all three or none; model.h decode): a cache
//     // (a class derived from sdk::DecodeCache), one step on it (the batch
//     // checked against the cache's slots and positions first; logits the
//     // host's (count, vocab) fp32 tensor), and a cache's bytes
//     std::unique_ptr<sdk::DecodeCache> decode_cache(int64_t slots, int64_t max_positions,
//                                                    dscore_dtype param_dtype);
//     void decode(sdk::DecodeCache& cache, const dscore_decode_batch& batch,
//                 const dscore_model_hooks& hooks, dscore_tensor* logits);
//     uint64_t decode_cache_bytes(int64_t slots, int64_t max_positions,
//                                 dscore_dtype param_dtype) const;
//   };
//   const dscore_plugin_descriptor kMine = sdk::model_descriptor<MyModel>(
//       "my_model", "1.0", "one line", DSCORE_CAP_CPU | DSCORE_CAP_F32, kSchema);
//
// The hooks are checked before the class sees them (acquire and release,
// plus grads_ready for forward_backward). Nothing here crosses the ABI.
#ifndef DSCORE_CPP_MODEL_PLUGIN_HPP_
#define DSCORE_CPP_MODEL_PLUGIN_HPP_

#include <dscore/model.h>
#include <dscore/cpp/instance.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dscore::sdk {

// The hooks, checked: acquire and release always, grads_ready for backward.
inline const dscore_model_hooks& checked_hooks(const dscore_model_hooks* hooks, bool backward) {
  if (hooks == nullptr || hooks->acquire == nullptr || hooks->release == nullptr ||
      (backward && (!DSCORE_HAS_FIELD(hooks, dscore_model_hooks, grads_ready) ||
                    hooks->grads_ready == nullptr)))
    throw Error(DSCORE_INVALID_ARGUMENT, "model hooks are NULL or incomplete");
  return *hooks;
}

// A model's KV cache (model.h dscore_decode_cache): `slots` sequences of
// up to `max_positions` tokens. Models derive their cache from it.
class DecodeCache {
 public:
  DecodeCache(int64_t slots, int64_t max_positions)
      : slots_(slots), max_positions_(max_positions) {}
  virtual ~DecodeCache() = default;
  DecodeCache(const DecodeCache&) = delete;
  DecodeCache& operator=(const DecodeCache&) = delete;
  int64_t slots() const { return slots_; }
  int64_t max_positions() const { return max_positions_; }

 private:
  int64_t slots_, max_positions_;
};

// The decode batch, checked against the cache: arrays set, slots distinct
// and in range, lengths >= 1, positions from 0 with the new tokens inside
// max_positions.
inline const dscore_decode_batch& checked_decode_batch(const dscore_decode_batch* batch,
                                                       const DecodeCache& cache) {
  if (batch == nullptr || !DSCORE_HAS_FIELD(batch, dscore_decode_batch, tokens) ||
      batch->count == 0 || batch->slots == nullptr || batch->positions == nullptr ||
      batch->lengths == nullptr || batch->tokens == nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, "decode: the batch is NULL, empty or incomplete");
  std::vector<bool> taken(static_cast<size_t>(cache.slots()), false);
  for (size_t i = 0; i < batch->count; ++i) {
    const int32_t slot = batch->slots[i];
    const int64_t position = batch->positions[i], length = batch->lengths[i];
    if (slot < 0 || slot >= cache.slots() || taken[static_cast<size_t>(slot)])
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "decode: slot " + std::to_string(slot) + " is outside the cache's " +
                      std::to_string(cache.slots()) + " slots or named twice in one batch");
    taken[static_cast<size_t>(slot)] = true;
    if (position < 0 || length < 1 || position + length > cache.max_positions())
      throw Error(DSCORE_OUT_OF_RANGE, "decode: sequence " + std::to_string(i) + "'s tokens " +
                                           std::to_string(position) + " .. " +
                                           std::to_string(position + length - 1) +
                                           " do not fit the cache's " +
                                           std::to_string(cache.max_positions()) + " positions");
  }
  return *batch;
}

namespace detail {
template <typename T, typename = void>
struct HasForward : std::false_type {};
template <typename T>
struct HasForward<
    T, std::void_t<decltype(std::declval<T&>().forward(
           static_cast<const dscore_batch*>(nullptr), std::declval<const dscore_model_hooks&>(),
           static_cast<double*>(nullptr), static_cast<dscore_tensor*>(nullptr)))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasSyntheticBatch : std::false_type {};
template <typename T>
struct HasSyntheticBatch<T, std::void_t<decltype(std::declval<const T&>().synthetic_batch(
                                uint64_t{}, int64_t{}, static_cast<const dscore_batch*>(nullptr)))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasLayerFlops : std::false_type {};
template <typename T>
struct HasLayerFlops<
    T, std::void_t<decltype(std::declval<const T&>().layer_flops(size_t{}, int64_t{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasActivationBytes : std::false_type {};
template <typename T>
struct HasActivationBytes<
    T, std::void_t<decltype(std::declval<const T&>().activation_bytes(int64_t{}, bool{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasActivationBytesFor : std::false_type {};
template <typename T>
struct HasActivationBytesFor<T, std::void_t<decltype(std::declval<const T&>().activation_bytes(
                                    int64_t{}, bool{}, dscore_dtype{}, dscore_dtype{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasHfExport : std::false_type {};
template <typename T>
struct HasHfExport<T, std::void_t<decltype(std::declval<const T&>().hf_tensor(size_t{})),
                                  decltype(std::declval<const T&>().hf_config(dscore_dtype{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasPipelineStages : std::false_type {};
template <typename T>
struct HasPipelineStages<
    T, std::void_t<
           decltype(std::declval<const T&>().boundary_bytes(size_t{}, int64_t{}, dscore_dtype{})),
           decltype(std::declval<T&>().stage_forward(
               std::declval<const dscore_pipeline_stage&>(), size_t{},
               static_cast<const dscore_batch*>(nullptr), std::declval<const dscore_model_hooks&>(),
               static_cast<const void*>(nullptr), static_cast<void*>(nullptr))),
           decltype(std::declval<T&>().stage_backward(
               std::declval<const dscore_pipeline_stage&>(), size_t{},
               static_cast<const dscore_batch*>(nullptr), std::declval<const dscore_model_hooks&>(),
               double{}, static_cast<const void*>(nullptr), static_cast<void*>(nullptr)))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasStageActivationBytes : std::false_type {};
template <typename T>
struct HasStageActivationBytes<T,
                               std::void_t<decltype(std::declval<const T&>().stage_activation_bytes(
                                   std::declval<const dscore_pipeline_stage&>(), int64_t{}, bool{},
                                   dscore_dtype{}, dscore_dtype{}))>> : std::true_type {};
template <typename T, typename = void>
struct HasCollectiveBytes : std::false_type {};
template <typename T>
struct HasCollectiveBytes<T, std::void_t<decltype(std::declval<const T&>().collective_bytes(
                                 std::declval<const dscore_pipeline_stage&>(), int64_t{}, bool{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasDecode : std::false_type {};
template <typename T>
struct HasDecode<
    T, std::void_t<decltype(std::declval<T&>().decode_cache(int64_t{}, int64_t{}, dscore_dtype{})),
                   decltype(std::declval<T&>().decode(std::declval<DecodeCache&>(),
                                                      std::declval<const dscore_decode_batch&>(),
                                                      std::declval<const dscore_model_hooks&>(),
                                                      static_cast<dscore_tensor*>(nullptr))),
                   decltype(std::declval<const T&>().decode_cache_bytes(
                       int64_t{}, int64_t{}, dscore_dtype{}))>> : std::true_type {};
template <typename T, typename = void>
struct HasMetrics : std::false_type {};
template <typename T>
struct HasMetrics<T, std::void_t<decltype(std::declval<const T&>().metrics())>> : std::true_type {};
}  // namespace detail

// A pipeline stage's activation memory (model.h stage_activation_bytes).
struct StageMemory {
  uint64_t slot_bytes = 0;    // one activation slot's
  uint64_t shared_bytes = 0;  // what the stage's slots share
};

// The stage, checked: inside `layer_count` layers, not empty.
inline const dscore_pipeline_stage& checked_stage(const dscore_pipeline_stage* stage,
                                                  size_t layer_count) {
  if (stage == nullptr || stage->first_layer >= stage->end_layer || stage->end_layer > layer_count)
    throw Error(DSCORE_INVALID_ARGUMENT,
                stage == nullptr
                    ? std::string("the pipeline stage is NULL")
                    : "pipeline stage [" + std::to_string(stage->first_layer) + ", " +
                          std::to_string(stage->end_layer) + ") is empty or outside the model's " +
                          std::to_string(layer_count) + " layers");
  return *stage;
}

template <typename T>
struct ModelPlugin {
  using S = Shim<dscore_model, T>;

  static dscore_status create(const dscore_create_args* args, dscore_model** out) {
    return S::create(args, out);
  }
  static dscore_status describe(const dscore_model* h, const dscore_model_description** out) {
    return S::call(h, [&](const T& t) { *out = t.description(); });
  }
  static dscore_status init_param(const dscore_model* h, size_t index, int64_t offset,
                                  int64_t count, dscore_tensor* out) {
    return S::call(h, [&](const T& t) { t.init_param(index, offset, count, out); });
  }
  static dscore_status forward_backward(dscore_model* h, const dscore_batch* batch,
                                        const dscore_model_hooks* hooks, double loss_scale,
                                        double* loss) {
    return S::call(h, [&](T& t) {
      const double value = t.forward_backward(batch, checked_hooks(hooks, true), loss_scale);
      if (loss != nullptr) *loss = value;
    });
  }
  static dscore_status forward(dscore_model* h, const dscore_batch* batch,
                               const dscore_model_hooks* hooks, double* loss,
                               dscore_tensor* output) {
    return S::call(h, [&](T& t) { t.forward(batch, checked_hooks(hooks, false), loss, output); });
  }
  static dscore_status synthetic_batch(const dscore_model* h, uint64_t seed, int64_t first_sample,
                                       const dscore_batch* out) {
    return S::call(h, [&](const T& t) { t.synthetic_batch(seed, first_sample, out); });
  }
  static dscore_status layer_flops(const dscore_model* h, size_t layer, int64_t batch_size,
                                   double* forward_flops) {
    return S::call(h, [&](const T& t) { *forward_flops = t.layer_flops(layer, batch_size); });
  }

  static dscore_status activation_bytes(const dscore_model* h, int64_t micro_batch,
                                        int32_t checkpointing, uint64_t* peak_bytes) {
    return S::call(
        h, [&](const T& t) { *peak_bytes = t.activation_bytes(micro_batch, checkpointing != 0); });
  }

  static dscore_status activation_bytes_for(const dscore_model* h, int64_t micro_batch,
                                            int32_t checkpointing, dscore_dtype param_dtype,
                                            dscore_dtype grad_dtype, uint64_t* peak_bytes) {
    return S::call(h, [&](const T& t) {
      *peak_bytes = t.activation_bytes(micro_batch, checkpointing != 0, param_dtype, grad_dtype);
    });
  }

  static dscore_status hf_tensor(const dscore_model* h, size_t index, dscore_hf_tensor* out) {
    return S::call(h, [&](const T& t) {
      if (out == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "hf_tensor: out is NULL");
      const dscore_hf_tensor value = t.hf_tensor(index);
      // Only the fields the caller's struct has.
      if (DSCORE_HAS_FIELD(out, dscore_hf_tensor, name)) out->name = value.name;
      if (DSCORE_HAS_FIELD(out, dscore_hf_tensor, transpose)) out->transpose = value.transpose;
    });
  }
  static dscore_status hf_config(const dscore_model* h, dscore_dtype dtype, char* buffer,
                                 size_t capacity, size_t* length) {
    return S::call(h, [&](const T& t) {
      if (length == nullptr || (buffer == nullptr && capacity > 0))
        throw Error(DSCORE_INVALID_ARGUMENT, "hf_config: length or buffer is NULL");
      const std::string text = t.hf_config(dtype);
      *length = text.size();
      if (capacity > text.size()) std::memcpy(buffer, text.c_str(), text.size() + 1);
    });
  }

  static dscore_status boundary_bytes(const dscore_model* h, size_t layer, int64_t micro_batch,
                                      dscore_dtype dtype, uint64_t* bytes) {
    return S::call(h, [&](const T& t) {
      if (bytes == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "boundary_bytes: bytes is NULL");
      *bytes = t.boundary_bytes(layer, micro_batch, dtype);
    });
  }
  static dscore_status stage_forward(dscore_model* h, const dscore_pipeline_stage* stage,
                                     size_t slot, const dscore_batch* batch,
                                     const dscore_model_hooks* hooks, const void* input,
                                     void* output) {
    return S::call(h, [&](T& t) {
      const dscore_pipeline_stage& s = checked_stage(stage, t.description()->layer_count);
      t.stage_forward(s, slot, batch, checked_hooks(hooks, false), input, output);
    });
  }
  static dscore_status stage_backward(dscore_model* h, const dscore_pipeline_stage* stage,
                                      size_t slot, const dscore_batch* batch,
                                      const dscore_model_hooks* hooks, double loss_scale,
                                      const void* output_grad, void* input_grad, double* loss) {
    return S::call(h, [&](T& t) {
      const dscore_pipeline_stage& s = checked_stage(stage, t.description()->layer_count);
      const double value = t.stage_backward(s, slot, batch, checked_hooks(hooks, true), loss_scale,
                                            output_grad, input_grad);
      if (loss != nullptr && s.end_layer == t.description()->layer_count) *loss = value;
    });
  }

  static dscore_status stage_activation_bytes(const dscore_model* h,
                                              const dscore_pipeline_stage* stage,
                                              int64_t micro_batch, int32_t checkpointing,
                                              dscore_dtype param_dtype, dscore_dtype grad_dtype,
                                              uint64_t* slot_bytes, uint64_t* shared_bytes) {
    return S::call(h, [&](const T& t) {
      if (slot_bytes == nullptr || shared_bytes == nullptr)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    "stage_activation_bytes: slot_bytes or shared_bytes is NULL");
      const dscore_pipeline_stage& s = checked_stage(stage, t.description()->layer_count);
      const StageMemory m =
          t.stage_activation_bytes(s, micro_batch, checkpointing != 0, param_dtype, grad_dtype);
      *slot_bytes = m.slot_bytes;
      *shared_bytes = m.shared_bytes;
    });
  }

  static dscore_status collective_bytes(const dscore_model* h, const dscore_pipeline_stage* stage,
                                        int64_t micro_batch, int32_t checkpointing,
                                        dscore_model_collectives* out) {
    return S::call(h, [&](const T& t) {
      if (out == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "collective_bytes: out is NULL");
      const dscore_pipeline_stage& s = checked_stage(stage, t.description()->layer_count);
      const uint32_t size = out->struct_size;
      const dscore_model_collectives c = t.collective_bytes(s, micro_batch, checkpointing != 0);
      std::memcpy(out, &c, std::min<size_t>(size, sizeof c));
      out->struct_size = size;
    });
  }

  static dscore_status metrics(const dscore_model* h, dscore_model_metric* out, size_t capacity,
                               size_t* count) {
    return S::call(h, [&](const T& t) {
      if (count == nullptr || (out == nullptr && capacity > 0))
        throw Error(DSCORE_INVALID_ARGUMENT, "metrics: count or out is NULL");
      const auto values = t.metrics();
      *count = values.size();
      for (size_t i = 0; i < values.size() && i < capacity; ++i) {
        const uint32_t size = out[i].struct_size;
        dscore_model_metric m = values[i];
        std::memcpy(&out[i], &m, std::min<size_t>(size, sizeof m));
        out[i].struct_size = size;
      }
    });
  }

  static dscore_status decode_cache_create(dscore_model* h, int64_t slots, int64_t max_positions,
                                           dscore_dtype param_dtype, dscore_decode_cache** out) {
    return S::call(h, [&](T& t) {
      if (out == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "decode_cache_create: out is NULL");
      if (slots < 1 || max_positions < 1)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    "decode_cache_create: slots and max_positions must be >= 1");
      std::unique_ptr<DecodeCache> cache = t.decode_cache(slots, max_positions, param_dtype);
      *out = reinterpret_cast<dscore_decode_cache*>(cache.release());
    });
  }
  static void decode_cache_destroy(dscore_model* h, dscore_decode_cache* cache) {
    if (cache == nullptr) return;
    S::call(h, [&](T&) { delete reinterpret_cast<DecodeCache*>(cache); });
  }
  static dscore_status decode(dscore_model* h, dscore_decode_cache* cache,
                              const dscore_decode_batch* batch, const dscore_model_hooks* hooks,
                              dscore_tensor* logits) {
    return S::call(h, [&](T& t) {
      if (cache == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "decode: the cache is NULL");
      DecodeCache& c = *reinterpret_cast<DecodeCache*>(cache);
      t.decode(c, checked_decode_batch(batch, c), checked_hooks(hooks, false), logits);
    });
  }
  static dscore_status decode_cache_bytes(const dscore_model* h, int64_t slots,
                                          int64_t max_positions, dscore_dtype param_dtype,
                                          uint64_t* bytes) {
    return S::call(h, [&](const T& t) {
      if (bytes == nullptr)
        throw Error(DSCORE_INVALID_ARGUMENT, "decode_cache_bytes: bytes is NULL");
      *bytes = t.decode_cache_bytes(slots, max_positions, param_dtype);
    });
  }

  static dscore_model_vtable make_vtable() {
    dscore_model_vtable vt{};
    vt.struct_size = sizeof vt;
    vt.create = &create;
    vt.destroy = &S::destroy;
    vt.describe = &describe;
    vt.init_param = &init_param;
    vt.forward_backward = &forward_backward;
    if constexpr (detail::HasForward<T>::value) vt.forward = &forward;
    if constexpr (detail::HasSyntheticBatch<T>::value) vt.synthetic_batch = &synthetic_batch;
    if constexpr (detail::HasLayerFlops<T>::value) vt.layer_flops = &layer_flops;
    if constexpr (detail::HasActivationBytes<T>::value) vt.activation_bytes = &activation_bytes;
    if constexpr (detail::HasActivationBytesFor<T>::value)
      vt.activation_bytes_for = &activation_bytes_for;
    if constexpr (detail::HasHfExport<T>::value) {
      vt.hf_tensor = &hf_tensor;
      vt.hf_config = &hf_config;
    }
    if constexpr (detail::HasPipelineStages<T>::value) {
      vt.boundary_bytes = &boundary_bytes;
      vt.stage_forward = &stage_forward;
      vt.stage_backward = &stage_backward;
      if constexpr (detail::HasStageActivationBytes<T>::value)
        vt.stage_activation_bytes = &stage_activation_bytes;
    }
    if constexpr (detail::HasCollectiveBytes<T>::value) vt.collective_bytes = &collective_bytes;
    if constexpr (detail::HasMetrics<T>::value) vt.metrics = &metrics;
    if constexpr (detail::HasDecode<T>::value) {
      vt.decode_cache_create = &decode_cache_create;
      vt.decode_cache_destroy = &decode_cache_destroy;
      vt.decode = &decode;
      vt.decode_cache_bytes = &decode_cache_bytes;
    }
    return vt;
  }
  static inline const dscore_model_vtable vtable = make_vtable();
};

// The descriptor of model class T.
template <typename T>
dscore_plugin_descriptor model_descriptor(const char* name, const char* version,
                                          const char* description, uint64_t capabilities,
                                          const char* params_schema) {
  return {sizeof(dscore_plugin_descriptor),
          DSCORE_KIND_MODEL,
          name,
          version,
          description,
          capabilities,
          params_schema,
          &ModelPlugin<T>::vtable};
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_MODEL_PLUGIN_HPP_
