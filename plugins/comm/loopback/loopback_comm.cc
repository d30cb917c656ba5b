// The "loopback" comm backend: the ranks of a job are threads of one
// process (each with its own engine), exchanging through shared memory. The
// ranks find each other through the job's key-value store, which the
// program gives every rank's engine (InitializeOptions::kv_store): rank 0
// publishes the exchange, the others pick it up. Reductions are ordered
// (dscore/cpp/ordered_reduce.hpp), as the mpi backend's are, so a run gives
// the same bits under either. Used for fast in-process tests of the ZeRO
// stages, checkpoints and communicator groups, and by programs that run
// several engines in one process.
#include <dscore/comm.h>
#include <dscore/cpp/comm_plugin.hpp>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/ordered_reduce.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exchange.h"

namespace dscore::loopback {
namespace {

using sdk::Error;

// The exchange, kept alive until every rank joined.
struct Invitation {
  std::shared_ptr<Exchange> exchange;
  std::atomic<int> joined{0};
};

// What rank 0 publishes: the invitation's address, valid in this process
// only, and this process's token, so that a rank in another process (a job
// store that spans processes) refuses it instead of following the pointer.
struct Published {
  uint64_t process;
  Invitation* invitation;
};

uint64_t process_token() {
  static const uint64_t token = [] {
    std::random_device seed;
    return (static_cast<uint64_t>(seed()) << 32) ^ seed();
  }();
  return token;
}

size_t element_size(const dscore_tensor* t) { return sdk::dtype_size(t->dtype); }

class LoopbackComm : public sdk::Instance {
 public:
  LoopbackComm(sdk::HostRef host, const sdk::Params& p)
      : Instance(host), rank_(p.args()->rank), timeout_ms_(p.integer("timeout_ms")) {
    const int world = p.args()->world_size;
    exchange_ = world == 1 ? std::make_shared<Exchange>(1) : rendezvous(world);
  }
  LoopbackComm(sdk::HostRef host, std::shared_ptr<Exchange> exchange, int rank, int64_t timeout_ms)
      : Instance(host), rank_(rank), timeout_ms_(timeout_ms), exchange_(std::move(exchange)) {}

  void allreduce(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op) {
    const int64_t n = send->numel;
    check_numel(recv, n, "allreduce");
    collective("allreduce", send, recv, [&] { gather_chunks(n, 0); });
    sdk::reduce_chunks(scratch_.data(), world(), n, send->dtype, op, recv->data, &reduce_scratch_);
  }
  void reduce_scatter(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op) {
    const int64_t n = chunk_of(send, "reduce_scatter");
    check_numel(recv, n, "reduce_scatter");
    collective("reduce_scatter", send, recv, [&] { gather_chunks(n, rank_ * n); });
    sdk::reduce_chunks(scratch_.data(), world(), n, send->dtype, op, recv->data, &reduce_scratch_);
  }
  void reduce(const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op, int root) {
    check_rank(root, "reduce");
    const int64_t n = send->numel;
    if (rank_ == root) check_numel(recv, n, "reduce");
    collective("reduce", send, recv, [&] {
      if (rank_ == root) gather_chunks(n, 0);
    });
    if (rank_ == root)
      sdk::reduce_chunks(scratch_.data(), world(), n, send->dtype, op, recv->data,
                         &reduce_scratch_);
  }
  void allgather(const dscore_tensor* send, dscore_tensor* recv) {
    const int64_t n = send->numel;
    check_numel(recv, n * world(), "allgather");
    collective("allgather", send, recv, [&] {
      const size_t bytes = static_cast<size_t>(n) * element_size(send);
      for (int r = 0; r < world(); ++r) {
        char* dst = static_cast<char*>(recv->data) + static_cast<size_t>(r) * bytes;
        const void* src = exchange_->slot(r).send;
        if (dst != src) std::memcpy(dst, src, bytes);
      }
    });
  }
  void broadcast(dscore_tensor* tensor, int root) {
    check_rank(root, "broadcast");
    collective("broadcast", tensor, tensor, [&] {
      if (rank_ != root)
        std::memcpy(tensor->data, exchange_->slot(root).send,
                    static_cast<size_t>(tensor->numel) * element_size(tensor));
    });
  }
  void all_to_all(const dscore_tensor* send, dscore_tensor* recv) {
    const int64_t n = chunk_of(send, "all_to_all");
    check_numel(recv, send->numel, "all_to_all");
    collective("all_to_all", send, recv, [&] { gather_chunks(n, rank_ * n); });
    std::memcpy(recv->data, scratch_.data(), static_cast<size_t>(send->numel) * element_size(send));
  }
  // Each rank posts its buffers and layout; after the meeting each copies
  // its share of every peer's send into its own recv (peers' sends stay
  // untouched until the second meeting).
  void all_to_all_v(const dscore_tensor* send, dscore_tensor* recv,
                    const dscore_all_to_all_layout& layout) {
    if (send == nullptr || recv == nullptr || send->dtype != recv->dtype)
      throw Error(DSCORE_INVALID_ARGUMENT, "all_to_all_v: send and recv need one dtype");
    Posted& mine = exchange_->slot(rank_);
    mine = Posted{};
    mine.send = send->data;
    mine.recv = recv->data;
    mine.dtype = send->dtype;
    mine.layout = &layout;
    meet("all_to_all_v");
    const size_t es = element_size(send);
    for (int r = 0; r < world(); ++r) {
      const Posted& theirs = exchange_->slot(r);
      const int64_t n = theirs.layout->send_counts[rank_];
      if (theirs.dtype != mine.dtype || n != layout.recv_counts[r])
        throw Error(DSCORE_INVALID_ARGUMENT,
                    "all_to_all_v: rank " + std::to_string(r) + " sends " + std::to_string(n) +
                        " elements to rank " + std::to_string(rank_) + ", which expects " +
                        std::to_string(layout.recv_counts[r]) + " (recv_counts)");
      std::memcpy(static_cast<char*>(recv->data) + static_cast<size_t>(layout.recv_offsets[r]) * es,
                  static_cast<const char*>(theirs.send) +
                      static_cast<size_t>(theirs.layout->send_offsets[rank_]) * es,
                  static_cast<size_t>(n) * es);
    }
    meet("all_to_all_v");
    operations_ += 1;
  }
  void barrier() { meet("barrier"); }
  void send(const dscore_tensor* tensor, int peer) {
    check_rank(peer, "send");
    exchange_->send(rank_, peer, tensor->data,
                    static_cast<size_t>(tensor->numel) * element_size(tensor));
    operations_ += 1;
  }
  void recv(dscore_tensor* tensor, int peer) {
    check_rank(peer, "recv");
    std::string message;
    const dscore_status st = exchange_->receive(
        peer, rank_, tensor->data, static_cast<size_t>(tensor->numel) * element_size(tensor),
        timeout_ms_, &message);
    if (st != DSCORE_OK) throw Error(st, "loopback rank " + std::to_string(rank_) + " " + message);
    operations_ += 1;
  }
  // Collective: the group of `color` ranked by key, then by rank here.
  LoopbackComm* split(int32_t color, int32_t key) {
    Posted& mine = exchange_->slot(rank_);
    mine = Posted{};
    mine.color = color;
    mine.key = key;
    meet("split");
    std::vector<int> members;
    for (int r = 0; r < world(); ++r)
      if (color != DSCORE_COMM_SPLIT_NONE && exchange_->slot(r).color == color)
        members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return exchange_->slot(a).key < exchange_->slot(b).key; });
    if (!members.empty() && members.front() == rank_)
      mine.made = std::make_shared<Exchange>(static_cast<int>(members.size()));
    meet("split");
    std::shared_ptr<Exchange> group =
        members.empty() ? nullptr : exchange_->slot(members.front()).made;
    meet("split");  // the leader's slot is reused only after everyone took the group
    operations_ += 1;
    if (!group) return nullptr;
    const int new_rank =
        static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    return new LoopbackComm(host(), std::move(group), new_rank, timeout_ms_);
  }
  void abort(const char* reason) { exchange_->abort(reason != nullptr ? reason : "aborted"); }
  void counters(dscore_comm_counters* out) const {
    out->operations = operations_;
    out->bytes_sent = 0;  // nothing leaves the process
    out->bytes_received = 0;
  }

 private:
  int world() const { return exchange_->world(); }

  std::shared_ptr<Exchange> rendezvous(int world) {
    const dscore_host_api* api = sdk::host();
    if (api == nullptr || api->kv_get == nullptr)
      throw Error(DSCORE_FAILED_PRECONDITION, "loopback: the host has no key-value store");
    // The n-th loopback communicator of this rank meets at key n: the ranks
    // create their communicators in the same order (comm.h ORDERING).
    dscore_host_context* ctx = host().context();
    const std::string count_key = "dscore.loopback.count." + std::to_string(rank_);
    uint64_t n = 0;
    size_t size = 0;
    if (api->kv_get(ctx, count_key.c_str(), &n, sizeof n, &size, 0) != DSCORE_OK) n = 0;
    sdk::check(api->kv_set(ctx, count_key.c_str(), &(++n), sizeof n));
    const std::string key = "dscore.loopback.exchange." + std::to_string(n);
    Published published{process_token(), nullptr};
    if (rank_ == 0) {
      published.invitation = new Invitation{std::make_shared<Exchange>(world), {}};
      sdk::check(api->kv_set(ctx, key.c_str(), &published, sizeof published));
    } else if (api->kv_get(ctx, key.c_str(), &published, sizeof published, &size, timeout_ms_) !=
               DSCORE_OK) {
      throw Error(DSCORE_DEADLINE_EXCEEDED,
                  "loopback rank " + std::to_string(rank_) +
                      ": rank 0 did not open the exchange within " + std::to_string(timeout_ms_) +
                      " ms. The loopback backend runs the ranks of a job as threads of one process "
                      "whose engines share one key-value store (InitializeOptions::kv_store); for "
                      "ranks in separate processes use \"comm\": {\"backend\": \"mpi\"}");
    }
    if (rank_ != 0 && (size != sizeof published || published.process != process_token()))
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "loopback rank " + std::to_string(rank_) +
                      ": rank 0 runs in another process. The loopback backend runs the ranks of a "
                      "job as threads of one process; for ranks in separate processes use "
                      "\"comm\": {\"backend\": \"mpi\"}");
    Invitation* invitation = published.invitation;
    std::shared_ptr<Exchange> exchange = invitation->exchange;
    if (++invitation->joined == world) delete invitation;
    return exchange;
  }

  void meet(const char* what) {
    std::string message;
    const dscore_status st = exchange_->meet(rank_, what, timeout_ms_, &message);
    if (st != DSCORE_OK) throw Error(st, "loopback rank " + std::to_string(rank_) + " " + message);
  }

  // Post, meet, check that every rank brought the same dtype and size,
  // read what this rank needs (`read`), meet again.
  template <typename Read>
  void collective(const char* what, const dscore_tensor* send, dscore_tensor* recv, Read&& read) {
    if (send == nullptr || (send->data == nullptr && send->numel > 0))
      throw Error(DSCORE_INVALID_ARGUMENT, std::string(what) + ": NULL send tensor");
    Posted& mine = exchange_->slot(rank_);
    mine = Posted{};
    mine.send = send->data;
    mine.recv = recv != nullptr ? recv->data : nullptr;
    mine.numel = send->numel;
    mine.dtype = send->dtype;
    meet(what);
    for (int r = 0; r < world(); ++r) {
      const Posted& theirs = exchange_->slot(r);
      if (theirs.numel != mine.numel || theirs.dtype != mine.dtype)
        throw Error(DSCORE_INVALID_ARGUMENT,
                    std::string(what) + ": rank " + std::to_string(r) + " passed " +
                        std::to_string(theirs.numel) + " " + sdk::dtype_name(theirs.dtype) +
                        " elements, rank " + std::to_string(rank_) + " " +
                        std::to_string(mine.numel) + " " + sdk::dtype_name(mine.dtype) +
                        " (every rank must pass the same)");
    }
    read();
    meet(what);
    operations_ += 1;
  }

  // scratch_ = chunk r of every rank's send at element `offset`, n each.
  void gather_chunks(int64_t n, int64_t offset) {
    const size_t es = sdk::dtype_size(exchange_->slot(rank_).dtype);
    const size_t bytes = static_cast<size_t>(n) * es;
    scratch_.resize(bytes * static_cast<size_t>(world()));
    for (int r = 0; r < world(); ++r)
      std::memcpy(
          scratch_.data() + static_cast<size_t>(r) * bytes,
          static_cast<const char*>(exchange_->slot(r).send) + static_cast<size_t>(offset) * es,
          bytes);
  }
  int64_t chunk_of(const dscore_tensor* t, const char* what) const {
    if (t == nullptr || t->numel % world() != 0)
      throw Error(DSCORE_INVALID_ARGUMENT, std::string(what) +
                                               ": the send tensor's size is not a "
                                               "multiple of the world size");
    return t->numel / world();
  }
  static void check_numel(const dscore_tensor* t, int64_t numel, const char* what) {
    if (t == nullptr || (t->data == nullptr && numel > 0) || t->numel != numel)
      throw Error(DSCORE_INVALID_ARGUMENT, std::string(what) + ": the recv tensor must hold " +
                                               std::to_string(numel) + " elements");
  }
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= world())
      throw Error(DSCORE_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) +
                                           " is not in this communicator of " +
                                           std::to_string(world()));
  }

  int rank_;
  int64_t timeout_ms_;
  std::shared_ptr<Exchange> exchange_;
  std::vector<char> scratch_;
  std::vector<double> reduce_scratch_;
  uint64_t operations_ = 0;
};

constexpr const char kParamsSchema[] = R"json({
  "timeout_ms": {"type": "int", "default": 300000, "min": 1,
                 "doc": "collective deadline: a rank that does not arrive in time is named"}
})json";

const dscore_plugin_descriptor kLoopback = sdk::comm_descriptor<LoopbackComm>(
    "loopback", "0.1.0",
    "ranks as threads of one process (in-process tests, several engines per process)",
    DSCORE_CAP_CPU | DSCORE_CAP_MULTI_RANK, kParamsSchema);

}  // namespace
}  // namespace dscore::loopback

DSCORE_PLUGIN_LIBRARY("dscore-comm-loopback", "0.1.0", "dscore", &dscore::loopback::kLoopback)
