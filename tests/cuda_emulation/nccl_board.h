// The meeting place of one emulated NCCL communicator's ranks (nccl.cc):
// a POSIX shared-memory segment named after the unique id, so ranks meet
// whether they are threads of one process or processes under mpirun. It
// holds each rank's process id and state, one chunk-sized slot per rank
// for collectives (a collective moves its data in steps: every rank
// writes its slot, all read every slot, all leave before the next step),
// one chunk-sized mailbox per ordered pair of ranks for send/recv, and a
// board for ncclCommSplit's colours. A one-rank communicator's board is
// private memory.
//
// Every wait ends when its condition holds, or returns false once this
// rank is aborted; while it waits, a peer that aborted or whose process
// is gone makes `peer_failed` true (ncclCommGetAsyncError's
// ncclRemoteError), and the wait goes on until this rank is aborted, as a
// real NCCL kernel waits for a peer that never comes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace dscore::cuda_emulation {

class Board {
 public:
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  static constexpr int kMaxRanks = 16;

  // Attaches rank `rank` of `ranks` to the board `name` (created by the
  // first rank to come); nullptr with errno set when the segment fails.
  static Board* attach(const std::string& name, int ranks, int rank);
  ~Board();
  Board(const Board&) = delete;
  Board& operator=(const Board&) = delete;

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  // Every rank attached (then the segment's name is removed).
  bool connected();
  // This rank stops: every wait of its own returns false, and the peers
  // see it as failed.
  void abort();
  bool aborted() const { return aborted_.load(); }
  bool peer_failed() const { return peer_failed_.load(); }
  // Which peer failed and how ("" before one did).
  std::string failure() const;

  // One collective step: `write` fills this rank's slot (may be empty),
  // then once every rank has written, `read(slots)` runs with every
  // rank's slot (slot r at slots + r * kChunkBytes). False when aborted.
  bool step(const std::function<void(unsigned char* mine)>& write,
            const std::function<void(const unsigned char* slots)>& read);
  // One chunk of a send to `peer` (true: sent) or a receive from `peer`
  // (true: received) when the pair's mailbox allows it now; never waits.
  bool try_send(int peer, const void* data, size_t bytes);
  bool try_receive(int peer, void* data, size_t bytes);
  // Waits once the grouped transfers can move no further (false: aborted).
  bool pause();
  // Each rank's (colour, key) for this rank's `round`-th split; false when
  // aborted.
  bool exchange_split(uint64_t round, int color, int key, int* colors, int* keys);

 private:
  struct Rank;  // one rank's process id, state and counters
  struct Header;
  static size_t header_bytes();
  static size_t segment_bytes(int ranks);
  Board(void* memory, size_t bytes, bool shared, std::string name, int ranks, int rank);
  bool wait(const std::function<bool()>& done);
  // Waits until every rank's `field` is at least `at_least`.
  bool wait_all(uint64_t Rank::*field, uint64_t at_least);
  void watch_peers();
  unsigned char* slot(int rank);
  unsigned char* mailbox(int from, int to);

  void* memory_;
  size_t bytes_;
  bool shared_;
  std::string name_;
  int ranks_, rank_;
  Header* header_;
  uint64_t steps_ = 0;  // collective steps this rank took
  bool unlinked_ = false;
  std::atomic<bool> aborted_{false}, peer_failed_{false};
  std::atomic<int> failed_rank_{-1};
  std::atomic<bool> failed_exited_{false};
};

}  // namespace dscore::cuda_emulation
