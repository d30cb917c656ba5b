// Waiting on MPI requests against the collective deadline, and the
// heartbeat board used to name the rank that did not arrive.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "mpi_comm.h"

namespace dscore::mpi_comm {
namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ns) / 1e9);
  return buf;
}

}  // namespace

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  const char* base = std::strrchr(file, '/');
  throw sdk::Error(DSCORE_UNAVAILABLE, std::string(call) + " failed at " +
                                           (base ? base + 1 : file) + ":" + std::to_string(line) +
                                           ": " + std::string(text, static_cast<size_t>(length)));
}

HeartbeatBoard::HeartbeatBoard(MPI_Comm comm, int rank, int world, int64_t timeout_ms)
    : rank_(rank), world_(world) {
  // Rank 0 picks the name; everyone learns it from a broadcast.
  uint64_t id = 0;
  if (rank == 0) id = std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32);
  MPI_Request request;
  DSCORE_MPI_CHECK(MPI_Ibcast(&id, 1, MPI_UINT64_T, 0, comm, &request));
  MpiComm waiter;
  waiter.comm = comm;
  waiter.timeout_ms = timeout_ms;
  waiter.wait(&request, 1, "bootstrap broadcast", 0, sizeof id);
  // Every rank's node name, for naming where a missing rank runs.
  constexpr int kName = 64;
  char mine[kName] = {};
  const char* node = std::getenv("DSCORE_NODE_NAME");
  if (node != nullptr && *node != '\0')
    std::strncpy(mine, node, kName - 1);
  else if (gethostname(mine, kName - 1) != 0)
    std::strncpy(mine, "?", kName - 1);
  std::vector<char> names(static_cast<size_t>(kName) * static_cast<size_t>(world));
  DSCORE_MPI_CHECK(
      MPI_Iallgather(mine, kName, MPI_CHAR, names.data(), kName, MPI_CHAR, comm, &request));
  waiter.wait(&request, 1, "bootstrap allgather", 0, names.size());
  for (int r = 0; r < world; ++r)
    hosts_.emplace_back(names.data() + static_cast<size_t>(r) * kName,
                        strnlen(names.data() + static_cast<size_t>(r) * kName, kName));
  char name[64];
  std::snprintf(name, sizeof name, "/dev/shm/dscore-comm-%016llx",
                static_cast<unsigned long long>(id));
  path_ = name;
  const size_t bytes = sizeof(BoardSlot) * static_cast<size_t>(world);
  int fd = open(name, O_RDWR | O_CREAT, 0600);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) slots_ = static_cast<BoardSlot*>(p);
  }
  if (fd >= 0) close(fd);
  if (slots_ != nullptr) {
    BoardSlot& mine = slots_[rank];
    __atomic_store_n(&mine.pid, static_cast<int64_t>(getpid()), __ATOMIC_RELAXED);
    __atomic_store_n(&mine.sequence, 0, __ATOMIC_RELAXED);
  }
}

HeartbeatBoard::~HeartbeatBoard() {
  if (slots_ != nullptr) munmap(slots_, sizeof(BoardSlot) * static_cast<size_t>(world_));
  // Every rank unlinks: ranks on other nodes have their own copy of the file.
  unlink(path_.c_str());
}

void HeartbeatBoard::enter(uint64_t sequence, const char* op) {
  if (slots_ == nullptr) return;
  BoardSlot& mine = slots_[rank_];
  std::strncpy(mine.op, op, sizeof mine.op - 1);
  __atomic_store_n(&mine.since_ns, now_ns(), __ATOMIC_RELAXED);
  __atomic_store_n(&mine.sequence, sequence, __ATOMIC_RELEASE);
}

void HeartbeatBoard::finish(uint64_t sequence) {
  if (slots_ == nullptr) return;
  BoardSlot& mine = slots_[rank_];
  __atomic_store_n(&mine.since_ns, now_ns(), __ATOMIC_RELAXED);
  __atomic_store_n(&mine.finished, sequence, __ATOMIC_RELEASE);
}

std::string HeartbeatBoard::laggards(uint64_t sequence) const {
  if (slots_ == nullptr) return "";
  std::string out;
  const int64_t now = now_ns();
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const int64_t pid = __atomic_load_n(&slots_[r].pid, __ATOMIC_RELAXED);
    const uint64_t seq = __atomic_load_n(&slots_[r].sequence, __ATOMIC_ACQUIRE);
    std::string what;
    if (pid <= 0) {
      what = "rank " + std::to_string(r) + " runs on node " + hosts_[static_cast<size_t>(r)] +
             " (no heartbeat here)";
    } else if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      what =
          "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") is no longer running";
    } else if (seq < sequence) {
      char op[sizeof slots_[r].op + 1] = {};
      std::memcpy(op, slots_[r].op, sizeof slots_[r].op);
      const uint64_t finished = __atomic_load_n(&slots_[r].finished, __ATOMIC_ACQUIRE);
      const std::string since =
          seconds(now - __atomic_load_n(&slots_[r].since_ns, __ATOMIC_RELAXED));
      std::string state;
      if (seq == 0)
        state = "it has entered no collective yet";
      else if (finished == seq)
        state = "its last collective, " + std::string(op) + " #" + std::to_string(seq) +
                ", finished " + since + " ago (it is busy or stuck outside communication)";
      else
        state =
            "it is still in " + std::string(op) + " #" + std::to_string(seq) + " after " + since;
      what = "rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
             ") has not reached it: " + state;
    }
    if (!what.empty()) out += (out.empty() ? "" : "; ") + what;
  }
  return out;
}

uint64_t MpiComm::begin(const char* op) {
  sequence += 1;
  if (board != nullptr) board->enter(sequence, op);
  return sequence;
}

void MpiComm::wait(MPI_Request* requests, int count, const char* op, uint64_t seq, size_t bytes) {
  const int64_t deadline = now_ns() + timeout_ms * 1000000;
  // Poll with a short back-off: MPI progresses inside MPI_Testall, and a
  // tight spin would steal a core from the compute thread.
  int64_t pause_ns = 0;
  for (;;) {
    int done = 0;
    DSCORE_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) {
      if (board != nullptr) board->finish(seq);
      return;
    }
    if (now_ns() > deadline) {
      std::string message = std::string(op) + " #" + std::to_string(seq) + " (" +
                            std::to_string(bytes) + " bytes) did not complete within " +
                            seconds(timeout_ms * 1000000) + " on rank " + std::to_string(rank);
      const std::string who = board != nullptr ? board->laggards(seq) : "";
      message += who.empty() ? ": a peer died or hung" : ": " + who;
      message += " (raise \"comm\": {\"timeout_ms\": ...} if the job is just slow)";
      throw sdk::Error(DSCORE_DEADLINE_EXCEEDED, message);
    }
    if (pause_ns == 0) {
      pause_ns = 1000;
      sched_yield();
    } else {
      timespec ts{0, static_cast<long>(pause_ns)};
      nanosleep(&ts, nullptr);
      pause_ns = std::min<int64_t>(pause_ns * 2, 200000);
    }
  }
}

}  // namespace dscore::mpi_comm
