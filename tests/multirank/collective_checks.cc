// The shared collective checks (collective_checks.h).
#include "tests/multirank/collective_checks.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace dscore::testing {
namespace {

// A value unique to (rank, index), exact in bf16/fp16 after scaling; every
// partial sum of up to 4 ranks is exact too, so the summation order of the
// backend does not matter.
float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 0.25 + (i % 7)); }

bool close(float got, float expect, float tolerance) {
  if (tolerance == 0) return got == expect;
  return std::fabs(got - expect) <= tolerance * std::fabs(expect);
}

void check_reductions(CheckedComm& c, const CheckOptions& options, CheckLog* log) {
  const int W = c.world_size(), R = c.rank();
  for (int64_t n : {1, 7, 1000, 4099}) {  // uneven sizes: allreduce pads internally
    // allreduce SUM and AVG, out of place and in place.
    std::vector<float> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) send[static_cast<size_t>(i)] = value(R, i);
    log->check(c.allreduce({send.data(), DSCORE_DTYPE_F32, n}, {recv.data(), DSCORE_DTYPE_F32, n},
                           DSCORE_REDUCE_SUM)
                   .ok(),
               "allreduce call");
    for (int64_t i = 0; i < n; ++i) {
      float expect = 0;
      for (int r = 0; r < W; ++r) expect += value(r, i);  // rank order
      log->check(recv[static_cast<size_t>(i)] == expect, "allreduce sum n=" + std::to_string(n));
    }
    log->check(c.allreduce({send.data(), DSCORE_DTYPE_F32, n}, {send.data(), DSCORE_DTYPE_F32, n},
                           DSCORE_REDUCE_AVG)
                   .ok(),
               "allreduce in place");
    for (int64_t i = 0; i < n; ++i) {
      float expect = 0;
      for (int r = 0; r < W; ++r) expect += value(r, i);
      log->check(close(send[static_cast<size_t>(i)], expect / W, options.avg_tolerance),
                 "allreduce avg n=" + std::to_string(n));
    }
    // reduce to every root, in place on the root.
    for (int root = 0; root < W; ++root) {
      std::vector<float> buf(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = value(R, i);
      CommBuffer b{buf.data(), DSCORE_DTYPE_F32, n};
      log->check(c.reduce(b, R == root ? b : CommBuffer{}, DSCORE_REDUCE_MAX, root).ok(),
                 "reduce call");
      if (R == root)
        for (int64_t i = 0; i < n; ++i)
          log->check(buf[static_cast<size_t>(i)] == value(W - 1, i), "reduce max");
    }
    // allgather: chunk r comes from rank r; in place from the own chunk.
    std::vector<float> gathered(static_cast<size_t>(n * W));
    for (int64_t i = 0; i < n; ++i) gathered[static_cast<size_t>(R * n + i)] = value(R, i);
    log->check(c.allgather({gathered.data() + R * n, DSCORE_DTYPE_F32, n},
                           {gathered.data(), DSCORE_DTYPE_F32, n * W})
                   .ok(),
               "allgather call");
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < n; ++i)
        log->check(gathered[static_cast<size_t>(r * n + i)] == value(r, i), "allgather");
  }
  // reduce_scatter in bf16: sums computed in fp32, rounded once.
  const int64_t chunk = 33;
  std::vector<uint16_t> send(static_cast<size_t>(chunk * W)), recv(static_cast<size_t>(chunk));
  for (int64_t i = 0; i < chunk * W; ++i)
    send[static_cast<size_t>(i)] = sdk::float_to_bf16(value(R, i));
  log->check(c.reduce_scatter({send.data(), DSCORE_DTYPE_BF16, chunk * W},
                              {recv.data(), DSCORE_DTYPE_BF16, chunk}, DSCORE_REDUCE_SUM)
                 .ok(),
             "reduce_scatter call");
  for (int64_t i = 0; i < chunk; ++i) {
    float expect = 0;
    for (int r = 0; r < W; ++r)
      expect += sdk::bf16_to_float(sdk::float_to_bf16(value(r, R * chunk + i)));
    log->check(recv[static_cast<size_t>(i)] == sdk::float_to_bf16(expect), "reduce_scatter bf16");
  }
}

void check_movement(CheckedComm& c, CheckLog* log) {
  const int W = c.world_size(), R = c.rank();
  // broadcast from the last rank; barrier.
  std::vector<double> b = {R == W - 1 ? 3.5 : 0.0, R == W - 1 ? -1.0 : 0.0};
  log->check(c.broadcast({b.data(), DSCORE_DTYPE_F64, 2}, W - 1).ok(), "broadcast call");
  log->check(b[0] == 3.5 && b[1] == -1.0, "broadcast");
  log->check(c.barrier().ok(), "barrier");
  // send/recv around a ring (two ranks or more): even ranks send first, odd
  // ranks receive first.
  std::vector<int32_t> out(5, R * 10), in(5, -1);
  if (W > 1) {
    const int next = (R + 1) % W, prev = (R + W - 1) % W;
    auto pass = [&] { return c.send({out.data(), DSCORE_DTYPE_I32, 5}, next); };
    auto take = [&] { return c.recv({in.data(), DSCORE_DTYPE_I32, 5}, prev); };
    const bool ok = R % 2 == 0 ? pass().ok() && take().ok() : take().ok() && pass().ok();
    log->check(ok, "send/recv calls");
    log->check(in == std::vector<int32_t>(5, prev * 10), "recv got the previous rank's values");
  }
  log->check(c.send({out.data(), DSCORE_DTYPE_I32, 5}, R).code() == DSCORE_OUT_OF_RANGE,
             "send to self refused");
  // Wire counters: every payload byte this rank sent was received somewhere
  // (nothing moves in a one-rank job).
  auto wire = c.wire_counters();
  log->check(wire.ok() && (W == 1 || (wire->bytes_sent > 0 && wire->bytes_received > 0)),
             "wire counters");
}

// all_to_all_v with uneven counts (an MoE dispatch's shape): rank R sends
// rank j (2 R + j) % 4 elements (none to some), value 1000 R + 10 j + k,
// packed in rank order with a gap of one element before each block; every
// rank receives each peer's block where its own offsets say (they differ
// from its send offsets).
void check_all_to_all_v(CheckedComm& c, CheckLog* log) {
  const int W = c.world_size(), R = c.rank();
  comm::Communicator::AllToAllLayout l;
  std::vector<int32_t> out;
  for (int j = 0; j < W; ++j) {
    out.push_back(-1);  // the gap
    l.send_offsets.push_back(static_cast<int64_t>(out.size()));
    l.send_counts.push_back((2 * R + j) % 4);
    for (int k = 0; k < (2 * R + j) % 4; ++k) out.push_back(1000 * R + 10 * j + k);
  }
  int64_t at = 0;
  for (int j = 0; j < W; ++j) {
    l.recv_offsets.push_back(at + 1);
    l.recv_counts.push_back((2 * j + R) % 4);
    at += 1 + (2 * j + R) % 4;
  }
  std::vector<int32_t> in(static_cast<size_t>(at), -7);
  const Status st = c.all_to_all_v({out.data(), DSCORE_DTYPE_I32, static_cast<int64_t>(out.size())},
                                   {in.data(), DSCORE_DTYPE_I32, at}, l);
  log->check(st.ok(), "all_to_all_v call: " + st.message());
  bool ok = true;
  for (int j = 0; j < W; ++j) {
    ok = ok && in[static_cast<size_t>(l.recv_offsets[j] - 1)] == -7;  // the gap untouched
    for (int k = 0; k < l.recv_counts[j]; ++k)
      ok = ok && in[static_cast<size_t>(l.recv_offsets[j] + k)] == 1000 * j + 10 * R + k;
  }
  log->check(ok, "all_to_all_v: each peer's block where the offsets say");
}

// "what", and the call's error where it failed.
template <typename T>
std::string with_error(const std::string& what, const Result<T>& r) {
  return r.ok() ? what : what + ": " + r.status().message();
}

// Groups (split): neighbours pair up (2 x 2 at W = 4; {0, 1}, {2} at W = 3)
// and reduce inside their pair only; then strided groups ranked by a
// descending key.
void check_groups(CheckedComm& c, CheckLog* log) {
  const int W = c.world_size(), R = c.rank();
  auto pair = c.split(R / 2, R);
  log->check(pair.ok() && *pair, with_error("split into pairs", pair));
  if (pair.ok() && *pair) {
    const int first = R - R % 2, size = std::min(2, W - first);
    log->check((*pair)->world_size() == size && (*pair)->rank() == R % 2, "pair rank and size");
    float x = static_cast<float>(R + 1);
    log->check(
        (*pair)
            ->allreduce({&x, DSCORE_DTYPE_F32, 1}, {&x, DSCORE_DTYPE_F32, 1}, DSCORE_REDUCE_SUM)
            .ok(),
        "pair allreduce call");
    float expect = 0;
    for (int r = first; r < first + size; ++r) expect += static_cast<float>(r + 1);
    log->check(x == expect, "pair allreduce stays inside the pair");
  }
  auto strided = c.split(R % 2, -R);
  log->check(strided.ok() && *strided, with_error("strided split", strided));
  if (strided.ok() && *strided) {
    const int members = (W - R % 2 + 1) / 2;
    log->check((*strided)->world_size() == members && (*strided)->rank() == (members - 1) - R / 2,
               "strided group ranked by key");
    float v = static_cast<float>(R);
    log->check((*strided)->broadcast({&v, DSCORE_DTYPE_F32, 1}, 0).ok(), "strided broadcast call");
    log->check(v == static_cast<float>(R % 2 + 2 * (members - 1)),
               "strided broadcast from the group's rank 0");
  }
  auto none = c.split(DSCORE_COMM_SPLIT_NONE, 0);
  log->check(none.ok() && !*none, with_error("split with no colour gives no group", none));
}

}  // namespace

Result<std::unique_ptr<CheckedComm>> HostCheckedComm::split(int color, int key) {
  DSCORE_ASSIGN_OR_RETURN(auto group, c_->split(color, key));
  if (!group) return std::unique_ptr<CheckedComm>();
  return std::unique_ptr<CheckedComm>(new HostCheckedComm(std::move(group)));
}

void CheckLog::check(bool ok, const std::string& what) {
  ++checks_;
  if (!ok && failures_++ < 5) std::fprintf(stderr, "rank %d: FAILED %s\n", rank_, what.c_str());
}

void run_collective_checks(CheckedComm& c, const CheckOptions& options, CheckLog* log) {
  check_reductions(c, options, log);
  check_movement(c, log);
  check_all_to_all_v(c, log);
  check_groups(c, log);
}

void run_all_to_all_v_check(CheckedComm& c, CheckLog* log) { check_all_to_all_v(c, log); }

int agree_and_report(CheckedComm& c, const CheckLog& log) {
  const int W = c.world_size();
  std::vector<double> all(static_cast<size_t>(W));
  double mine = log.failures();
  const bool gathered =
      c.allgather({&mine, DSCORE_DTYPE_F64, 1}, {all.data(), DSCORE_DTYPE_F64, W}).ok();
  double total = gathered ? 0 : 1;
  for (double x : all) total += x;
  if (c.rank() == 0) std::printf(total == 0 ? "OK %d\n" : "FAILED %d\n", log.checks());
  std::fflush(stdout);
  return total == 0 ? 0 : 1;
}

}  // namespace dscore::testing
