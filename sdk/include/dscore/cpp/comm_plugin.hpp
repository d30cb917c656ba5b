// Optional header-only adapter for comm-backend plugins written in C++
// that move CPU tensors: a class that is its collectives becomes a
// dscore_comm_vtable and a descriptor.
//
//   class MyComm : public sdk::Instance {
//    public:
//     MyComm(sdk::HostRef host, const sdk::Params& p);  // collective: every rank
//     void allreduce(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op);
//     void reduce_scatter(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op);
//     void reduce(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op, int root);
//     void allgather(const dscore_tensor* send, dscore_tensor* recv);
//     void broadcast(dscore_tensor* tensor, int root);
//     void send(const dscore_tensor* tensor, int peer);
//     void recv(dscore_tensor* tensor, int peer);
//     void barrier();
//     // optional:
//     void all_to_all(const dscore_tensor* send, dscore_tensor* recv);
//     void all_to_all_v(const dscore_tensor* send, dscore_tensor* recv,
//                       const dscore_all_to_all_layout& layout);
//     void abort(const char* reason) noexcept;
//     void counters(dscore_comm_counters* out) const;
//     MyComm* split(int32_t color, int32_t key);  // nullptr for DSCORE_COMM_SPLIT_NONE
//     void group_start();  // both or neither: grouped calls (comm.h)
//     void group_end();
//   };
//   const dscore_plugin_descriptor kMine = sdk::comm_descriptor<MyComm>(
//       "my_comm", "1.0", "one line", DSCORE_CAP_CPU | DSCORE_CAP_MULTI_RANK, kSchema);
//
// Errors are thrown as sdk::Error (reported on the instance's context).
// The `stream` arguments (PROVISIONAL, NULL for CPU tensors) are not passed
// on. Nothing here crosses the ABI.
#ifndef DSCORE_CPP_COMM_PLUGIN_HPP_
#define DSCORE_CPP_COMM_PLUGIN_HPP_

#include <dscore/comm.h>
#include <dscore/cpp/instance.hpp>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace dscore::sdk {

namespace detail {
template <typename T, typename = void>
struct HasAllToAll : std::false_type {};
template <typename T>
struct HasAllToAll<
    T, std::void_t<decltype(std::declval<T&>().all_to_all(
           static_cast<const dscore_tensor*>(nullptr), static_cast<dscore_tensor*>(nullptr)))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasAllToAllV : std::false_type {};
template <typename T>
struct HasAllToAllV<
    T, std::void_t<decltype(std::declval<T&>().all_to_all_v(
           static_cast<const dscore_tensor*>(nullptr), static_cast<dscore_tensor*>(nullptr),
           std::declval<const dscore_all_to_all_layout&>()))>> : std::true_type {};
template <typename T, typename = void>
struct HasAbort : std::false_type {};
template <typename T>
struct HasAbort<T,
                std::void_t<decltype(std::declval<T&>().abort(static_cast<const char*>(nullptr)))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasCounters : std::false_type {};
template <typename T>
struct HasCounters<T, std::void_t<decltype(std::declval<const T&>().counters(
                          static_cast<dscore_comm_counters*>(nullptr)))>> : std::true_type {};
template <typename T, typename = void>
struct HasSplit : std::false_type {};
template <typename T>
struct HasSplit<T, std::void_t<decltype(std::declval<T&>().split(int32_t{}, int32_t{}))>>
    : std::true_type {};
template <typename T, typename = void>
struct HasGroups : std::false_type {};
template <typename T>
struct HasGroups<T, std::void_t<decltype(std::declval<T&>().group_start()),
                                decltype(std::declval<T&>().group_end())>> : std::true_type {};
}  // namespace detail

template <typename T>
struct CommPlugin {
  using S = Shim<dscore_comm, T>;
  using Tensor = const dscore_tensor*;

  static dscore_status create(const dscore_create_args* args, dscore_comm** out) {
    return S::create(args, out);
  }
  static dscore_status allreduce(dscore_comm* c, Tensor s, dscore_tensor* r, dscore_reduce_op op,
                                 void*) {
    return S::call(c, [&](T& t) { t.allreduce(s, r, op); });
  }
  static dscore_status reduce_scatter(dscore_comm* c, Tensor s, dscore_tensor* r,
                                      dscore_reduce_op op, void*) {
    return S::call(c, [&](T& t) { t.reduce_scatter(s, r, op); });
  }
  static dscore_status reduce(dscore_comm* c, Tensor s, dscore_tensor* r, dscore_reduce_op op,
                              int32_t root, void*) {
    return S::call(c, [&](T& t) { t.reduce(s, r, op, root); });
  }
  static dscore_status allgather(dscore_comm* c, Tensor s, dscore_tensor* r, void*) {
    return S::call(c, [&](T& t) { t.allgather(s, r); });
  }
  static dscore_status broadcast(dscore_comm* c, dscore_tensor* tensor, int32_t root, void*) {
    return S::call(c, [&](T& t) { t.broadcast(tensor, root); });
  }
  static dscore_status send(dscore_comm* c, Tensor tensor, int32_t peer, void*) {
    return S::call(c, [&](T& t) { t.send(tensor, peer); });
  }
  static dscore_status recv(dscore_comm* c, dscore_tensor* tensor, int32_t peer, void*) {
    return S::call(c, [&](T& t) { t.recv(tensor, peer); });
  }
  static dscore_status barrier(dscore_comm* c) {
    return S::call(c, [&](T& t) { t.barrier(); });
  }
  static dscore_status all_to_all(dscore_comm* c, Tensor s, dscore_tensor* r, void*) {
    return S::call(c, [&](T& t) { t.all_to_all(s, r); });
  }
  static dscore_status all_to_all_v(dscore_comm* c, Tensor s, dscore_tensor* r,
                                    const dscore_all_to_all_layout* layout, void*) {
    return S::call(c, [&](T& t) {
      if (layout == nullptr || layout->send_counts == nullptr || layout->send_offsets == nullptr ||
          layout->recv_counts == nullptr || layout->recv_offsets == nullptr)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    "all_to_all_v: the layout or one of its arrays is NULL");
      t.all_to_all_v(s, r, *layout);
    });
  }
  static void abort(dscore_comm* c, const char* reason) { S::self(c).abort(reason); }
  static dscore_status counters(const dscore_comm* c, dscore_comm_counters* out) {
    return S::call(c, [&](const T& t) { t.counters(out); });
  }
  static dscore_status split(dscore_comm* c, int32_t color, int32_t key, dscore_comm** out) {
    return S::call(c, [&](T& t) { *out = reinterpret_cast<dscore_comm*>(t.split(color, key)); });
  }

  static dscore_status group_start(dscore_comm* c) {
    return S::call(c, [&](T& t) { t.group_start(); });
  }
  static dscore_status group_end(dscore_comm* c, void*) {
    return S::call(c, [&](T& t) { t.group_end(); });
  }

  static dscore_comm_vtable make_vtable() {
    dscore_comm_vtable vt{};
    vt.struct_size = sizeof vt;
    vt.create = &create;
    vt.destroy = &S::destroy;
    vt.allreduce = &allreduce;
    vt.reduce_scatter = &reduce_scatter;
    vt.allgather = &allgather;
    vt.broadcast = &broadcast;
    vt.send = &send;
    vt.recv = &recv;
    vt.barrier = &barrier;
    vt.reduce = &reduce;
    if constexpr (detail::HasAllToAll<T>::value) vt.all_to_all = &all_to_all;
    if constexpr (detail::HasAllToAllV<T>::value) vt.all_to_all_v = &all_to_all_v;
    if constexpr (detail::HasAbort<T>::value) vt.abort = &abort;
    if constexpr (detail::HasCounters<T>::value) vt.counters = &counters;
    if constexpr (detail::HasSplit<T>::value) vt.split = &split;
    if constexpr (detail::HasGroups<T>::value) {
      vt.group_start = &group_start;
      vt.group_end = &group_end;
    }
    return vt;
  }
  static inline const dscore_comm_vtable vtable = make_vtable();
};

// The descriptor of comm backend class T.
template <typename T>
dscore_plugin_descriptor comm_descriptor(const char* name, const char* version,
                                         const char* description, uint64_t capabilities,
                                         const char* params_schema) {
  return {sizeof(dscore_plugin_descriptor),
          DSCORE_KIND_COMM,
          name,
          version,
          description,
          capabilities,
          params_schema,
          &CommPlugin<T>::vtable};
}

}  // namespace dscore::sdk

#endif  // DSCORE_CPP_COMM_PLUGIN_HPP_
