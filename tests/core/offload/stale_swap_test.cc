// Stale swap folders (core/offload/stale_swap.h): a job folder is removed
// only when every owner it records is a process of this host that is gone,
// and never when an owner is alive, on another host, or unrecorded.
#include "core/offload/stale_swap.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/fakes/temp_dir.h"

namespace dscore::offload {
namespace {

namespace fs = std::filesystem;
using dscore::testing::TempDir;

// A process id that has just ended (a child reaped).
int64_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

void write_owner(const TempDir& dir, const std::string& job, int rank, const SwapOwner& o) {
  dir.write(job + "/owner.rank" + std::to_string(rank), "host " + o.host + "\npid " +
                                                            std::to_string(o.pid) + "\nstart " +
                                                            std::to_string(o.start_time) + "\n");
}

std::vector<std::string> stale_names(const std::string& path) {
  std::vector<std::string> names;
  for (const StaleSwapFolder& s : find_stale_swap_folders(path))
    names.push_back(fs::path(s.path).filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(StaleSwap, ThisProcessIsAliveAndADeadOneIsGone) {
  const SwapOwner me = this_process();
  EXPECT_GT(me.start_time, 0u);
  EXPECT_FALSE(owner_is_gone(me));
  SwapOwner dead = me;
  dead.pid = dead_pid();
  EXPECT_TRUE(owner_is_gone(dead));
  SwapOwner reused = me;  // this pid, started at another time: a reused pid
  reused.start_time += 1;
  EXPECT_TRUE(owner_is_gone(reused));
  SwapOwner elsewhere = dead;
  elsewhere.host = me.host + "-other";
  EXPECT_FALSE(owner_is_gone(elsewhere));  // cannot be checked from here
}

// A rank whose launcher was killed ends but stays a zombie until init reaps
// it: its /proc entry still shows the start time. It is gone all the same.
TEST(StaleSwap, AnEndedProcessNotYetReapedIsGone) {
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(to_child[1]);
    const SwapOwner me = this_process();
    (void)!write(from_child[1], &me.start_time, sizeof me.start_time);
    char byte;
    (void)!read(to_child[0], &byte, 1);  // until the parent closes its end
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  SwapOwner owner = this_process();
  owner.pid = child;
  ASSERT_EQ(read(from_child[0], &owner.start_time, sizeof owner.start_time),
            static_cast<ssize_t>(sizeof owner.start_time));
  EXPECT_FALSE(owner_is_gone(owner));
  close(to_child[1]);
  siginfo_t info{};  // waits until it has ended, leaving it unreaped
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(fs::exists("/proc/" + std::to_string(child) + "/stat"));
  EXPECT_TRUE(owner_is_gone(owner));
  int status = 0;
  waitpid(child, &status, 0);
  close(from_child[0]);
}

TEST(StaleSwap, OnlyFoldersWhoseOwnersAreAllGoneAreStale) {
  TempDir dir("dscore_stale_swap");
  const SwapOwner me = this_process();
  SwapOwner dead = me;
  dead.pid = dead_pid();
  SwapOwner elsewhere = dead;
  elsewhere.host = me.host + "-other";
  write_owner(dir, "dscore-job1-a", 0, dead);
  write_owner(dir, "dscore-job1-a", 1, dead);
  dir.write("dscore-job1-a/rank0/exp_avg.swp", std::string(4096, 'x'));
  write_owner(dir, "dscore-job2-b", 0, dead);
  write_owner(dir, "dscore-job2-b", 1, me);  // one rank alive
  write_owner(dir, "dscore-job3-c", 0, elsewhere);
  dir.write("dscore-job4-d/rank0/exp_avg.swp", "no owner record");
  write_owner(dir, "not-a-job", 0, dead);
  dir.write("dscore-job5-e/owner.rank0", "garbage");
  EXPECT_EQ(stale_names(dir.path().string()), std::vector<std::string>({"dscore-job1-a"}));
  const auto stale = find_stale_swap_folders(dir.path().string());
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_GE(stale[0].bytes, 4096);
  EXPECT_NE(stale[0].owners.find("pid " + std::to_string(dead.pid)), std::string::npos);
  EXPECT_TRUE(find_stale_swap_folders(dir.file("no-such-folder")).empty());
}

// Folders a killed lease or reclaim left midway name the process that made
// them: removed once it is gone, whatever is inside.
TEST(StaleSwap, FoldersLeftMidwayNameTheirMaker) {
  TempDir dir("dscore_stale_swap");
  const SwapOwner me = this_process();
  const std::string dead =
      me.host + "." + std::to_string(dead_pid()) + "." + std::to_string(me.start_time);
  const std::string alive =
      me.host + "." + std::to_string(me.pid) + "." + std::to_string(me.start_time);
  dir.write(".dscore-lease0." + dead + "/owner.rank0.tmp", "half");
  dir.write(".dscore-lease1." + alive + "/owner.rank1", "being made");
  dir.write("dscore-job3-c.reclaiming." + dead + "/rank0/exp_avg.swp", "half removed");
  dir.write("dscore-job4-d.reclaiming." + alive + "/rank0/exp_avg.swp", "being removed");
  EXPECT_EQ(
      stale_names(dir.path().string()),
      std::vector<std::string>({".dscore-lease0." + dead, "dscore-job3-c.reclaiming." + dead}));
  const auto removed = reclaim_stale_swap_folders(dir.path().string(), false);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_TRUE(fs::exists(dir.file(".dscore-lease1." + alive)));
  EXPECT_TRUE(fs::exists(dir.file("dscore-job4-d.reclaiming." + alive)));
  EXPECT_FALSE(fs::exists(dir.file("dscore-job3-c.reclaiming." + dead)));
}

TEST(StaleSwap, ReclaimRemovesOrOnlyReports) {
  TempDir dir("dscore_stale_swap");
  SwapOwner dead = this_process();
  dead.pid = dead_pid();
  write_owner(dir, "dscore-job7-x", 0, dead);
  dir.write("dscore-job7-x/rank0/master.swp", std::string(1 << 20, 'x'));
  const auto kept = reclaim_stale_swap_folders(dir.path().string(), /*keep=*/true);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].rfind("kept swap folder ", 0), 0u) << kept[0];
  EXPECT_NE(kept[0].find("keep_stale"), std::string::npos) << kept[0];
  EXPECT_TRUE(fs::exists(dir.file("dscore-job7-x")));
  const auto removed = reclaim_stale_swap_folders(dir.path().string(), /*keep=*/false);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].rfind("removed swap folder " + dir.file("dscore-job7-x"), 0), 0u)
      << removed[0];
  EXPECT_NE(removed[0].find("1.00 MiB freed"), std::string::npos) << removed[0];
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(StaleSwap, ALeaseRecordsThisRankUntilItEnds) {
  TempDir dir("dscore_stale_swap");
  const std::string job = dir.file("dscore-job9-z");
  {
    auto lease = SwapFolderLease::acquire(job, 3);
    ASSERT_TRUE(lease.ok()) << lease.status().message();
    EXPECT_TRUE(fs::exists(job + "/owner.rank3"));
    EXPECT_TRUE(find_stale_swap_folders(dir.path().string()).empty());  // alive
  }
  EXPECT_FALSE(fs::exists(job));  // the record and the then empty folder removed
  {
    auto lease = SwapFolderLease::acquire(job, 0);
    ASSERT_TRUE(lease.ok());
    dir.write("dscore-job9-z/rank1/other_rank.swp", "x");
  }
  EXPECT_FALSE(fs::exists(job + "/owner.rank0"));
  EXPECT_TRUE(fs::exists(job + "/rank1/other_rank.swp"));  // another rank's: kept
}

}  // namespace
}  // namespace dscore::offload
