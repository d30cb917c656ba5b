// The TCP key-value store (core/comm/tcp_kv.h) with ranks as threads of
// this process over real loopback sockets: values, waits, deadlines, a
// server or a rank that goes away, connecting before the server is up, a
// port that is taken, and a clean shutdown (no thread or socket left).
#include "core/comm/tcp_kv.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "core/comm/tcp_kv_wire.h"

#define EXPECT_CONTAINS(text, piece) \
  EXPECT_NE(std::string(text).find(piece), std::string::npos) << (text)

namespace dscore::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<TcpKv> open_rank(int rank, int world, int port, int64_t connect_ms = 20000) {
  TcpKvOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.rank = rank;
  options.world_size = world;
  options.connect_timeout_ms = connect_ms;
  auto kv = TcpKv::create(options);
  EXPECT_TRUE(kv.ok()) << kv.status().message();
  return kv.ok() ? *kv : nullptr;
}

Result<std::shared_ptr<TcpKv>> try_open(int rank, int world, int port, int64_t connect_ms,
                                        const std::string& token = "") {
  TcpKvOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.rank = rank;
  options.world_size = world;
  options.connect_timeout_ms = connect_ms;
  options.token = token;
  return TcpKv::create(options);
}

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

size_t entries(const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// A socket that speaks the store's HELLO as `rank`, then is closed without
// a BYE: a rank that was killed.
// (A HELLO with `token`; its reply is returned.)
Result<std::string> connect_and_vanish(int port, int rank, int world,
                                       const std::string& token = "") {
  tcp_kv::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return io_error("connect failed");
  std::string hello(1, static_cast<char>(tcp_kv::kHello));
  hello.append(tcp_kv::kMagic);
  tcp_kv::put_u32(&hello, tcp_kv::kVersion);
  tcp_kv::put_u32(&hello, static_cast<uint32_t>(rank));
  tcp_kv::put_u32(&hello, static_cast<uint32_t>(world));
  tcp_kv::put_str(&hello, token);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  DSCORE_RETURN_IF_ERROR(tcp_kv::send_all(fd.get(), tcp_kv::frame(hello), deadline));
  return tcp_kv::recv_frame(fd.get(), deadline);
}

TEST(TcpKv, EveryRankReadsEveryOthersKey) {
  constexpr int kWorld = 4;
  auto rank0 = open_rank(0, kWorld, 0);
  ASSERT_TRUE(rank0);
  const int port = rank0->port();
  EXPECT_NE(port, 0);
  std::vector<std::thread> ranks;
  std::atomic<int> mismatches{0};
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      auto kv = r == 0 ? rank0 : open_rank(r, kWorld, port);
      if (!kv) return ++mismatches, void();
      EXPECT_TRUE(kv->set("rank." + std::to_string(r), "value of " + std::to_string(r)).ok());
      for (int peer = 0; peer < kWorld; ++peer) {
        auto v = kv->get("rank." + std::to_string(peer), 10000);
        if (!v.ok() || *v != "value of " + std::to_string(peer)) ++mismatches;
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TcpKv, GetBeforeSetWaitsForTheValue) {
  auto rank0 = open_rank(0, 2, 0);
  auto rank1 = open_rank(1, 2, rank0->port());
  const auto start = Clock::now();
  auto waiting = std::async(std::launch::async, [&] { return rank1->get("late", 10000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  ASSERT_TRUE(rank0->set("late", "here").ok());
  Result<std::string> v = waiting.get();
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, "here");
  EXPECT_GE(ms_since(start), 250);
  // A later set replaces the value.
  ASSERT_TRUE(rank0->set("late", "again").ok());
  EXPECT_EQ(*rank1->get("late", 0), "again");
}

TEST(TcpKv, ValuesAreArbitraryBytes) {
  auto rank0 = open_rank(0, 2, 0);
  auto rank1 = open_rank(1, 2, rank0->port());
  std::mt19937 gen(7);
  std::string id(128, '\0');  // an NCCL unique id's size, NULs included
  for (size_t i = 0; i < id.size(); i += 2) id[i] = static_cast<char>(gen());
  std::string big(3 << 20, '\0');
  for (char& c : big) c = static_cast<char>(gen());
  ASSERT_TRUE(rank0->set("nccl.id", id).ok());
  ASSERT_TRUE(rank0->set("empty", "").ok());
  ASSERT_TRUE(rank0->set(std::string("key\0with nul", 12), "k").ok());
  ASSERT_TRUE(rank1->set("big", big).ok());
  EXPECT_EQ(*rank1->get("nccl.id", 1000), id);
  EXPECT_EQ(*rank1->get("empty", 1000), "");
  EXPECT_EQ(*rank1->get(std::string("key\0with nul", 12), 1000), "k");
  EXPECT_FALSE(rank1->get("key", 0).ok());  // the key is not cut at its NUL
  EXPECT_EQ(*rank0->get("big", 1000), big);
}

TEST(TcpKv, ManyKeysAndConcurrentCallsOnOneStore) {
  auto rank0 = open_rank(0, 2, 0);
  auto rank1 = open_rank(1, 2, rank0->port());
  // Threads of rank 1 wait on keys while another of its threads publishes
  // them: a blocked get must not hold up the set.
  constexpr int kThreads = 4, kKeys = 500;
  std::vector<std::future<int>> readers;
  for (int t = 0; t < kThreads; ++t)
    readers.push_back(std::async(std::launch::async, [&, t] {
      int wrong = 0;
      for (int k = t; k < kKeys; k += kThreads) {
        auto v = rank1->get("k" + std::to_string(k), 10000);
        wrong += !v.ok() || *v != std::to_string(k * k);
      }
      return wrong;
    }));
  for (int k = 0; k < kKeys; ++k)
    ASSERT_TRUE(rank1->set("k" + std::to_string(k), std::to_string(k * k)).ok());
  for (auto& r : readers) EXPECT_EQ(r.get(), 0);
  for (int k = 0; k < kKeys; ++k)
    EXPECT_EQ(*rank0->get("k" + std::to_string(k), 0), std::to_string(k * k));
}

TEST(TcpKv, DeadlineNamesTheKeyTheStoreAndTheMissingRanks) {
  auto rank0 = open_rank(0, 3, 0);
  auto rank1 = open_rank(1, 3, rank0->port());
  const auto start = Clock::now();
  Result<std::string> v = rank1->get("dscore.nccl.unique_id.1", 200);
  EXPECT_GE(ms_since(start), 190);
  EXPECT_LT(ms_since(start), 5000);
  ASSERT_EQ(v.status().code(), DSCORE_DEADLINE_EXCEEDED);
  const std::string& m = v.status().message();
  EXPECT_CONTAINS(m, "key 'dscore.nccl.unique_id.1' was not published within 200 ms");
  EXPECT_CONTAINS(m, "127.0.0.1:" + std::to_string(rank0->port()));
  EXPECT_CONTAINS(m, "MASTER_ADDR:MASTER_PORT");
  EXPECT_CONTAINS(m, "2 of 3 ranks have connected to it; not yet: 2");
  // Timeout 0 only looks.
  EXPECT_EQ(rank1->get("absent", 0).status().code(), DSCORE_DEADLINE_EXCEEDED);
  // A huge timeout is no timeout, not an overflow that ends the wait at once.
  auto waiting =
      std::async(std::launch::async, [&] { return rank1->get("eventually", INT64_MAX); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(rank0->set("eventually", "yes").ok());
  EXPECT_EQ(*waiting.get(), "yes");
}

TEST(TcpKv, ServerGoneEndsWaitsWithUnavailable) {
  auto rank0 = open_rank(0, 2, 0);
  auto rank1 = open_rank(1, 2, rank0->port(), /*connect_ms=*/60000);
  auto waiting = std::async(std::launch::async, [&] { return rank1->get("never", 60000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  rank0.reset();  // rank 0 exits
  Result<std::string> v = waiting.get();
  EXPECT_LT(ms_since(start), 5000);
  ASSERT_EQ(v.status().code(), DSCORE_UNAVAILABLE);
  EXPECT_CONTAINS(v.status().message(), "went away");
  EXPECT_CONTAINS(v.status().message(), "rank 0 exited or failed");
  // Later calls fail at once too, not after the 60 s connect timeout.
  const auto again = Clock::now();
  Status st = rank1->set("after", "x");
  EXPECT_EQ(st.code(), DSCORE_UNAVAILABLE);
  EXPECT_CONTAINS(st.message(), "cannot be reached any more");
  EXPECT_LT(ms_since(again), 5000);
}

TEST(TcpKv, RankThatVanishesEndsWaitsWithUnavailableNamingIt) {
  auto rank0 = open_rank(0, 3, 0);
  auto rank1 = open_rank(1, 3, rank0->port());
  auto waiting = std::async(std::launch::async, [&] { return rank1->get("from.rank.2", 60000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  ASSERT_TRUE(connect_and_vanish(rank0->port(), 2, 3).ok());
  Result<std::string> v = waiting.get();
  EXPECT_LT(ms_since(start), 5000);
  ASSERT_EQ(v.status().code(), DSCORE_UNAVAILABLE);
  EXPECT_CONTAINS(v.status().message(), "key 'from.rank.2' cannot arrive");
  EXPECT_CONTAINS(v.status().message(), "rank 2 lost its connection");
  // Published keys are still served; missing ones fail at once.
  ASSERT_TRUE(rank0->set("fine", "1").ok());
  EXPECT_EQ(*rank1->get("fine", 1000), "1");
  EXPECT_EQ(rank1->get("other", 60000).status().code(), DSCORE_UNAVAILABLE);
}

TEST(TcpKv, AConnectionWithoutTheJobTokenIsRefusedAndTheJobIsUnharmed) {
  auto rank0 = try_open(0, 2, 0, 20000, "s3cret");
  ASSERT_TRUE(rank0.ok()) << rank0.status().message();
  const int port = (*rank0)->port();
  // Another process on the network: no token, then a wrong one, even
  // claiming a rank the job has.
  for (const char* token : {"", "guess"}) {
    auto reply = connect_and_vanish(port, 1, 2, token);
    ASSERT_TRUE(reply.ok()) << reply.status().message();
    EXPECT_EQ(static_cast<uint8_t>((*reply)[0]), DSCORE_INVALID_ARGUMENT);
    EXPECT_CONTAINS(*reply, "the job token does not match (DSCORE_JOB_TOKEN)");
  }
  auto intruder = try_open(1, 2, port, 2000, "guess");
  ASSERT_FALSE(intruder.ok());
  EXPECT_CONTAINS(intruder.status().message(), "job token does not match");
  // The real rank 1 joins and the store works; no rejected client counts as a failed rank.
  auto rank1 = try_open(1, 2, port, 20000, "s3cret");
  ASSERT_TRUE(rank1.ok()) << rank1.status().message();
  ASSERT_TRUE((*rank0)->set("k", "v").ok());
  EXPECT_EQ(*(*rank1)->get("k", 5000), "v");
  EXPECT_EQ((*rank1)->get("missing", 300).status().code(), DSCORE_DEADLINE_EXCEEDED);
}

TEST(TcpKv, RanksThatCloseTheirStoreAreNotFailures) {
  // A rank done with the store says BYE as it closes (often in the same
  // packet as the close itself): the others' waits go on.
  auto rank0 = open_rank(0, 3, 0);
  auto rank1 = open_rank(1, 3, rank0->port());
  for (int round = 0; round < 20; ++round) {
    const std::string key = "later." + std::to_string(round);
    auto waiting = std::async(std::launch::async, [&] { return rank1->get(key, 10000); });
    {
      auto rank2 = open_rank(2, 3, rank0->port());
      ASSERT_TRUE(rank2->set("from.2." + std::to_string(round), "x").ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(rank0->set(key, "v").ok());
    Result<std::string> v = waiting.get();
    ASSERT_TRUE(v.ok()) << v.status().message();
  }
}

TEST(TcpKv, RanksRetryUntilRankZeroServes) {
  Result<int> port = pick_free_port();
  ASSERT_TRUE(port.ok()) << port.status().message();
  auto rank1 = std::async(std::launch::async, [&] { return try_open(1, 2, *port, 20000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto rank0 = open_rank(0, 2, *port);
  ASSERT_TRUE(rank0);
  Result<std::shared_ptr<TcpKv>> kv1 = rank1.get();
  ASSERT_TRUE(kv1.ok()) << kv1.status().message();
  ASSERT_TRUE(rank0->set("id", "x").ok());
  EXPECT_EQ(*(*kv1)->get("id", 1000), "x");
}

// The port `dscore run -n` gives MASTER_PORT lies below the kernel's
// ephemeral range, where no bind to port 0 (mpirun's listeners) can take
// it before rank 0's store binds it; a store serves on it.
TEST(TcpKv, AFreePortIsBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  ASSERT_TRUE(range >> first);
  if (first - 20000 < 1016) GTEST_SKIP() << "no room below the ephemeral range " << first;
  for (int i = 0; i < 20; ++i) {
    Result<int> port = pick_free_port();
    ASSERT_TRUE(port.ok()) << port.status().message();
    EXPECT_GE(*port, 20000);
    EXPECT_LT(*port, first - 16);
  }
  Result<int> port = pick_free_port();
  ASSERT_TRUE(port.ok());
  auto rank0 = open_rank(0, 1, *port);
  ASSERT_TRUE(rank0);
  ASSERT_TRUE(rank0->set("k", "v").ok());
  EXPECT_EQ(*rank0->get("k", 1000), "v");
}

TEST(TcpKv, NothingListeningNamesMasterAddrAndPort) {
  Result<int> port = pick_free_port();
  ASSERT_TRUE(port.ok());
  const auto start = Clock::now();
  auto kv = try_open(1, 2, *port, 300);
  EXPECT_GE(ms_since(start), 290);
  ASSERT_EQ(kv.status().code(), DSCORE_UNAVAILABLE);
  const std::string& m = kv.status().message();
  EXPECT_CONTAINS(m,
                  "rank 1 could not reach the job's key-value store at "
                  "MASTER_ADDR:MASTER_PORT = 127.0.0.1:" +
                      std::to_string(*port) + " within 300 ms");
  EXPECT_CONTAINS(m, "refused");
  EXPECT_CONTAINS(m, "check that rank 0 is running");
}

TEST(TcpKv, PortInUseIsAClearError) {
  auto first = open_rank(0, 2, 0);
  auto second = try_open(0, 2, first->port(), 1000);
  ASSERT_EQ(second.status().code(), DSCORE_UNAVAILABLE);
  EXPECT_CONTAINS(second.status().message(),
                  "rank 0 cannot serve the job's key-value store on port " +
                      std::to_string(first->port()) + " (MASTER_PORT");
  EXPECT_CONTAINS(second.status().message(), "in use");
  EXPECT_CONTAINS(second.status().message(), "set MASTER_PORT to a free port");
}

TEST(TcpKv, RanksOfAnotherWorldSizeAreRefused) {
  auto rank0 = open_rank(0, 2, 0);
  auto stray = try_open(1, 3, rank0->port(), 2000);
  ASSERT_EQ(stray.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_CONTAINS(stray.status().message(),
                  "rank 1 of a world of 3 reached the store of a "
                  "job of 2 ranks");
}

TEST(TcpKv, SomethingElseOnThePortIsNamed) {
  // A listener that accepts and never answers.
  tcp_kv::Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener.get(), 8), 0);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  auto kv = try_open(1, 2, ntohs(a.sin_port), 500);
  ASSERT_EQ(kv.status().code(), DSCORE_UNAVAILABLE);
  EXPECT_CONTAINS(kv.status().message(), "no dscore key-value store answered");
}

TEST(TcpKv, ShutdownLeavesNoThreadOrSocket) {
  const size_t fds = entries("/proc/self/fd"), threads = entries("/proc/self/task");
  {
    auto rank0 = open_rank(0, 3, 0);
    auto rank1 = open_rank(1, 3, rank0->port());
    auto rank2 = open_rank(2, 3, rank0->port());
    auto waiting = std::async(std::launch::async, [&] { return rank2->get("k", 10000); });
    ASSERT_TRUE(rank1->set("k", "v").ok());
    EXPECT_EQ(*waiting.get(), "v");
    EXPECT_GT(entries("/proc/self/fd"), fds);
  }
  EXPECT_EQ(entries("/proc/self/fd"), fds);
  // std::async's thread has handed over its result but may still be
  // exiting: give it a moment to leave /proc/self/task.
  for (int i = 0; i < 200 && entries("/proc/self/task") != threads; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(entries("/proc/self/task"), threads);
}

}  // namespace
}  // namespace dscore::comm
