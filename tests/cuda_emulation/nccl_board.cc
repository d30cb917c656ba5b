// The emulated NCCL communicator's shared segment (nccl_board.h).
#include "nccl_board.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace dscore::cuda_emulation {
namespace {

constexpr size_t kMailboxBytes = size_t{256} << 10;
constexpr size_t kPage = 4096;

// The segment starts zeroed (ftruncate, calloc): every counter begins at 0.
uint64_t load(const uint64_t& field) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(field)).load(std::memory_order_acquire);
}
void store(uint64_t& field, uint64_t value) {
  std::atomic_ref<uint64_t>(field).store(value, std::memory_order_release);
}

}  // namespace

struct Board::Rank {
  uint64_t pid, attached, aborted;
  uint64_t arrived, left;            // collective steps written, read
  uint64_t split_round, split_read;  // splits posted, read
  uint64_t split_color, split_key;   // (as unsigned)
};

struct Board::Header {
  Rank rank[kMaxRanks];
  struct Mailbox {
    uint64_t produced, consumed, bytes;  // chunks put, chunks taken, the last one's size
  } mail[kMaxRanks][kMaxRanks];
};

size_t Board::header_bytes() { return (sizeof(Header) + kPage - 1) / kPage * kPage; }

size_t Board::segment_bytes(int ranks) {
  const auto n = static_cast<size_t>(ranks);
  return header_bytes() + n * kChunkBytes + n * n * kMailboxBytes;
}

Board* Board::attach(const std::string& name, int ranks, int rank) {
  if (ranks < 1 || ranks > kMaxRanks || rank < 0 || rank >= ranks) {
    errno = EINVAL;
    return nullptr;
  }
  const size_t bytes = segment_bytes(ranks);
  void* memory = nullptr;
  if (ranks == 1) {
    memory = std::calloc(1, bytes);
    if (memory == nullptr) return nullptr;
  } else {
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) return nullptr;
    // Every rank sizes it alike; the pages stay unbacked until written.
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      close(fd);
      errno = e;
      return nullptr;
    }
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (memory == MAP_FAILED) return nullptr;
  }
  auto* board = new Board(memory, bytes, ranks > 1, name, ranks, rank);
  Rank& me = board->header_->rank[rank];
  store(me.pid, static_cast<uint64_t>(getpid()));
  store(me.attached, 1);
  return board;
}

Board::Board(void* memory, size_t bytes, bool shared, std::string name, int ranks, int rank)
    : memory_(memory),
      bytes_(bytes),
      shared_(shared),
      name_(std::move(name)),
      ranks_(ranks),
      rank_(rank),
      header_(static_cast<Header*>(memory)) {}

Board::~Board() {
  if (!shared_) {
    std::free(memory_);
    return;
  }
  if (!unlinked_) shm_unlink(name_.c_str());  // a peer that never came
  munmap(memory_, bytes_);
}

unsigned char* Board::slot(int rank) {
  return static_cast<unsigned char*>(memory_) + header_bytes() +
         static_cast<size_t>(rank) * kChunkBytes;
}

unsigned char* Board::mailbox(int from, int to) {
  const auto n = static_cast<size_t>(ranks_);
  return static_cast<unsigned char*>(memory_) + header_bytes() + n * kChunkBytes +
         (static_cast<size_t>(from) * n + static_cast<size_t>(to)) * kMailboxBytes;
}

bool Board::connected() {
  for (int r = 0; r < ranks_; ++r)
    if (load(header_->rank[r].attached) == 0) return false;
  if (shared_ && !unlinked_) {
    shm_unlink(name_.c_str());  // every rank has it open; the first unlink wins
    unlinked_ = true;
  }
  return true;
}

void Board::abort() {
  aborted_ = true;
  store(header_->rank[rank_].aborted, 1);
}

void Board::watch_peers() {
  const auto self = static_cast<uint64_t>(getpid());
  for (int r = 0; r < ranks_; ++r) {
    if (r == rank_) continue;
    const Rank& peer = header_->rank[r];
    const uint64_t pid = load(peer.pid);
    const bool gone =
        pid != 0 && pid != self && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (load(peer.aborted) == 0 && !gone) continue;
    if (!peer_failed_.exchange(true)) {
      failed_exited_ = gone;
      failed_rank_ = r;
    }
  }
}

std::string Board::failure() const {
  const int r = failed_rank_.load();
  if (r < 0) return "";
  if (!failed_exited_) return "rank " + std::to_string(r) + " aborted its communicator";
  return "rank " + std::to_string(r) + "'s process (pid " +
         std::to_string(load(header_->rank[r].pid)) + ") is gone";
}

bool Board::wait(const std::function<bool()>& done) {
  auto next_watch = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    if (done()) return true;
    if (aborted_) return false;
    if (std::chrono::steady_clock::now() >= next_watch) {
      watch_peers();
      next_watch = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
    }
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

bool Board::wait_all(uint64_t Rank::*field, uint64_t at_least) {
  return wait([&] {
    for (int r = 0; r < ranks_; ++r)
      if (load(header_->rank[r].*field) < at_least) return false;
    return true;
  });
}

bool Board::step(const std::function<void(unsigned char*)>& write,
                 const std::function<void(const unsigned char*)>& read) {
  const uint64_t s = ++steps_;
  write(slot(rank_));
  store(header_->rank[rank_].arrived, s);
  if (!wait_all(&Rank::arrived, s)) return false;
  read(slot(0));
  store(header_->rank[rank_].left, s);  // the slots may be written again
  return wait_all(&Rank::left, s);
}

bool Board::try_send(int peer, const void* data, size_t bytes) {
  Header::Mailbox& m = header_->mail[rank_][peer];
  const uint64_t produced = load(m.produced);
  if (produced != load(m.consumed)) return false;  // the last chunk is still there
  if (bytes > 0) std::memcpy(mailbox(rank_, peer), data, bytes);
  store(m.bytes, bytes);
  store(m.produced, produced + 1);
  return true;
}

bool Board::try_receive(int peer, void* data, size_t bytes) {
  Header::Mailbox& m = header_->mail[peer][rank_];
  const uint64_t consumed = load(m.consumed);
  if (load(m.produced) == consumed) return false;
  const size_t sent = load(m.bytes);
  std::memcpy(data, mailbox(peer, rank_), sent < bytes ? sent : bytes);
  store(m.consumed, consumed + 1);
  return true;
}

bool Board::pause() {
  if (aborted_) return false;
  watch_peers();
  std::this_thread::sleep_for(std::chrono::microseconds(20));
  return !aborted_;
}

bool Board::exchange_split(uint64_t round, int color, int key, int* colors, int* keys) {
  Rank& me = header_->rank[rank_];
  store(me.split_color, static_cast<uint32_t>(color));
  store(me.split_key, static_cast<uint32_t>(key));
  store(me.split_round, round);
  if (!wait_all(&Rank::split_round, round)) return false;
  for (int r = 0; r < ranks_; ++r) {
    colors[r] = static_cast<int>(static_cast<uint32_t>(load(header_->rank[r].split_color)));
    keys[r] = static_cast<int>(static_cast<uint32_t>(load(header_->rank[r].split_key)));
  }
  store(me.split_read, round);  // the next split may overwrite them
  return wait_all(&Rank::split_read, round);
}

}  // namespace dscore::cuda_emulation
