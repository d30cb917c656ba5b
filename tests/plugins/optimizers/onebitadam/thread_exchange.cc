// ThreadExchange (see thread_exchange.h). Every collective is two barrier
// phases: each rank publishes its send buffer and waits; each reads what it
// needs from the others' buffers into a private result; all wait again
// (nobody's buffer changes while another reads it); each then writes its
// own receive buffer, so in-place collectives are safe.
#include "tests/plugins/optimizers/onebitadam/thread_exchange.h"

#include <dscore/cpp/dtype.hpp>

#include <cstring>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {

struct ThreadExchange::Rank {
  ThreadExchange* exchange;
  int rank;
  std::map<std::string, int64_t> sent;

  static Rank& of(dscore_comm* c) { return *reinterpret_cast<Rank*>(c); }
  size_t bytes(const dscore_tensor* t) const {
    return static_cast<size_t>(t->numel) * sdk::dtype_size(t->dtype);
  }
  void count(const char* what, const dscore_tensor* t) {
    std::lock_guard<std::mutex> lock(exchange->mutex_);
    sent[what] += static_cast<int64_t>(bytes(t));
  }
  // Publish `send`, wait for everyone, run `read`, wait again.
  template <typename Read>
  void exchange_with(const void* send, Read&& read) {
    exchange->slots_[rank] = send;
    exchange->barrier_.arrive_and_wait();
    read(exchange->slots_);
    exchange->barrier_.arrive_and_wait();
  }
  dscore_status reduce(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
                       const char* what, int64_t offset, int64_t n) {
    if (send->dtype != DSCORE_DTYPE_F32 || (op != DSCORE_REDUCE_SUM && op != DSCORE_REDUCE_AVG))
      return FakeHost::instance().api()->set_error(FakeHost::thread_context(), DSCORE_UNIMPLEMENTED,
                                                   "thread exchange: fp32 sum/avg only");
    count(what, send);
    std::vector<float> result(static_cast<size_t>(n), 0.0f);
    const int world = exchange->world_size_;
    exchange_with(send->data, [&](const std::vector<const void*>& slots) {
      for (int w = 0; w < world; ++w)
        for (int64_t i = 0; i < n; ++i)
          result[i] += static_cast<const float*>(slots[w])[offset + i];
    });
    if (op == DSCORE_REDUCE_AVG)
      for (float& v : result) v /= static_cast<float>(world);
    std::memcpy(recv->data, result.data(), result.size() * sizeof(float));
    return DSCORE_OK;
  }
};

namespace {

using Rank = ThreadExchange::Rank;

dscore_status allreduce(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv,
                        dscore_reduce_op op, void*) {
  return Rank::of(c).reduce(send, recv, op, "allreduce", 0, send->numel);
}

dscore_status reduce_scatter(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv,
                             dscore_reduce_op op, void*) {
  Rank& r = Rank::of(c);
  return r.reduce(send, recv, op, "reduce_scatter", r.rank * recv->numel, recv->numel);
}

dscore_status allgather(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv, void*) {
  Rank& r = Rank::of(c);
  r.count("allgather", send);
  const size_t bytes = r.bytes(send);
  std::vector<unsigned char> result(bytes * r.exchange->world_size());
  r.exchange_with(send->data, [&](const std::vector<const void*>& slots) {
    for (size_t w = 0; w < slots.size(); ++w)
      std::memcpy(result.data() + w * bytes, slots[w], bytes);
  });
  std::memcpy(recv->data, result.data(), result.size());
  return DSCORE_OK;
}

dscore_status all_to_all(dscore_comm* c, const dscore_tensor* send, dscore_tensor* recv, void*) {
  Rank& r = Rank::of(c);
  r.count("all_to_all", send);
  const size_t chunk = r.bytes(send) / static_cast<size_t>(r.exchange->world_size());
  std::vector<unsigned char> result(r.bytes(send));
  r.exchange_with(send->data, [&](const std::vector<const void*>& slots) {
    for (size_t w = 0; w < slots.size(); ++w)
      std::memcpy(result.data() + w * chunk,
                  static_cast<const unsigned char*>(slots[w]) + static_cast<size_t>(r.rank) * chunk,
                  chunk);
  });
  std::memcpy(recv->data, result.data(), result.size());
  return DSCORE_OK;
}

dscore_status broadcast(dscore_comm* c, dscore_tensor* tensor, int32_t root, void*) {
  Rank& r = Rank::of(c);
  r.count("broadcast", tensor);
  std::vector<unsigned char> result(r.bytes(tensor));
  r.exchange_with(tensor->data, [&](const std::vector<const void*>& slots) {
    std::memcpy(result.data(), slots[root], result.size());
  });
  std::memcpy(tensor->data, result.data(), result.size());
  return DSCORE_OK;
}

dscore_status point_to_point(dscore_comm*, const dscore_tensor*, int32_t, void*) {
  return FakeHost::instance().api()->set_error(FakeHost::thread_context(), DSCORE_UNIMPLEMENTED,
                                               "thread exchange: no send");
}
dscore_status receive(dscore_comm*, dscore_tensor*, int32_t, void*) {
  return FakeHost::instance().api()->set_error(FakeHost::thread_context(), DSCORE_UNIMPLEMENTED,
                                               "thread exchange: no recv");
}

dscore_status barrier(dscore_comm* c) {
  Rank::of(c).exchange_with(nullptr, [](const std::vector<const void*>&) {});
  return DSCORE_OK;
}

dscore_comm_vtable make_vtable() {
  dscore_comm_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.allreduce = &allreduce;
  vt.reduce_scatter = &reduce_scatter;
  vt.allgather = &allgather;
  vt.broadcast = &broadcast;
  vt.send = &point_to_point;
  vt.recv = &receive;
  vt.barrier = &barrier;
  vt.all_to_all = &all_to_all;
  return vt;
}
const dscore_comm_vtable kVtable = make_vtable();

}  // namespace

ThreadExchange::ThreadExchange(int world_size)
    : world_size_(world_size), barrier_(world_size), slots_(static_cast<size_t>(world_size)) {
  for (int r = 0; r < world_size; ++r) ranks_.push_back(std::make_unique<Rank>(Rank{this, r, {}}));
  for (int r = 0; r < world_size; ++r) {
    dscore_communicator c{};
    c.struct_size = sizeof c;
    c.rank = r;
    c.world_size = world_size;
    c.vtable = &kVtable;
    c.comm = reinterpret_cast<dscore_comm*>(ranks_[r].get());
    communicators_.push_back(c);
  }
}

ThreadExchange::~ThreadExchange() = default;

const dscore_communicator* ThreadExchange::communicator(int rank) const {
  return &communicators_[static_cast<size_t>(rank)];
}

std::map<std::string, int64_t> ThreadExchange::bytes_sent(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ranks_[static_cast<size_t>(rank)]->sent;
}

int64_t ThreadExchange::total_bytes_sent(int rank) const {
  int64_t total = 0;
  for (const auto& [what, bytes] : bytes_sent(rank)) total += bytes;
  return total;
}

void ThreadExchange::reset_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& r : ranks_) r->sent.clear();
}

}  // namespace dscore::testing
