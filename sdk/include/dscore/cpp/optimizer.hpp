// Optional header-only helpers for optimizer plugins written in C++: the
// hyper-parameters of one step() with each field's documented default applied
// (DSCORE_HAS_FIELD), and the checks every element-wise optimizer makes on the
// tensors it is handed, with messages that name the tensor. Nothing here
// crosses the ABI; problems are thrown as sdk::Error for sdk::guard().
#ifndef DSCORE_CPP_OPTIMIZER_HPP_
#define DSCORE_CPP_OPTIMIZER_HPP_

#include <dscore/optimizer.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/plugin.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dscore::sdk {

// Shortest text that reads back as v: messages show the value the user wrote.
inline std::string format_number(double v) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, result.ptr);
}

// Betas and similar coefficients must lie in [0, 1).
inline void check_beta(double beta, const std::string& what) {
  if (!(beta >= 0.0 && beta < 1.0))
    throw Error(DSCORE_INVALID_ARGUMENT, what + " = " + format_number(beta) +
                                             " is out of range: each beta must be in [0, 1)");
}

// "betas" given as a list of exactly two values in [0, 1).
inline void check_betas(const std::vector<double>& betas) {
  if (betas.size() != 2)
    throw Error(
        DSCORE_INVALID_ARGUMENT,
        "betas must be a list of two numbers [beta1, beta2], got " + std::to_string(betas.size()));
  check_beta(betas[0], "betas[0]");
  check_beta(betas[1], "betas[1]");
}

inline void check_non_negative(double value, const char* name) {
  if (!(value >= 0.0))
    throw Error(DSCORE_INVALID_ARGUMENT,
                std::string(name) + " = " + format_number(value) + " must be >= 0");
}

// The hyper-parameters of one step() call, every field readable whatever
// the host's struct_size: beta1/beta2 are the scheduler's overrides when
// the mask says so, else the configured values passed in.
struct StepHparams {
  double lr = 0;
  uint32_t override_mask = 0;
  double beta1 = 0;
  double beta2 = 0;
  double weight_decay_multiplier = 1;
  int64_t step = 0;
  double grad_scale = 1;
  uint32_t group_flags = 0;  // DSCORE_OPTIMIZER_GROUP_* (ABI 1.2; 0 from older hosts)
};

// 1 - beta^step as DeepSpeed's fused kernels compute it: beta is the fp32
// value the update uses, raised in double, the difference rounded to fp32
// once. (Raising the double beta gives a correction about 6e-6 relatively
// off DeepSpeed's in the first steps.)
inline float fp32_bias_correction(float beta, int64_t step) {
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(step)));
}

inline StepHparams read_hparams(const dscore_optimizer_step_args* args, double configured_beta1,
                                double configured_beta2) {
  if (args == nullptr || args->hparams == nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, "step: hparams is NULL");
  const dscore_optimizer_hparams* h = args->hparams;
  using H = dscore_optimizer_hparams;
  StepHparams out;
  out.lr = h->lr;
  out.override_mask = DSCORE_HAS_FIELD(h, H, override_mask) ? h->override_mask : 0u;
  out.beta1 = (out.override_mask & DSCORE_HPARAM_BETA1) && DSCORE_HAS_FIELD(h, H, beta1)
                  ? h->beta1
                  : configured_beta1;
  out.beta2 = (out.override_mask & DSCORE_HPARAM_BETA2) && DSCORE_HAS_FIELD(h, H, beta2)
                  ? h->beta2
                  : configured_beta2;
  out.weight_decay_multiplier =
      DSCORE_HAS_FIELD(h, H, weight_decay_multiplier) ? h->weight_decay_multiplier : 1.0;
  out.step = DSCORE_HAS_FIELD(h, H, step) ? h->step : 0;
  out.grad_scale = DSCORE_HAS_FIELD(h, H, grad_scale) ? h->grad_scale : 1.0;
  out.group_flags = DSCORE_HAS_FIELD(h, H, group_flags) ? h->group_flags : 0u;
  return out;
}

// A step's hyper-parameters with the scheduler's beta overrides checked
// (each in [0, 1)) and, when `one_based` (the step count enters the math,
// as bias correction does), hparams->step >= 1.
inline StepHparams read_checked_hparams(const dscore_optimizer_step_args* args,
                                        double configured_beta1, double configured_beta2,
                                        bool one_based) {
  const StepHparams h = read_hparams(args, configured_beta1, configured_beta2);
  check_beta(h.beta1, "hparams->beta1 (scheduler override)");
  check_beta(h.beta2, "hparams->beta2 (scheduler override)");
  if (one_based && h.step < 1)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "step: hparams->step = " + std::to_string(h.step) + " must be >= 1 (1-based)");
  return h;
}

// The parameters every Adam-family optimizer (Adam, LAMB, 1-bit Adam) reads
// the same way: amsgrad refused (`amsgrad_why` says why, in DeepSpeed's
// terms), lr >= 0, betas in [0, 1), eps >= 0, weight_decay.
struct AdamFamilyParams {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};
template <typename Params>
AdamFamilyParams read_adam_family(const Params& p, const std::string& amsgrad_why) {
  if (p.boolean("amsgrad"))
    throw Error(DSCORE_INVALID_ARGUMENT, "amsgrad is not supported (" + amsgrad_why +
                                             "); remove \"amsgrad\" or set it to false");
  check_non_negative(p.number("lr"), "lr");
  const std::vector<double> betas = p.numbers("betas");
  check_betas(betas);
  AdamFamilyParams out;
  out.beta1 = betas[0];
  out.beta2 = betas[1];
  out.eps = p.number("eps");
  check_non_negative(out.eps, "eps");
  out.weight_decay = p.number("weight_decay");
  return out;
}

// "param 3 ('h.0.weight')": how messages name a tensor of a step() call.
inline std::string tensor_label(const dscore_tensor* t, const char* role, size_t i) {
  std::string label = std::string(role) + " " + std::to_string(i);
  if (t != nullptr && t->name != nullptr) label += " ('" + std::string(t->name) + "')";
  return label;
}

inline bool is_cpu_addressable(const dscore_tensor* t) {
  return t->device_type == DSCORE_DEVICE_CPU || t->device_type == DSCORE_DEVICE_CUDA_HOST;
}

// Non-NULL, dense, `numel` elements (when numel >= 0). The device is the
// caller's to check: CPU-only plugins use check_cpu_tensor.
inline void check_dense_tensor(const dscore_tensor* t, const char* role, size_t i, int64_t numel) {
  if (t == nullptr || (t->data == nullptr && t->numel > 0))
    throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(t, role, i) + " is NULL");
  if (t->strides != nullptr)
    throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(t, role, i) + " is not dense (strides set)");
  if (numel >= 0 && t->numel != numel)
    throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(t, role, i) + " has " +
                                             std::to_string(t->numel) + " elements, expected " +
                                             std::to_string(numel));
}

inline void check_cpu_tensor(const dscore_tensor* t, const char* role, size_t i, int64_t numel,
                             const char* plugin) {
  check_dense_tensor(t, role, i, numel);
  if (!is_cpu_addressable(t))
    throw Error(DSCORE_INVALID_ARGUMENT,
                tensor_label(t, role, i) + " is not in CPU memory: the " + plugin +
                    " plugin runs on CPU tensors only (capabilities CPU); use CPU optimizer "
                    "offload");
}

inline bool is_cuda_tensor(const dscore_tensor* t) { return t->device_type == DSCORE_DEVICE_CUDA; }

// Where a tensor's memory is, for messages: "CUDA", "CPU" or "unknown".
inline const char* memory_name(const dscore_tensor* t) {
  return is_cuda_tensor(t) ? "CUDA" : is_cpu_addressable(t) ? "CPU" : "unknown";
}

// A parameter's grad, states and 16-bit copy live where the parameter does
// (for an optimizer that steps CPU and CUDA tensors): dense, the
// parameter's element count, on the same side of the device.
inline void check_beside_param(const dscore_tensor* t, const char* role, size_t i,
                               const dscore_tensor* param) {
  check_dense_tensor(t, role, i, param->numel);
  if (is_cuda_tensor(param) != is_cuda_tensor(t) || (!is_cuda_tensor(t) && !is_cpu_addressable(t)))
    throw Error(DSCORE_INVALID_ARGUMENT,
                tensor_label(t, role, i) + " is in " + memory_name(t) + " memory but " +
                    tensor_label(param, "param", i) + " is in " + memory_name(param) +
                    " memory: a parameter's grad, state and 16-bit copy must live on its device");
}

inline bool is_float_dtype(dscore_dtype d) {
  return d == DSCORE_DTYPE_F32 || d == DSCORE_DTYPE_F16 || d == DSCORE_DTYPE_BF16;
}

// Element i of an fp32/bf16/fp16 buffer, the dtype known at compile time.
template <dscore_dtype D>
inline float load_as_float(const void* data, int64_t i) {
  if constexpr (D == DSCORE_DTYPE_F32) {
    return static_cast<const float*>(data)[i];
  } else if constexpr (D == DSCORE_DTYPE_BF16) {
    return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
  } else {
    static_assert(D == DSCORE_DTYPE_F16);
    return half_to_float(static_cast<const uint16_t*>(data)[i]);
  }
}

// DSCORE_DTYPE_INVALID = nothing to store (no 16-bit copy requested).
template <dscore_dtype D>
inline void store_from_float(void* data, int64_t i, float v) {
  if constexpr (D == DSCORE_DTYPE_INVALID) {
    (void)data, (void)i, (void)v;
  } else if constexpr (D == DSCORE_DTYPE_F32) {
    static_cast<float*>(data)[i] = v;
  } else if constexpr (D == DSCORE_DTYPE_BF16) {
    static_cast<uint16_t*>(data)[i] = float_to_bf16(v);
  } else {
    static_assert(D == DSCORE_DTYPE_F16);
    static_cast<uint16_t*>(data)[i] = float_to_half(v);
  }
}

template <dscore_dtype D>
using DtypeTag = std::integral_constant<dscore_dtype, D>;

// Calls f(DtypeTag<D>{}) for D = the fp32/bf16/fp16 dtype `d`; false when
// `d` is none of them.
template <typename F>
inline bool with_float_dtype(dscore_dtype d, F&& f) {
  switch (d) {
    case DSCORE_DTYPE_F32:
      f(DtypeTag<DSCORE_DTYPE_F32>{});
      return true;
    case DSCORE_DTYPE_BF16:
      f(DtypeTag<DSCORE_DTYPE_BF16>{});
      return true;
    case DSCORE_DTYPE_F16:
      f(DtypeTag<DSCORE_DTYPE_F16>{});
      return true;
    default:
      return false;
  }
}

// As with_float_dtype, plus DSCORE_DTYPE_INVALID (no 16-bit copy).
template <typename F>
inline bool with_output_dtype(dscore_dtype d, F&& f) {
  if (d == DSCORE_DTYPE_INVALID) {
    f(DtypeTag<DSCORE_DTYPE_INVALID>{});
    return true;
  }
  return with_float_dtype(d, f);
}

// The tensors of one step() of an element-wise CPU optimizer whose master
// parameters and state slots are fp32 with one state element per parameter
// element, checked once: params fp32, grads fp32/bf16/fp16, every state
// fp32 of the parameter's size, params_16bit (when given) fp32/bf16/fp16.
class CpuStepTensors {
 public:
  CpuStepTensors(const dscore_optimizer_step_args* args, size_t expected_slots, const char* plugin)
      : args_(args) {
    if (args->slot_count != expected_slots)
      throw Error(DSCORE_INVALID_ARGUMENT, std::string("step: expected ") +
                                               std::to_string(expected_slots) +
                                               " state slots as declared by state_slots(), got " +
                                               std::to_string(args->slot_count));
    const size_t n = args->tensor_count;
    for (size_t i = 0; i < n; ++i) {
      const dscore_tensor* p = args->params[i];
      check_cpu_tensor(p, "param", i, -1, plugin);
      if (p->dtype != DSCORE_DTYPE_F32)
        throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(p, "param", i) + " is " +
                                                 dtype_name(p->dtype) +
                                                 ": master parameters must be fp32");
      const dscore_tensor* g = args->grads[i];
      check_cpu_tensor(g, "grad", i, p->numel, plugin);
      if (!is_float_dtype(g->dtype))
        throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(g, "grad", i) + " is " +
                                                 dtype_name(g->dtype) + ": " + plugin +
                                                 " accepts fp32, bf16 and fp16 gradients");
      for (size_t s = 0; s < expected_slots; ++s) {
        const dscore_tensor* st = args->states[s * n + i];
        check_cpu_tensor(st, "state", i, p->numel, plugin);
        if (st->dtype != DSCORE_DTYPE_F32)
          throw Error(DSCORE_INVALID_ARGUMENT, "state " + std::to_string(s) + " of " +
                                                   tensor_label(p, "param", i) +
                                                   " is not fp32 as declared by state_slots()");
      }
      const dscore_tensor* out = param_16bit(i);
      if (out != nullptr) {
        check_cpu_tensor(out, "params_16bit", i, p->numel, plugin);
        if (!is_float_dtype(out->dtype))
          throw Error(DSCORE_INVALID_ARGUMENT, tensor_label(out, "params_16bit", i) + " is " +
                                                   dtype_name(out->dtype) +
                                                   ": expected bf16, fp16 or fp32");
      }
    }
  }

  size_t count() const { return args_->tensor_count; }
  int64_t numel(size_t i) const { return args_->params[i]->numel; }
  float* param(size_t i) const { return static_cast<float*>(args_->params[i]->data); }
  const dscore_tensor* grad(size_t i) const { return args_->grads[i]; }
  float* state(size_t slot, size_t i) const {
    return static_cast<float*>(args_->states[slot * args_->tensor_count + i]->data);
  }
  // NULL when no 16-bit copy is wanted for tensor i.
  const dscore_tensor* param_16bit(size_t i) const {
    return args_->params_16bit != nullptr ? args_->params_16bit[i] : nullptr;
  }
  dscore_dtype param_16bit_dtype(size_t i) const {
    const dscore_tensor* t = param_16bit(i);
    return t != nullptr ? t->dtype : DSCORE_DTYPE_INVALID;
  }
  void* param_16bit_data(size_t i) const {
    const dscore_tensor* t = param_16bit(i);
    return t != nullptr ? t->data : nullptr;
  }
  // Calls f(G, O) with the DtypeTags of tensor i's gradient and 16-bit copy
  // (DSCORE_DTYPE_INVALID when none), for kernels templated on both.
  template <typename F>
  void with_dtypes(size_t i, F&& f) const {
    with_float_dtype(grad(i)->dtype, [&](auto g) {
      with_output_dtype(param_16bit_dtype(i), [&](auto o) { f(g, o); });
    });
  }

 private:
  const dscore_optimizer_step_args* args_;
};

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_OPTIMIZER_HPP_
