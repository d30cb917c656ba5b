// Expert parallelism's token movement (moe/expert_exchange.h) over 1, 2 and
// 4 ranks, each a thread with an in-memory group (the all-to-alls meet at a
// barrier and copy from each peer's send buffer, as the comm backends'
// all_to_all and all_to_all_v do): every rank routes its own tokens over 8
// experts with uneven loads (an expert with no rows, a rank sending a peer
// nothing); after dispatch each local expert holds exactly the rows the
// ranks routed to it, source by source; an expert-wise function applied
// there and combined back gives every rank what it would compute holding
// all experts itself; and combine(dispatch(x)) is x, bit for bit.
#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "transformer_common/moe/expert_exchange.h"

namespace dscore::transformer::moe {
namespace {

// A group of `ranks` threads exchanging through shared slots.
class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks)
      : ranks_(ranks), count_sends_(ranks), sends_(ranks), layouts_(ranks), barrier_(ranks) {}

  AllToAllCounts counts(int rank) {
    return [this, rank](const int64_t* send, int64_t* recv, int64_t n) {
      count_sends_[rank] = send;
      barrier_.arrive_and_wait();
      for (int p = 0; p < ranks_; ++p)
        for (int64_t i = 0; i < n; ++i) recv[p * n + i] = count_sends_[p][rank * n + i];
      barrier_.arrive_and_wait();
    };
  }
  AllToAllV<double> rows(int rank) {
    return [this, rank](const double* send, double* recv, const AllToAllLayout& layout) {
      sends_[rank] = send;
      layouts_[rank] = &layout;
      barrier_.arrive_and_wait();
      for (int p = 0; p < ranks_; ++p) {
        const AllToAllLayout& theirs = *layouts_[p];
        EXPECT_EQ(theirs.send_counts[rank], layout.recv_counts[p]) << rank << " from " << p;
        for (int64_t i = 0; i < layout.recv_counts[p]; ++i)
          recv[layout.recv_offsets[p] + i] = sends_[p][theirs.send_offsets[rank] + i];
      }
      barrier_.arrive_and_wait();
    };
  }

 private:
  int ranks_;
  std::vector<const int64_t*> count_sends_;
  std::vector<const double*> sends_;
  std::vector<const AllToAllLayout*> layouts_;
  std::barrier<> barrier_;
};

constexpr int64_t kExperts = 8, kWidth = 3;

// Rank r's tokens and their routes (top-2, route-major as Routing), packed.
// Expert 5 gets no route; rank 1 sends nothing to experts 6 and 7.
struct RankTokens {
  Routing routing;
  Packing packing;
  std::vector<double> x;  // tokens x kWidth
};
RankTokens tokens_of(int rank) {
  RankTokens t;
  const int64_t S = 5 + rank;
  Routing& r = t.routing;
  r.tokens = S;
  r.k = 2;
  r.experts = kExperts;
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t s = 0; s < S; ++s) {
      int32_t e = static_cast<int32_t>((s * 3 + j * 5 + rank) % kExperts);
      if (e == 5) e = 4;
      if (rank == 1 && e >= 6) e = static_cast<int32_t>(j);
      r.expert.push_back(e);
    }
  std::vector<int64_t> next(kExperts, 0);
  for (int32_t e : r.expert) r.slot.push_back(static_cast<int32_t>(next[e]++));
  t.packing = pack(r);
  for (int64_t i = 0; i < S * kWidth; ++i)
    t.x.push_back(100.0 * rank + 0.5 * static_cast<double>(i));
  return t;
}

// Expert e's function of a row (what its MLP would be).
void expert_fn(int64_t e, const double* in, double* out) {
  for (int64_t c = 0; c < kWidth; ++c)
    out[c] = in[c] * static_cast<double>(e + 1) + static_cast<double>(e);
}

// What the rank computes holding every expert: each packed row through its expert.
std::vector<double> all_local(const RankTokens& t) {
  std::vector<double> rows(static_cast<size_t>(t.packing.rows() * kWidth)), out(rows.size());
  gather_rows(rows.data(), t.x.data(), t.packing, kWidth);
  for (int64_t e = 0; e < kExperts; ++e)
    for (int64_t row = t.packing.offset[e]; row < t.packing.offset[e + 1]; ++row)
      expert_fn(e, rows.data() + row * kWidth, out.data() + row * kWidth);
  return out;
}

void check_ranks(int ranks) {
  ThreadGroup group(ranks);
  std::vector<std::vector<double>> got(ranks), back(ranks), rows(ranks);
  std::vector<std::vector<int64_t>> per_expert(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      const RankTokens t = tokens_of(rank);
      rows[rank].resize(static_cast<size_t>(t.packing.rows() * kWidth));
      gather_rows(rows[rank].data(), t.x.data(), t.packing, kWidth);
      const ExpertExchange exchange(t.packing, kExperts, ranks, rank, group.counts(rank));
      EXPECT_EQ(exchange.sent_rows(), t.packing.rows());
      std::vector<double> expert_rows(static_cast<size_t>(exchange.expert_rows() * kWidth));
      exchange.dispatch(rows[rank].data(), expert_rows.data(), kWidth, group.rows(rank));
      std::vector<double> outputs(expert_rows.size());
      for (int64_t j = 0; j < exchange.local_experts(); ++j) {
        per_expert[rank].push_back(exchange.expert_offset(j + 1) - exchange.expert_offset(j));
        for (int64_t row = exchange.expert_offset(j); row < exchange.expert_offset(j + 1); ++row)
          expert_fn(rank * exchange.local_experts() + j, expert_rows.data() + row * kWidth,
                    outputs.data() + row * kWidth);
      }
      got[rank].resize(rows[rank].size());
      exchange.combine(outputs.data(), got[rank].data(), kWidth, group.rows(rank));
      back[rank].resize(rows[rank].size());  // the inverse of dispatch
      exchange.combine(expert_rows.data(), back[rank].data(), kWidth, group.rows(rank));
    });
  for (std::thread& t : threads) t.join();
  // Each expert's rows: what all ranks routed to it.
  std::vector<int64_t> routed(kExperts, 0);
  for (int rank = 0; rank < ranks; ++rank) {
    const RankTokens t = tokens_of(rank);
    for (int64_t e = 0; e < kExperts; ++e)
      routed[e] += t.packing.offset[e + 1] - t.packing.offset[e];
  }
  std::vector<int64_t> held;
  for (const auto& r : per_expert) held.insert(held.end(), r.begin(), r.end());
  EXPECT_EQ(held, routed) << ranks << " ranks";
  EXPECT_EQ(routed[5], 0);
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_EQ(got[rank], all_local(tokens_of(rank))) << "rank " << rank << " of " << ranks;
    EXPECT_EQ(back[rank], rows[rank]) << "rank " << rank << " of " << ranks;
  }
}

TEST(ExpertExchange, OneRankHoldsEveryExpert) { check_ranks(1); }
TEST(ExpertExchange, TwoRanksComputeWhatOneRankDoes) { check_ranks(2); }
TEST(ExpertExchange, FourRanksComputeWhatOneRankDoes) { check_ranks(4); }

TEST(ExpertExchange, RefusesExpertsThatDoNotSplitOverTheRanks) {
  const RankTokens t = tokens_of(0);
  EXPECT_THROW(ExpertExchange(t.packing, kExperts, 3, 0, [](const int64_t*, int64_t*, int64_t) {}),
               std::invalid_argument);
}

}  // namespace
}  // namespace dscore::transformer::moe
