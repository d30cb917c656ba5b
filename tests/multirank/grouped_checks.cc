// The grouped-call checks (collective_checks.h run_grouped_checks).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/multirank/collective_checks.h"

namespace dscore::testing {
namespace {

// Values whose sums depend on the order they are added in, so a backend
// that reduced a grouped call differently would show.
float wobbly(int rank, int64_t i) {
  return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank)) *
         (1.0f + 0.1f * static_cast<float>(rank));
}
uint16_t bf16_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

// Inputs and outputs of one set of calls; two sets, made the same, are
// run one by one and grouped.
struct Calls {
  std::vector<float> rs_send, rs_recv, ag_send, ag_recv, ar_send, ar_recv, red, bc;
  std::vector<uint16_t> rs16_send, rs16_recv;

  Calls(int R, int W, int64_t n) {
    const size_t N = static_cast<size_t>(n), WN = static_cast<size_t>(W) * N;
    for (size_t i = 0; i < WN; ++i) {
      rs_send.push_back(wobbly(R, static_cast<int64_t>(i)));
      rs16_send.push_back(bf16_of(wobbly(R + 7, static_cast<int64_t>(i))));
    }
    for (size_t i = 0; i < N; ++i) {
      ag_send.push_back(wobbly(R + 3, static_cast<int64_t>(i)));
      ar_send.push_back(wobbly(R + 5, static_cast<int64_t>(i)));
      red.push_back(wobbly(R + 9, static_cast<int64_t>(i)));
      bc.push_back(R == 0 ? wobbly(11, static_cast<int64_t>(i)) : 0.0f);
    }
    rs_recv.assign(N, -1);
    ag_recv.assign(WN, -1);
    ar_recv.assign(N, -1);
    rs16_recv.assign(N, 0);
  }

  // Every call, in one order; stops at the first failure.
  Status issue(CheckedComm& c) {
    const int W = c.world_size();
    const int64_t n = static_cast<int64_t>(rs_recv.size());
    auto f32 = [](std::vector<float>& v) {
      return CommBuffer{v.data(), DSCORE_DTYPE_F32, static_cast<int64_t>(v.size())};
    };
    auto b16 = [](std::vector<uint16_t>& v) {
      return CommBuffer{v.data(), DSCORE_DTYPE_BF16, static_cast<int64_t>(v.size())};
    };
    DSCORE_RETURN_IF_ERROR(c.reduce_scatter(f32(rs_send), f32(rs_recv), DSCORE_REDUCE_SUM));
    DSCORE_RETURN_IF_ERROR(c.allgather(f32(ag_send), f32(ag_recv)));
    DSCORE_RETURN_IF_ERROR(c.allreduce(f32(ar_send), f32(ar_recv), DSCORE_REDUCE_AVG));
    const int root = W - 1;
    DSCORE_RETURN_IF_ERROR(
        c.reduce(f32(red), c.rank() == root ? f32(red) : CommBuffer{}, DSCORE_REDUCE_SUM, root));
    DSCORE_RETURN_IF_ERROR(c.broadcast(f32(bc), 0));
    DSCORE_RETURN_IF_ERROR(c.reduce_scatter(b16(rs16_send), b16(rs16_recv), DSCORE_REDUCE_SUM));
    (void)n;
    return Status::Ok();
  }
};

bool same(const std::vector<float>& a, const std::vector<float>& b, float tolerance) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (tolerance == 0) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    } else if (std::fabs(a[i] - b[i]) > tolerance * std::fabs(a[i]) + 1e-30f) {
      return false;
    }
  }
  return true;
}

void check_grouped_equals_one_by_one(CheckedComm& c, float tolerance, CheckLog* log) {
  const int R = c.rank(), W = c.world_size();
  for (int64_t n : {7, 1000}) {
    const std::string at = " n=" + std::to_string(n);
    Calls one(R, W, n), grouped(R, W, n);
    log->check(one.issue(c).ok(), "one-by-one calls" + at);
    const Status st = c.grouped([&] { return grouped.issue(c); });
    log->check(st.ok(), "grouped calls" + at + ": " + st.message());
    // Pure data movement is exact under any backend.
    log->check(same(one.ag_recv, grouped.ag_recv, 0), "grouped allgather" + at);
    log->check(same(one.bc, grouped.bc, 0), "grouped broadcast" + at);
    log->check(same(one.rs_recv, grouped.rs_recv, tolerance), "grouped reduce_scatter" + at);
    log->check(same(one.ar_recv, grouped.ar_recv, tolerance), "grouped allreduce" + at);
    log->check(same(one.red, grouped.red, tolerance), "grouped reduce" + at);
    log->check(tolerance != 0 || one.rs16_recv == grouped.rs16_recv,
               "grouped bf16 reduce_scatter" + at);
    // And the values are the collectives' (not two equal wrong answers).
    bool gathered = true;
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < n; ++i)
        gathered = gathered && grouped.ag_recv[static_cast<size_t>(r * n + i)] == wobbly(r + 3, i);
    log->check(gathered, "grouped allgather values" + at);
  }
}

void check_group_errors(CheckedComm& c, CheckLog* log) {
  const int R = c.rank(), W = c.world_size();
  const int64_t n = 5;
  std::vector<float> mine(n), gathered(static_cast<size_t>(W * n), -1), later(gathered);
  for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = wobbly(R, i);
  std::vector<float> bad_send(static_cast<size_t>(W * n + 1)), bad_recv(n);
  const Status st = c.grouped([&] {
    DSCORE_RETURN_IF_ERROR(c.allgather({mine.data(), DSCORE_DTYPE_F32, n},
                                       {gathered.data(), DSCORE_DTYPE_F32, W * n}));
    // send is not world x recv: refused.
    const Status bad = c.reduce_scatter({bad_send.data(), DSCORE_DTYPE_F32, W * n + 1},
                                        {bad_recv.data(), DSCORE_DTYPE_F32, n}, DSCORE_REDUCE_SUM);
    (void)bad;  // reported when the group ends (the host skips the calls after it)
    return c.allgather({mine.data(), DSCORE_DTYPE_F32, n}, {later.data(), DSCORE_DTYPE_F32, W * n});
  });
  log->check(!st.ok(), "an invalid call fails its group");
  log->check(st.message().find("reduce_scatter") != std::string::npos &&
                 st.message().find("op 2") != std::string::npos,
             "the group's error names the op and its place: " + st.message());
  bool first_done = true;
  for (int r = 0; r < W; ++r)
    for (int64_t i = 0; i < n; ++i)
      first_done = first_done && gathered[static_cast<size_t>(r * n + i)] == wobbly(r, i);
  log->check(first_done, "the call before the failure completed");

  float x = 1;
  const Status p2p = c.grouped([&] { return c.send({&x, DSCORE_DTYPE_F32, 1}, (R + 1) % W); });
  log->check(!p2p.ok() && p2p.message().find("cannot be grouped") != std::string::npos,
             "send is refused inside a group: " + p2p.message());

  float y = static_cast<float>(R + 1);
  log->check(
      c.allreduce({&y, DSCORE_DTYPE_F32, 1}, {&y, DSCORE_DTYPE_F32, 1}, DSCORE_REDUCE_SUM).ok() &&
          y == static_cast<float>(W * (W + 1) / 2),
      "the communicator works after a failed group");
  const Status empty = c.grouped([] { return Status::Ok(); });
  log->check(empty.ok(), "an empty group");
}

}  // namespace

void run_grouped_checks(CheckedComm& c, float tolerance, CheckLog* log) {
  check_grouped_equals_one_by_one(c, tolerance, log);
  check_group_errors(c, log);
}

}  // namespace dscore::testing
