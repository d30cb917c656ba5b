// State of one MPI comm-backend instance and the helpers its collectives
// share: the MPI check macro, waiting on requests against the collective
// deadline, and the heartbeat board that lets a timed-out rank say which
// peer never arrived.
#pragma once

#include <dscore/comm.h>
#include <mpi.h>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dscore::mpi_comm {

// One check per MPI call: an MPI error becomes sdk::Error naming the call,
// file and line, and MPI's own text.
void throw_mpi_error(int code, const char* call, const char* file, int line);
#define DSCORE_MPI_CHECK(call)                                                                   \
  do {                                                                                           \
    int _rc = (call);                                                                            \
    if (_rc != MPI_SUCCESS) ::dscore::mpi_comm::throw_mpi_error(_rc, #call, __FILE__, __LINE__); \
  } while (0)

// Per-rank slot of the heartbeat board: a small shared-memory file
// (/dev/shm) every rank on this node writes before each collective.
struct BoardSlot {
  int64_t pid;
  uint64_t sequence;  // collectives entered so far
  uint64_t finished;  // the last one that completed
  int64_t since_ns;   // CLOCK_MONOTONIC when `sequence` was entered or finished
  char op[24];
};

class HeartbeatBoard {
 public:
  // Collective (all ranks). Falls back to no board (empty messages) when
  // /dev/shm is unavailable; never fails the backend.
  HeartbeatBoard(MPI_Comm comm, int rank, int world, int64_t timeout_ms);
  ~HeartbeatBoard();
  void enter(uint64_t sequence, const char* op);
  void finish(uint64_t sequence);
  // "rank 1 (pid 42) has not reached it: still in allgather #56 for 5.1 s;
  // rank 2 (pid 43) is no longer running" — or "" without a board.
  std::string laggards(uint64_t sequence) const;

 private:
  BoardSlot* slots_ = nullptr;
  int rank_ = 0;
  int world_ = 0;
  std::string path_;
  std::vector<std::string> hosts_;  // every rank's node name (DSCORE_NODE_NAME or hostname)
};

struct MpiComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int world = 1;
  int64_t timeout_ms = 300000;
  uint64_t sequence = 0;  // collectives issued, the same count on every rank
  HeartbeatBoard* board = nullptr;
  // Grow-only scratch, reused across calls (the comm thread calls one
  // collective at a time).
  std::vector<unsigned char> scratch_a, scratch_b;
  std::vector<double> reduce_scratch;
  dscore_comm_counters counters{};

  // Grouped calls (comm.h group_start/group_end): while `grouping`, a
  // collective starts its MPI request and leaves it, with the work that
  // follows its completion, in `pending`; group_end waits for each in
  // order and runs that work (which may start a further request: an
  // allreduce's allgather half). Each grouped collective gets scratch of
  // its own, kept until the group ends.
  struct Pending {
    const char* op;
    uint64_t sequence;
    size_t bytes;
    int position;  // 1-based, among the calls of the group
    MPI_Request request;
    std::function<void()> then;
  };
  bool grouping = false;
  int group_calls = 0;
  int position = 0;  // of the collective being issued or finished, in its group
  std::vector<Pending> pending;
  // The groups' scratch, kept from group to group (a ZeRO bucket's reduces
  // are a group each step: fresh buffers were zeroed and page-faulted in
  // every time) and never value-initialised; the first group_used are the
  // open group's.
  struct ScratchBuffer {
    std::unique_ptr<unsigned char[]> data;
    size_t bytes = 0;
  };
  std::vector<ScratchBuffer> group_scratch;
  size_t group_used = 0;

  // Mark a collective as entered (board + sequence); returns its number.
  uint64_t begin(const char* op);
  // Completes `request` (then runs `then`): at once, or at group_end while
  // grouping.
  void complete(MPI_Request request, const char* op, uint64_t sequence, size_t bytes,
                std::function<void()> then);
  // `bytes` of scratch: the shared buffer `reuse` outside a group, a
  // buffer of the group's own inside one.
  unsigned char* scratch(std::vector<unsigned char>* reuse, size_t bytes);
  // Called first by every collective: inside a group, rejects `op` unless
  // groupable and numbers it.
  void enter(const char* op, bool groupable);
  void group_start();
  // Waits for every pending collective in order; the first failure is
  // rethrown naming the op and its position once all others completed
  // (a missed deadline is thrown at once: the job ends).
  void group_end();
  // Wait for `requests` until the deadline (then marks the collective
  // finished on the board); on timeout throws
  // DEADLINE_EXCEEDED naming the op, its number, the bytes and the laggards.
  void wait(MPI_Request* requests, int count, const char* op, uint64_t sequence, size_t bytes);
};

}  // namespace dscore::mpi_comm
