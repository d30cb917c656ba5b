// Optional header-only adapter for optimizer plugins written in C++: a class
// that is its math, its state slots and its params schema becomes a
// dscore_optimizer_vtable and a descriptor. The class:
//
//   class MySgd : public sdk::OptimizerBase {
//    public:
//     MySgd(sdk::HostRef host, const sdk::Params& p);   // read and check params;
//                                                       // declare_slot(...) here
//     void step(const dscore_optimizer_step_args* args); // throw sdk::Error on bad input
//     // optional:
//     std::string save_extra_state() const;
//     void load_extra_state(std::string_view bytes);
//     bool wants_reduced_gradients(int64_t step) const;
//     bool preconditions(const dscore_model_param& param) const;      // both or
//     void precondition(const dscore_optimizer_precondition_args* args);  // neither
//   };
//   const dscore_plugin_descriptor kMySgd = sdk::optimizer_descriptor<MySgd>(
//       "my_sgd", "1.0", "one line", DSCORE_CAP_CPU | DSCORE_CAP_F32, kSchema);
//
// The optional members become the optional vtable entries; absent ones stay
// NULL, as the ABI asks. Nothing here crosses the ABI.
#ifndef DSCORE_CPP_OPTIMIZER_PLUGIN_HPP_
#define DSCORE_CPP_OPTIMIZER_PLUGIN_HPP_

#include <dscore/optimizer.h>
#include <dscore/cpp/instance.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dscore::sdk {

// Base of a C++ optimizer: the host and the declared state slots.
class OptimizerBase : public Instance {
 public:
  using Instance::Instance;

  const dscore_optimizer_state_slot* const* slot_table() const { return pointers_.data(); }
  size_t slot_count() const { return pointers_.size(); }

 protected:
  // Declare the next state slot (its index is the order of declaration).
  // `name` must outlive the instance (a string literal).
  void declare_slot(const char* name, double initial_value = 0.0,
                    dscore_dtype dtype = DSCORE_DTYPE_F32, uint32_t elements_per_param = 1) {
    slots_.push_back(
        {sizeof(dscore_optimizer_state_slot), name, dtype, elements_per_param, initial_value});
    pointers_.clear();
    for (const dscore_optimizer_state_slot& s : slots_) pointers_.push_back(&s);
  }

 private:
  std::vector<dscore_optimizer_state_slot> slots_;
  std::vector<const dscore_optimizer_state_slot*> pointers_;
};

namespace detail {
template <typename T, typename = void>
struct HasExtraState : std::false_type {};
template <typename T>
struct HasExtraState<T,
                     std::void_t<decltype(std::declval<const T&>().save_extra_state()),
                                 decltype(std::declval<T&>().load_extra_state(std::string_view()))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasWantsReduced : std::false_type {};
template <typename T>
struct HasWantsReduced<
    T, std::void_t<decltype(std::declval<const T&>().wants_reduced_gradients(int64_t{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasPrecondition : std::false_type {};
template <typename T>
struct HasPrecondition<T,
                       std::void_t<decltype(std::declval<const T&>().preconditions(
                                       std::declval<const dscore_model_param&>())),
                                   decltype(std::declval<T&>().precondition(
                                       std::declval<const dscore_optimizer_precondition_args*>()))>>
    : std::true_type {};
}  // namespace detail

template <typename T>
struct OptimizerPlugin {
  static_assert(std::is_base_of_v<OptimizerBase, T>, "optimizers derive from sdk::OptimizerBase");
  using S = Shim<dscore_optimizer, T>;

  static dscore_status create(const dscore_create_args* args, dscore_optimizer** out) {
    return S::create(args, out);
  }
  static dscore_status state_slots(const dscore_optimizer* h,
                                   const dscore_optimizer_state_slot* const** slots,
                                   size_t* count) {
    return S::call(h, [&](const T& t) {
      *slots = t.slot_table();
      *count = t.slot_count();
    });
  }
  static dscore_status step(dscore_optimizer* h, const dscore_optimizer_step_args* args) {
    return S::call(h, [&](T& t) { t.step(args); });
  }
  static dscore_status save_extra_state(const dscore_optimizer* h, dscore_write_fn write,
                                        void* ctx) {
    return S::call(h, [&](const T& t) {
      const std::string bytes = t.save_extra_state();
      return bytes.empty() ? DSCORE_OK : write(ctx, bytes.data(), bytes.size());
    });
  }
  static dscore_status load_extra_state(dscore_optimizer* h, const void* data, size_t size) {
    return S::call(h, [&](T& t) {
      t.load_extra_state(std::string_view(static_cast<const char*>(data), size));
    });
  }
  static int32_t wants_reduced_gradients(const dscore_optimizer* h, int64_t step) {
    return S::self(h).wants_reduced_gradients(step) ? 1 : 0;
  }

  static int32_t preconditions(const dscore_optimizer* h, const dscore_model_param* param) {
    try {
      return param != nullptr && S::self(h).preconditions(*param) ? 1 : 0;
    } catch (...) {
      return 0;  // nothing may cross the ABI
    }
  }
  static dscore_status precondition(dscore_optimizer* h,
                                    const dscore_optimizer_precondition_args* args) {
    return S::call(h, [&](T& t) { t.precondition(args); });
  }

  static dscore_optimizer_vtable make_vtable() {
    dscore_optimizer_vtable vt{};
    vt.struct_size = sizeof vt;
    vt.create = &create;
    vt.destroy = &S::destroy;
    vt.state_slots = &state_slots;
    vt.step = &step;
    if constexpr (detail::HasExtraState<T>::value) {
      vt.save_extra_state = &save_extra_state;
      vt.load_extra_state = &load_extra_state;
    }
    if constexpr (detail::HasWantsReduced<T>::value)
      vt.wants_reduced_gradients = &wants_reduced_gradients;
    if constexpr (detail::HasPrecondition<T>::value) {
      vt.preconditions = &preconditions;
      vt.precondition = &precondition;
    }
    return vt;
  }
  static inline const dscore_optimizer_vtable vtable = make_vtable();
};

// The descriptor of optimizer class T.
template <typename T>
dscore_plugin_descriptor optimizer_descriptor(const char* name, const char* version,
                                              const char* description, uint64_t capabilities,
                                              const char* params_schema) {
  return {sizeof(dscore_plugin_descriptor),
          DSCORE_KIND_OPTIMIZER,
          name,
          version,
          description,
          capabilities,
          params_schema,
          &OptimizerPlugin<T>::vtable};
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_OPTIMIZER_PLUGIN_HPP_
