// The collective checks every multi-rank comm backend must pass, on known
// values: sums in rank order, AVG, MAX, in-place variants, uneven sizes,
// bf16 reduce-scatter rounded once, broadcast, barrier, send/recv around a
// ring, wire counters and split groups. The checks hold their data in host
// memory and call a CheckedComm: mpi_collectives_worker.cc passes the
// host's Communicator as it is, the nccl tests
// (tests/plugins/comm/nccl/device_comm.h) an adapter that stages every
// buffer in GPU memory around each call.
#pragma once

#include <dscore/comm.h>

#include <functional>
#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/comm/communicator.h"

namespace dscore::testing {

using comm::CommBuffer;

// The calls the checks make. Buffers are host memory; recv of reduce is
// used on the root only (empty elsewhere).
class CheckedComm {
 public:
  virtual ~CheckedComm() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Status allreduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op) = 0;
  virtual Status reduce(CommBuffer send, CommBuffer recv, dscore_reduce_op op, int root) = 0;
  virtual Status reduce_scatter(CommBuffer send, CommBuffer recv, dscore_reduce_op op) = 0;
  virtual Status allgather(CommBuffer send, CommBuffer recv) = 0;
  virtual Status broadcast(CommBuffer buffer, int root) = 0;
  virtual Status send(CommBuffer buffer, int peer) = 0;
  virtual Status recv(CommBuffer buffer, int peer) = 0;
  virtual Status barrier() = 0;
  virtual Status all_to_all_v(CommBuffer send, CommBuffer recv,
                              const comm::Communicator::AllToAllLayout& layout) = 0;
  virtual Result<dscore_comm_counters> wire_counters() const = 0;
  // nullptr for DSCORE_COMM_SPLIT_NONE.
  virtual Result<std::unique_ptr<CheckedComm>> split(int color, int key) = 0;
  // The calls `issue` makes, as one group (Communicator::grouped): results
  // are read only after it returns.
  virtual Status grouped(const std::function<Status()>& issue) = 0;
};

// The host's Communicator as the checks call it (the counted path the
// engine uses): host buffers go straight through.
class HostCheckedComm : public CheckedComm {
 public:
  explicit HostCheckedComm(std::unique_ptr<comm::Communicator> c) : c_(std::move(c)) {}
  comm::Communicator& get() { return *c_; }
  int rank() const override { return c_->rank(); }
  int world_size() const override { return c_->world_size(); }
  Status allreduce(CommBuffer s, CommBuffer r, dscore_reduce_op op) override {
    return c_->allreduce(s, r, op);
  }
  Status reduce(CommBuffer s, CommBuffer r, dscore_reduce_op op, int root) override {
    return c_->reduce(s, r, op, root);
  }
  Status reduce_scatter(CommBuffer s, CommBuffer r, dscore_reduce_op op) override {
    return c_->reduce_scatter(s, r, op);
  }
  Status allgather(CommBuffer s, CommBuffer r) override { return c_->allgather(s, r); }
  Status broadcast(CommBuffer b, int root) override { return c_->broadcast(b, root); }
  Status send(CommBuffer b, int peer) override { return c_->send(b, peer); }
  Status recv(CommBuffer b, int peer) override { return c_->recv(b, peer); }
  Status barrier() override { return c_->barrier(); }
  Status all_to_all_v(CommBuffer s, CommBuffer r,
                      const comm::Communicator::AllToAllLayout& layout) override {
    return c_->all_to_all_v(s, r, layout);
  }
  Result<dscore_comm_counters> wire_counters() const override { return c_->wire_counters(); }
  Result<std::unique_ptr<CheckedComm>> split(int color, int key) override;
  Status grouped(const std::function<Status()>& issue) override { return c_->grouped(issue); }

 private:
  std::unique_ptr<comm::Communicator> c_;
};

struct CheckOptions {
  // Relative error allowed in AVG results. 0 (mpi): exactly the rank-order
  // sum divided by the world size. NCCL's ncclAvg scales each input by
  // 1/world before summing, which differs in the last bit at world sizes
  // that are not powers of two.
  float avg_tolerance = 0;
};

// Counts checks and prints the first failures ("rank R: FAILED what") to
// stderr.
class CheckLog {
 public:
  explicit CheckLog(int rank) : rank_(rank) {}
  void check(bool ok, const std::string& what);
  int checks() const { return checks_; }
  int failures() const { return failures_; }

 private:
  int rank_;
  int checks_ = 0;
  int failures_ = 0;
};

// Every check above; allreduce is called 8 times on `c` itself (the mpi
// worker checks its host counters against that).
void run_collective_checks(CheckedComm& c, const CheckOptions& options, CheckLog* log);
// Only the all_to_all_v check among them (uneven counts, some zero).
void run_all_to_all_v_check(CheckedComm& c, CheckLog* log);

// Grouped calls (comm.h group_start/group_end, or the host's one-by-one
// fallback): a group of reduce_scatter, allgather, allreduce, reduce,
// broadcast (fp32 values whose sums depend on the order, and bf16) equals
// the same calls made one by one bit for bit; an invalid call in a group
// fails the group with an error naming the op and its place, after the
// calls before it completed; send inside a group is refused; the
// communicator works afterwards. `tolerance` is the relative error
// allowed between grouped and one-by-one reductions (0: bitwise, as the
// mpi backend and the fallback give; NCCL may pick another algorithm for a
// fused launch).
void run_grouped_checks(CheckedComm& c, float tolerance, CheckLog* log);

// Agree on the result across ranks (an allgather of the failure counts):
// rank 0 prints "OK <checks>" or "FAILED <checks>". Returns 0 when every
// rank passed, else 1.
int agree_and_report(CheckedComm& c, const CheckLog& log);

}  // namespace dscore::testing
