// Optional header-only adapter for monitor plugins written in C++: a class
// that is its write/flush becomes a dscore_monitor_vtable and a descriptor.
//
//   class MyMonitor : public sdk::Instance {
//    public:
//     MyMonitor(sdk::HostRef host, const sdk::Params& p);
//     void write(const dscore_scalar_event& e, bool has_wall_time);  // one event
//     void flush();
//     // optional:
//     void write_config(const char* resolved_config_json);
//   };
//   const dscore_plugin_descriptor kMine = sdk::monitor_descriptor<MyMonitor>(
//       "my_monitor", "1.0", "one line", kSchema);
//
// write_scalars() writes every event, then flushes, so each call's events
// are visible when it returns (DeepSpeed's monitors do the same). Nothing
// here crosses the ABI.
#ifndef DSCORE_CPP_MONITOR_PLUGIN_HPP_
#define DSCORE_CPP_MONITOR_PLUGIN_HPP_

#include <dscore/monitor.h>
#include <dscore/cpp/instance.hpp>
#include <dscore/cpp/monitor.hpp>

#include <type_traits>
#include <utility>

namespace dscore::sdk {

namespace detail {
template <typename T, typename = void>
struct HasWriteConfig : std::false_type {};
template <typename T>
struct HasWriteConfig<
    T, std::void_t<decltype(std::declval<T&>().write_config(static_cast<const char*>(nullptr)))>>
    : std::true_type {};
}  // namespace detail

template <typename T>
struct MonitorPlugin {
  using S = Shim<dscore_monitor, T>;

  static dscore_status create(const dscore_create_args* args, dscore_monitor** out) {
    return S::create(args, out);
  }
  static dscore_status write_scalars(dscore_monitor* h, const dscore_scalar_event* const* events,
                                     size_t count) {
    return S::call(h, [&](T& t) {
      for_each_event(events, count, [&](const dscore_scalar_event& e, bool has_wall_time) {
        t.write(e, has_wall_time);
      });
      t.flush();
    });
  }
  static dscore_status flush(dscore_monitor* h) {
    return S::call(h, [&](T& t) { t.flush(); });
  }
  static dscore_status write_config(dscore_monitor* h, const char* json) {
    return S::call(h, [&](T& t) { t.write_config(json != nullptr ? json : "{}"); });
  }

  static dscore_monitor_vtable make_vtable() {
    dscore_monitor_vtable vt{};
    vt.struct_size = sizeof vt;
    vt.create = &create;
    vt.destroy = &S::destroy;
    vt.write_scalars = &write_scalars;
    vt.flush = &flush;
    if constexpr (detail::HasWriteConfig<T>::value) vt.write_config = &write_config;
    return vt;
  }
  static inline const dscore_monitor_vtable vtable = make_vtable();
};

// The descriptor of monitor class T (monitors touch no tensors: CPU only).
template <typename T>
dscore_plugin_descriptor monitor_descriptor(const char* name, const char* version,
                                            const char* description, const char* params_schema) {
  return {sizeof(dscore_plugin_descriptor),
          DSCORE_KIND_MONITOR,
          name,
          version,
          description,
          DSCORE_CAP_CPU,
          params_schema,
          &MonitorPlugin<T>::vtable};
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_MONITOR_PLUGIN_HPP_
