// Expert parallelism's movement of tokens (host memory): an MoE layer's E
// experts are spread over an expert group of P ranks, rank r holding the
// E / P experts [r E / P, (r + 1) E / P). Each rank routes its own tokens
// and packs the kept routes expert by expert (dispatch.h); as the experts
// are numbered owner by owner, the rows for rank p are one contiguous
// range of that packing. An all-to-all of counts tells each rank how many
// rows every source sends each of its experts, one all-to-all with
// variable counts moves the rows (no padding rows, unlike DeepSpeed's
// (E, capacity, C) buffer), and they are regrouped expert by expert so each
// local expert multiplies one contiguous block. The way back is the exact
// inverse: combine() returns each row to the rank and place it came from.
//
// Backward moves the same shapes: the gradients at the experts' outputs go
// out with dispatch() and the gradients at their inputs come back with
// combine(), so one ExpertExchange serves a layer's forward and backward.
// The collectives are injected (the model's expert-parallel communicator
// in a run, an in-memory group in the tests); counts and offsets are in
// elements.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"

namespace dscore::transformer::moe {

// Per peer p: send[send_offsets[p], + send_counts[p]) to p, and what p
// sends here into recv[recv_offsets[p], + recv_counts[p]).
struct AllToAllLayout {
  std::vector<int64_t> send_counts, send_offsets, recv_counts, recv_offsets;
};
// The group's all-to-all of `n` int64 per peer (send[p n .. (p + 1) n) to
// peer p, recv[p n ..) from p), and its all-to-all with variable counts.
using AllToAllCounts = std::function<void(const int64_t* send, int64_t* recv, int64_t n)>;
template <class T>
using AllToAllV = std::function<void(const T* send, T* recv, const AllToAllLayout& layout)>;

class ExpertExchange {
 public:
  // `packing`: this rank's routes packed over all `experts` (offset has
  // experts + 1 entries); rank `rank` of `ranks`. Collective (the counts).
  ExpertExchange(const Packing& packing, int64_t experts, int ranks, int rank,
                 const AllToAllCounts& all_to_all_counts)
      : ranks_(ranks), local_experts_(experts / ranks) {
    if (ranks < 1 || experts % ranks != 0 || rank < 0 || rank >= ranks ||
        static_cast<int64_t>(packing.offset.size()) != experts + 1)
      throw std::invalid_argument("moe expert exchange: " + std::to_string(experts) +
                                  " experts do not split over " + std::to_string(ranks) +
                                  " ranks (or the packing is of another layer)");
    const int64_t El = local_experts_;
    // What this rank sends each peer, per expert of that peer.
    std::vector<int64_t> mine(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e)
      mine[static_cast<size_t>(e)] =
          packing.offset[static_cast<size_t>(e + 1)] - packing.offset[static_cast<size_t>(e)];
    from_source_.assign(static_cast<size_t>(experts), 0);  // [source][local expert]
    all_to_all_counts(mine.data(), from_source_.data(), El);
    sent_.resize(static_cast<size_t>(ranks));
    received_.resize(static_cast<size_t>(ranks));
    for (int p = 0; p < ranks; ++p) {
      const auto first = static_cast<size_t>(p * El);
      sent_[static_cast<size_t>(p)] =
          packing.offset[first + static_cast<size_t>(El)] - packing.offset[first];
      int64_t n = 0;
      for (int64_t j = 0; j < El; ++j) n += source_rows(p, j);
      received_[static_cast<size_t>(p)] = n;
    }
    // Local expert j's rows, source by source, from expert_offset_[j].
    expert_offset_.assign(static_cast<size_t>(El + 1), 0);
    for (int64_t j = 0; j < El; ++j) {
      int64_t n = 0;
      for (int p = 0; p < ranks; ++p) n += source_rows(p, j);
      expert_offset_[static_cast<size_t>(j + 1)] = expert_offset_[static_cast<size_t>(j)] + n;
    }
    sent_rows_ = packing.rows();
  }

  // Rows this rank's experts compute, and local expert j's among them:
  // [expert_offset(j), expert_offset(j + 1)).
  int64_t expert_rows() const { return expert_offset_.back(); }
  int64_t expert_offset(int64_t j) const { return expert_offset_[static_cast<size_t>(j)]; }
  // All of them: local experts + 1 entries, as a Packing's offset.
  const std::vector<int64_t>& expert_offsets() const { return expert_offset_; }
  int64_t local_experts() const { return local_experts_; }
  // Rows this rank sends (its kept routes) and receives, in all.
  int64_t sent_rows() const { return sent_rows_; }
  // Bytes one dispatch and its combine send from this rank, rows of W
  // values of `value_bytes`: its rows out, its experts' rows back.
  int64_t sent_bytes(int64_t W, int64_t value_bytes) const {
    return (sent_rows_ + expert_rows()) * W * value_bytes;
  }
  // Bytes of the counts' all-to-all the constructor made.
  int64_t counts_bytes() const {
    return static_cast<int64_t>(from_source_.size() * sizeof(int64_t));
  }

  // rows (sent_rows() x W, this rank's packing) to expert_rows (expert_rows()
  // x W, local expert by local expert).
  template <class T>
  void dispatch(const T* rows, T* expert_rows, int64_t W, const AllToAllV<T>& all_to_all_v) const {
    std::vector<T> arrived(static_cast<size_t>(expert_rows_count() * W));
    all_to_all_v(rows, arrived.data(), layout(W, /*outbound=*/true));
    regroup(arrived.data(), expert_rows, W, /*to_experts=*/true);
  }
  // The inverse: expert_rows back to the ranks and places they came from.
  template <class T>
  void combine(const T* expert_rows, T* rows, int64_t W, const AllToAllV<T>& all_to_all_v) const {
    std::vector<T> leaving(static_cast<size_t>(expert_rows_count() * W));
    regroup(expert_rows, leaving.data(), W, /*to_experts=*/false);
    all_to_all_v(leaving.data(), rows, layout(W, /*outbound=*/false));
  }

 private:
  int64_t expert_rows_count() const { return expert_offset_.back(); }
  int64_t source_rows(int p, int64_t j) const {
    return from_source_[static_cast<size_t>(p * local_experts_ + j)];
  }
  // Outbound: this rank's packing to the owners (arriving grouped by source);
  // inbound: the reverse.
  AllToAllLayout layout(int64_t W, bool outbound) const {
    AllToAllLayout l;
    const std::vector<int64_t>& send = outbound ? sent_ : received_;
    const std::vector<int64_t>& recv = outbound ? received_ : sent_;
    int64_t s = 0, r = 0;
    for (int p = 0; p < ranks_; ++p) {
      l.send_offsets.push_back(s * W);
      l.send_counts.push_back(send[static_cast<size_t>(p)] * W);
      l.recv_offsets.push_back(r * W);
      l.recv_counts.push_back(recv[static_cast<size_t>(p)] * W);
      s += send[static_cast<size_t>(p)];
      r += recv[static_cast<size_t>(p)];
    }
    return l;
  }
  // Between the arrival order (source-major: source p's rows for local
  // expert 0, 1, ...) and expert-major order (expert j's rows from source
  // 0, 1, ...), copying rows of W.
  template <class T>
  void regroup(const T* from, T* to, int64_t W, bool to_experts) const {
    int64_t arrival = 0;
    std::vector<int64_t> next(expert_offset_.begin(), expert_offset_.end() - 1);
    for (int p = 0; p < ranks_; ++p)
      for (int64_t j = 0; j < local_experts_; ++j) {
        const int64_t n = source_rows(p, j);
        int64_t& place = next[static_cast<size_t>(j)];
        const T* src = (to_experts ? from + arrival * W : from + place * W);
        T* dst = (to_experts ? to + place * W : to + arrival * W);
        for (int64_t i = 0; i < n * W; ++i) dst[i] = src[i];
        arrival += n;
        place += n;
      }
  }

  int ranks_ = 1;
  int64_t local_experts_ = 0;
  std::vector<int64_t> from_source_;    // [source][local expert]: rows
  std::vector<int64_t> sent_;           // rows to each peer
  std::vector<int64_t> received_;       // rows from each peer
  std::vector<int64_t> expert_offset_;  // local experts + 1
  int64_t sent_rows_ = 0;
};

}  // namespace dscore::transformer::moe
