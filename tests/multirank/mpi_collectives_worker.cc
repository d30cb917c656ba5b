// Runs under mpirun: checks every collective of the "mpi" comm plugin on
// known values through the host's Communicator (the counted path the engine
// uses). Prints "OK <checks>" on rank 0 when every rank passed, else the
// first mismatch, and exits non-zero.
#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/job_env.h"
#include "core/plugin_host/registry.h"

namespace {

using dscore::comm::CommBuffer;

int failures = 0, checks = 0;
void check(bool ok, const std::string& what, int rank) {
  ++checks;
  if (!ok && failures++ < 5) std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
}

// A value unique to (rank, index), exact in bf16/fp16 after scaling.
float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 0.25 + (i % 7)); }

}  // namespace

int main() {
  auto env = dscore::comm::detect_job_env();
  auto registry =
      dscore::plugin_host::PluginRegistry::open({{DSCORE_BUILD_PLUGIN_DIR}, {true}, {"test"}});
  if (!env.ok() || !registry.ok()) return 2;
  dscore::config::CommConfig config;
  config.backend = "mpi";
  config.timeout_ms = 20000;
  auto comm = dscore::comm::Communicator::create(**registry, config, *env, 1);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().message().c_str());
    return 2;
  }
  auto& c = **comm;
  const int W = c.world_size(), R = c.rank();

  for (int64_t n : {1, 7, 1000, 4099}) {  // uneven sizes: allreduce pads internally
    // allreduce SUM and AVG, out of place and in place.
    std::vector<float> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) send[static_cast<size_t>(i)] = value(R, i);
    check(c.allreduce({send.data(), DSCORE_DTYPE_F32, n}, {recv.data(), DSCORE_DTYPE_F32, n},
                      DSCORE_REDUCE_SUM)
              .ok(),
          "allreduce call", R);
    for (int64_t i = 0; i < n; ++i) {
      float expect = 0;
      for (int r = 0; r < W; ++r) expect += value(r, i);  // rank order
      check(recv[static_cast<size_t>(i)] == expect, "allreduce sum n=" + std::to_string(n), R);
    }
    check(c.allreduce({send.data(), DSCORE_DTYPE_F32, n}, {send.data(), DSCORE_DTYPE_F32, n},
                      DSCORE_REDUCE_AVG)
              .ok(),
          "allreduce in place", R);
    for (int64_t i = 0; i < n; ++i) {
      float expect = 0;
      for (int r = 0; r < W; ++r) expect += value(r, i);
      check(send[static_cast<size_t>(i)] == expect / W, "allreduce avg n=" + std::to_string(n), R);
    }
    // reduce to every root, in place on the root.
    for (int root = 0; root < W; ++root) {
      std::vector<float> buf(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = value(R, i);
      CommBuffer b{buf.data(), DSCORE_DTYPE_F32, n};
      check(c.reduce(b, R == root ? b : CommBuffer{}, DSCORE_REDUCE_MAX, root).ok(), "reduce call",
            R);
      if (R == root)
        for (int64_t i = 0; i < n; ++i)
          check(buf[static_cast<size_t>(i)] == value(W - 1, i), "reduce max", R);
    }
    // allgather: chunk r comes from rank r; in place from the own chunk.
    std::vector<float> gathered(static_cast<size_t>(n * W));
    for (int64_t i = 0; i < n; ++i) gathered[static_cast<size_t>(R * n + i)] = value(R, i);
    check(c.allgather({gathered.data() + R * n, DSCORE_DTYPE_F32, n},
                      {gathered.data(), DSCORE_DTYPE_F32, n * W})
              .ok(),
          "allgather call", R);
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < n; ++i)
        check(gathered[static_cast<size_t>(r * n + i)] == value(r, i), "allgather", R);
  }
  // reduce_scatter in bf16: sums computed in fp32, rounded once.
  {
    const int64_t chunk = 33;
    std::vector<uint16_t> send(static_cast<size_t>(chunk * W)), recv(static_cast<size_t>(chunk));
    for (int64_t i = 0; i < chunk * W; ++i)
      send[static_cast<size_t>(i)] = dscore::sdk::float_to_bf16(value(R, i));
    check(c.reduce_scatter({send.data(), DSCORE_DTYPE_BF16, chunk * W},
                           {recv.data(), DSCORE_DTYPE_BF16, chunk}, DSCORE_REDUCE_SUM)
              .ok(),
          "reduce_scatter call", R);
    for (int64_t i = 0; i < chunk; ++i) {
      float expect = 0;
      for (int r = 0; r < W; ++r)
        expect += dscore::sdk::bf16_to_float(dscore::sdk::float_to_bf16(value(r, R * chunk + i)));
      check(recv[static_cast<size_t>(i)] == dscore::sdk::float_to_bf16(expect),
            "reduce_scatter bf16", R);
    }
  }
  // broadcast from the last rank; barrier.
  {
    std::vector<double> b = {R == W - 1 ? 3.5 : 0.0, R == W - 1 ? -1.0 : 0.0};
    check(c.broadcast({b.data(), DSCORE_DTYPE_F64, 2}, W - 1).ok(), "broadcast call", R);
    check(b[0] == 3.5 && b[1] == -1.0, "broadcast", R);
    check(c.barrier().ok(), "barrier", R);
  }
  // send/recv around a ring: even ranks send first, odd ranks receive first.
  {
    const int next = (R + 1) % W, prev = (R + W - 1) % W;
    std::vector<int32_t> out(5, R * 10), in(5, -1);
    auto pass = [&] { return c.send({out.data(), DSCORE_DTYPE_I32, 5}, next); };
    auto take = [&] { return c.recv({in.data(), DSCORE_DTYPE_I32, 5}, prev); };
    const bool ok = R % 2 == 0 ? pass().ok() && take().ok() : take().ok() && pass().ok();
    check(ok, "send/recv calls", R);
    check(in == std::vector<int32_t>(5, prev * 10), "recv got the previous rank's values", R);
    check(c.counters().at("send").bytes == 20 && c.counters().at("recv").bytes == 20,
          "send/recv counters", R);
    check(c.send({out.data(), DSCORE_DTYPE_I32, 5}, R).code() == DSCORE_OUT_OF_RANGE,
          "send to self refused", R);
  }
  // Wire counters: every payload byte this rank sent was received somewhere.
  auto wire = c.wire_counters();
  check(wire.ok() && wire->bytes_sent > 0 && wire->bytes_received > 0, "wire counters", R);
  // Host-side counters: allreduce counted its full buffer.
  check(c.counters().at("allreduce").calls == 8, "host counters", R);

  // Groups (MPI_Comm_split): neighbours pair up (2 x 2 at W = 4; {0, 1}, {2}
  // at W = 3) and reduce inside their pair only; then strided groups ranked
  // by a descending key.
  {
    auto pair = c.split(R / 2, R);
    check(pair.ok() && *pair, "split into pairs", R);
    if (pair.ok() && *pair) {
      const int first = R - R % 2, size = std::min(2, W - first);
      check((*pair)->world_size() == size && (*pair)->rank() == R % 2, "pair rank and size", R);
      float x = static_cast<float>(R + 1);
      check((*pair)
                ->allreduce({&x, DSCORE_DTYPE_F32, 1}, {&x, DSCORE_DTYPE_F32, 1}, DSCORE_REDUCE_SUM)
                .ok(),
            "pair allreduce call", R);
      float expect = 0;
      for (int r = first; r < first + size; ++r) expect += static_cast<float>(r + 1);
      check(x == expect, "pair allreduce stays inside the pair", R);
    }
    auto strided = c.split(R % 2, -R);
    check(strided.ok() && *strided, "strided split", R);
    if (strided.ok() && *strided) {
      const int members = (W - R % 2 + 1) / 2;
      check((*strided)->world_size() == members && (*strided)->rank() == (members - 1) - R / 2,
            "strided group ranked by key", R);
      float v = static_cast<float>(R);
      check((*strided)->broadcast({&v, DSCORE_DTYPE_F32, 1}, 0).ok(), "strided broadcast call", R);
      check(v == static_cast<float>(R % 2 + 2 * (members - 1)),
            "strided broadcast from the group's rank 0", R);
    }
  }

  int bad = failures;
  std::vector<double> all(static_cast<size_t>(W));
  double mine = bad;
  (void)c.allgather({&mine, DSCORE_DTYPE_F64, 1}, {all.data(), DSCORE_DTYPE_F64, W});
  double total = 0;
  for (double x : all) total += x;
  if (R == 0) std::printf(total == 0 ? "OK %d\n" : "FAILED %d\n", checks);
  return total == 0 ? 0 : 1;
}
