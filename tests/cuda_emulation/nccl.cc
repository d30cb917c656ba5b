// NCCL for the CUDA emulation, across ranks that are threads of one process
// or processes (under mpirun): the ranks of a communicator meet on a
// shared-memory board named after the unique id (nccl_board.h). A call
// (or a group, at ncclGroupEnd) is enqueued on its stream and runs there
// (streams.cc), so it returns at once and a rank that never comes holds
// the stream, as on GPUs. Results are the same bits on every rank:
// reductions run in rank order, 16-bit floats summed in fp32 and rounded
// once, ncclAvg on floats scaling each input by 1/ranks first (as NCCL's
// pre-multiplied sum), on integers dividing the sum. A communicator of
// more ranks connects in the background (ncclCommGetAsyncError says
// ncclInProgress until every rank came); a peer that aborted or whose
// process is gone shows as ncclRemoteError while the stream waits, until
// this rank aborts too. A communicator runs its operations one at a time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emulation.h"
#include "nccl_board.h"

using dscore::cuda_emulation::Board;

struct ncclComm {
  std::string name;  // the board's
  std::unique_ptr<Board> board;
  std::mutex running;  // one operation at a time
  std::mutex mutex;
  std::condition_variable idle;
  int pending = 0;  // operations enqueued and not yet run
  bool finalizing = false;
  uint64_t splits = 0;
  std::atomic<bool> splitting{false};
  std::thread splitter;  // a split in progress

  void add_pending(int n) {
    std::lock_guard<std::mutex> lock(mutex);
    pending += n;
    if (pending == 0) idle.notify_all();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex);
    idle.wait(lock, [&] { return pending == 0; });
  }
  bool busy() {
    std::lock_guard<std::mutex> lock(mutex);
    return pending > 0;
  }
};

namespace {

enum class Kind { kAllReduce, kReduce, kBroadcast, kAllGather, kReduceScatter, kSend, kRecv };

struct Op {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // per rank where the collective says so
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;  // or the peer
  ncclComm_t comm;
  cudaStream_t stream;
};

// Calls between ncclGroupStart and ncclGroupEnd, per thread as NCCL's.
thread_local int t_group_depth = 0;
thread_local std::vector<Op> t_group;
thread_local ncclResult_t t_group_error = ncclSuccess;

size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

// The element type as reduced: 16-bit floats widen to float.
template <typename T>
struct Wide {
  using type = T;
  static T in(T v) { return v; }
  static T out(T v) { return v; }
};
template <>
struct Wide<__half> {
  using type = float;
  static float in(__half v) { return __half2float(v); }
  static __half out(float v) { return __float2half_rn(v); }
};
template <>
struct Wide<__nv_bfloat16> {
  using type = float;
  static float in(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __nv_bfloat16 out(float v) { return __float2bfloat16_rn(v); }
};

// out[i] = the reduction of slot r's element i over every rank, in rank order.
template <typename T>
void reduce_typed(ncclRedOp_t op, const unsigned char* slots, int ranks, size_t n, void* out) {
  using W = typename Wide<T>::type;
  constexpr bool kFloat = std::is_floating_point_v<W>;
  const auto at = [&](int r, size_t i) {
    T v;
    std::memcpy(&v, slots + static_cast<size_t>(r) * Board::kChunkBytes + i * sizeof(T), sizeof v);
    W w = Wide<T>::in(v);
    if constexpr (kFloat)
      if (op == ncclAvg) w *= W(1) / static_cast<W>(ranks);
    return w;
  };
  for (size_t i = 0; i < n; ++i) {
    W acc = at(0, i);
    for (int r = 1; r < ranks; ++r) {
      const W v = at(r, i);
      switch (op) {
        case ncclProd:
          acc = static_cast<W>(acc * v);
          break;
        case ncclMin:
          acc = std::min(acc, v);
          break;
        case ncclMax:
          acc = std::max(acc, v);
          break;
        default:  // ncclSum, ncclAvg
          acc = static_cast<W>(acc + v);
      }
    }
    if constexpr (!kFloat)
      if (op == ncclAvg) acc = static_cast<W>(acc / static_cast<W>(ranks));
    const T result = Wide<T>::out(acc);
    std::memcpy(static_cast<unsigned char*>(out) + i * sizeof(T), &result, sizeof result);
  }
}

void reduce(ncclDataType_t type, ncclRedOp_t op, const unsigned char* slots, int ranks, size_t n,
            void* out) {
  switch (type) {
    case ncclInt8:
      return reduce_typed<int8_t>(op, slots, ranks, n, out);
    case ncclUint8:
      return reduce_typed<uint8_t>(op, slots, ranks, n, out);
    case ncclInt32:
      return reduce_typed<int32_t>(op, slots, ranks, n, out);
    case ncclUint32:
      return reduce_typed<uint32_t>(op, slots, ranks, n, out);
    case ncclInt64:
      return reduce_typed<int64_t>(op, slots, ranks, n, out);
    case ncclUint64:
      return reduce_typed<uint64_t>(op, slots, ranks, n, out);
    case ncclFloat16:
      return reduce_typed<__half>(op, slots, ranks, n, out);
    case ncclBfloat16:
      return reduce_typed<__nv_bfloat16>(op, slots, ranks, n, out);
    case ncclFloat32:
      return reduce_typed<float>(op, slots, ranks, n, out);
    default:
      return reduce_typed<double>(op, slots, ranks, n, out);
  }
}

const unsigned char* bytes_of(const void* p, size_t offset) {
  return static_cast<const unsigned char*>(p) + offset;
}
unsigned char* bytes_of(void* p, size_t offset) { return static_cast<unsigned char*>(p) + offset; }

// One collective, chunk by chunk; false when the communicator was aborted.
bool run_collective(const Op& op) {
  Board& board = *op.comm->board;
  const int ranks = board.ranks(), rank = board.rank();
  const size_t es = element_bytes(op.type), per_step = Board::kChunkBytes / es;
  // Rank `target`'s elements [offset, offset + n) of a reduction: from
  // `send` at `from` (elements), into `recv` where this rank is the target.
  const auto reduction = [&](int target, size_t from, size_t offset, size_t n) {
    return board.step(
        [&](unsigned char* mine) {
          std::memcpy(mine, bytes_of(op.send, (from + offset) * es), n * es);
        },
        [&](const unsigned char* slots) {
          if (target < 0 || target == rank)
            reduce(op.type, op.op, slots, ranks, n, bytes_of(op.recv, offset * es));
        });
  };
  for (size_t offset = 0; offset < op.count; offset += per_step) {
    const size_t n = std::min(per_step, op.count - offset);
    bool ok = true;
    switch (op.kind) {
      case Kind::kAllReduce:
        ok = reduction(-1, 0, offset, n);
        break;
      case Kind::kReduce:
        ok = reduction(op.root, 0, offset, n);
        break;
      case Kind::kReduceScatter:
        for (int t = 0; t < ranks && ok; ++t)
          ok = reduction(t, static_cast<size_t>(t) * op.count, offset, n);
        break;
      case Kind::kBroadcast:
        ok = board.step(
            [&](unsigned char* mine) {
              if (rank == op.root) std::memcpy(mine, bytes_of(op.send, offset * es), n * es);
            },
            [&](const unsigned char* slots) {
              std::memcpy(bytes_of(op.recv, offset * es),
                          slots + static_cast<size_t>(op.root) * Board::kChunkBytes, n * es);
            });
        break;
      case Kind::kAllGather:
        ok = board.step(
            [&](unsigned char* mine) { std::memcpy(mine, bytes_of(op.send, offset * es), n * es); },
            [&](const unsigned char* slots) {
              for (int r = 0; r < ranks; ++r)
                std::memmove(bytes_of(op.recv, (static_cast<size_t>(r) * op.count + offset) * es),
                             slots + static_cast<size_t>(r) * Board::kChunkBytes, n * es);
            });
        break;
      default:
        break;
    }
    if (!ok) return false;
  }
  return true;
}

// A group's sends and receives, moved a chunk at a time in whatever order
// the peers allow (a pair may send to each other at once).
bool run_transfers(const std::vector<const Op*>& transfers) {
  constexpr size_t kStep = size_t{256} << 10;  // the mailbox's size
  std::vector<size_t> done(transfers.size(), 0);
  for (;;) {
    bool finished = true, moved = false;
    for (size_t i = 0; i < transfers.size(); ++i) {
      const Op& op = *transfers[i];
      const size_t total = op.count * element_bytes(op.type);
      if (done[i] >= total) continue;
      finished = false;
      const size_t n = std::min(kStep, total - done[i]);
      Board& board = *op.comm->board;
      const bool ok = op.kind == Kind::kSend
                          ? board.try_send(op.root, bytes_of(op.send, done[i]), n)
                          : board.try_receive(op.root, bytes_of(op.recv, done[i]), n);
      if (ok) done[i] += n, moved = true;
    }
    if (finished) return true;
    if (!moved && !transfers.front()->comm->board->pause()) return false;
  }
}

void run_group(const std::vector<Op>& ops) {
  std::vector<const Op*> transfers;
  std::vector<std::unique_lock<std::mutex>> running;
  for (const Op& op : ops)
    if (std::none_of(running.begin(), running.end(),
                     [&](const auto& l) { return l.mutex() == &op.comm->running; }))
      running.emplace_back(op.comm->running);
  bool ok = true;
  for (const Op& op : ops) {
    if (op.kind == Kind::kSend || op.kind == Kind::kRecv)
      transfers.push_back(&op);
    else if (ok)
      ok = run_collective(op);
  }
  if (ok && !transfers.empty()) run_transfers(transfers);
  running.clear();
  for (const Op& op : ops) op.comm->add_pending(-1);
}

// Enqueues `ops` to run as one: on their stream, or, when they name
// several, on the first once every other has reached the group (those then
// wait for it to end).
void enqueue_group(std::vector<Op> ops) {
  for (const Op& op : ops) op.comm->add_pending(1);
  std::vector<cudaStream_t> streams;
  for (const Op& op : ops)
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end())
      streams.push_back(op.stream);
  // The legacy stream runs on the caller: it must go last, so it leads.
  std::stable_partition(streams.begin(), streams.end(),
                        [](cudaStream_t s) { return s == nullptr; });
  struct Meeting {
    std::mutex mutex;
    std::condition_variable changed;
    size_t arrived = 0;
    bool ended = false;
  };
  auto meeting = std::make_shared<Meeting>();
  const size_t others = streams.size() - 1;
  for (size_t i = 1; i < streams.size(); ++i)
    dscore::cuda_emulation::enqueue(streams[i], [meeting] {
      std::unique_lock<std::mutex> lock(meeting->mutex);
      ++meeting->arrived;
      meeting->changed.notify_all();
      meeting->changed.wait(lock, [&] { return meeting->ended; });
    });
  dscore::cuda_emulation::enqueue(streams.front(), [meeting, others, ops = std::move(ops)] {
    {
      std::unique_lock<std::mutex> lock(meeting->mutex);
      meeting->changed.wait(lock, [&] { return meeting->arrived == others; });
    }
    run_group(ops);
    std::lock_guard<std::mutex> lock(meeting->mutex);
    meeting->ended = true;
    meeting->changed.notify_all();
  });
}

ncclResult_t issue(const Op& op) {
  ncclResult_t result = ncclSuccess;
  if (op.comm == nullptr || op.comm->board == nullptr) {
    result = ncclInvalidArgument;
  } else {
    const int ranks = op.comm->board->ranks();
    const size_t es = element_bytes(op.type);
    if (es == 0 || op.op < ncclSum || op.op > ncclAvg || op.root < 0 || op.root >= ranks)
      result = ncclInvalidArgument;
    else if (op.count > 0 && ((op.kind != Kind::kRecv && op.send == nullptr) ||
                              (op.kind != Kind::kSend && op.recv == nullptr &&
                               (op.kind != Kind::kReduce || op.root == op.comm->board->rank()))))
      result = ncclInvalidArgument;
    else if (op.comm->board->aborted())
      result = ncclInvalidUsage;
  }
  if (t_group_depth > 0) {
    if (result != ncclSuccess)
      t_group_error = result;
    else
      t_group.push_back(op);
    return result;
  }
  if (result == ncclSuccess) enqueue_group({op});
  return result;
}

Op collective(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return Op{kind, send, recv, count, type, op, root, comm, stream};
}

std::string board_name(const ncclUniqueId& id) {
  static const char kHex[] = "0123456789abcdef";
  std::string name = "/dscore-nccl-";
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name;
}

ncclComm_t open_comm(const std::string& name, int ranks, int rank) {
  Board* board = Board::attach(name, ranks, rank);
  if (board == nullptr) {
    std::fprintf(stderr, "NCCL emulation: shared memory %s: %s\n", name.c_str(),
                 std::strerror(errno));
    return nullptr;
  }
  auto* comm = new ncclComm;
  comm->name = name;
  comm->board.reset(board);
  return comm;
}

void close_comm(ncclComm_t comm) {
  comm->wait_idle();
  if (comm->splitter.joinable()) comm->splitter.join();
  delete comm;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  std::random_device entropy;
  for (int i = 0; i < 16; i += 4) {
    const uint32_t word = entropy() ^ static_cast<uint32_t>(getpid()) * 2654435761u;
    std::memcpy(id->internal + i, &word, 4);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (nranks < 1 || nranks > Board::kMaxRanks || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  *comm = open_comm(board_name(id), nranks, rank);
  if (*comm == nullptr) return ncclSystemError;
  if ((*comm)->board->connected()) return ncclSuccess;
  if (config != nullptr && config->blocking == 0) return ncclInProgress;
  while (!(*comm)->board->connected()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->finalizing = true;
  return comm->pending > 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm != nullptr) close_comm(comm);
  return ncclSuccess;
}

// Its waits end (the operations they hold are dropped); the peers see it failed.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->board->abort();
  close_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr) return ncclInvalidArgument;
  bool finalizing = false;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    finalizing = comm->finalizing && comm->pending > 0;
  }
  if (comm->board->peer_failed())
    *error = ncclRemoteError;
  else if (!comm->board->connected() || comm->splitting || finalizing)
    *error = ncclInProgress;
  else
    *error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr) return ncclInvalidArgument;
  *count = comm->board->ranks();
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  *rank = comm->board->rank();
  return ncclSuccess;
}

// Every rank posts its (colour, key) on the board in the background; the
// new communicator is written to *newcomm when all have, its ranks ordered
// by key, then by rank. Non-blocking: ncclInProgress, and the parent's
// ncclCommGetAsyncError says ncclInProgress until the split is done.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  if (comm == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  if (comm->splitting) return ncclInvalidUsage;
  if (comm->splitter.joinable()) comm->splitter.join();
  *newcomm = nullptr;
  comm->splitting = true;
  const uint64_t round = ++comm->splits;
  comm->splitter = std::thread([comm, color, key, newcomm, round] {
    Board& board = *comm->board;
    std::vector<int> colors(static_cast<size_t>(board.ranks())), keys(colors.size());
    ncclComm_t made = nullptr;
    if (board.exchange_split(round, color, key, colors.data(), keys.data()) &&
        color != NCCL_SPLIT_NOCOLOR) {
      std::vector<int> members;
      for (int r = 0; r < board.ranks(); ++r)
        if (colors[static_cast<size_t>(r)] == color) members.push_back(r);
      std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
        return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
      });
      const auto me = std::find(members.begin(), members.end(), board.rank()) - members.begin();
      made = open_comm(comm->name + "-s" + std::to_string(round) + "-c" + std::to_string(color),
                       static_cast<int>(members.size()), static_cast<int>(me));
    }
    if (color != NCCL_SPLIT_NOCOLOR) __atomic_store_n(newcomm, made, __ATOMIC_RELEASE);
    comm->splitting = false;
  });
  if (config != nullptr && config->blocking == 0) return ncclInProgress;
  comm->splitter.join();
  return *newcomm == nullptr && color != NCCL_SPLIT_NOCOLOR ? ncclRemoteError : ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  if (t_group_depth++ == 0) t_group_error = ncclSuccess;
  return ncclSuccess;
}

// A group with an invalid call runs nothing of it (NCCL checks arguments
// at the call and refuses the group).
ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(t_group);
  t_group.clear();
  if (t_group_error != ncclSuccess) return t_group_error;
  if (!ops.empty()) enqueue_group(std::move(ops));
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(collective(Kind::kAllReduce, send, recv, count, type, op, 0, comm, stream));
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return issue(collective(Kind::kReduce, send, recv, count, type, op, root, comm, stream));
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return issue(collective(Kind::kBroadcast, send, recv, count, type, ncclSum, root, comm, stream));
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(collective(Kind::kAllGather, send, recv, count, type, ncclSum, 0, comm, stream));
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(collective(Kind::kReduceScatter, send, recv, count, type, op, 0, comm, stream));
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return issue(collective(Kind::kSend, send, nullptr, count, type, ncclSum, peer, comm, stream));
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return issue(collective(Kind::kRecv, nullptr, recv, count, type, ncclSum, peer, comm, stream));
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclRemoteError:
      return "remote process exited or there was a network error (NCCL emulation)";
    case ncclInvalidArgument:
      return "invalid argument (NCCL emulation)";
    case ncclInvalidUsage:
      return "invalid usage (NCCL emulation)";
    case ncclInProgress:
      return "NCCL operation in progress (NCCL emulation)";
    default:
      return "an error of the NCCL emulation";
  }
}

// What a peer's failure was (nothing else is recorded).
const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;
  text = comm != nullptr && comm->board != nullptr ? comm->board->failure() : "";
  return text.c_str();
}

}  // extern "C"
