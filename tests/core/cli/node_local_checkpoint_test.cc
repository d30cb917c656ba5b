// checkpoint.use_node_local_storage (issue 50, item 2) with each node's disk
// its own: every rank runs under mpirun in a mount namespace of its own, in
// which the checkpoint folder is the disk of its node (ranks 0-1 node0,
// 2-3 node1; DSCORE_NODE_NAME names the node). Each node keeps its ranks'
// shards (below stage 3 with a copy of rank 0's model states); the same
// layout resumes from them as an uninterrupted run goes on; fewer nodes get
// an error naming the other node's shards until they are copied in, and
// then resume as from a shared folder; a folder the nodes share after all
// is written once. Needs root for `unshare --mount` (skips saying why).
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

class NodeLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessResult probe = run_process({"/usr/bin/unshare", "--mount", "true"}, {});
    if (probe.exit_code != 0)
      GTEST_SKIP() << "this machine refuses mount namespaces (`unshare --mount`: " << probe.err
                   << "); node-local disks need them";
    for (const char* d : {"ckpt", "disk0", "disk1", "shared"})
      fs::create_directories(dir_.path() / d);
    // "<wrapper> <program> <args...>": rank r on node r/2; `bind` gives the
    // node its own disk at ckpt.
    wrapper_ = dir_.write("on_node",
                          "#!/bin/sh\nnode=$((OMPI_COMM_WORLD_RANK / 2))\n"
                          "export DSCORE_NODE_NAME=node$node\n"
                          "if [ \"$BIND_DISKS\" = 1 ]; then\n"
                          "  exec unshare --mount sh -c \"mount --bind " +
                              (dir_.path() / "disk").string() + "$node " +
                              (dir_.path() / "ckpt").string() +
                              " && exec \\\"\\$@\\\"\" sh \"$@\"\n"
                              "fi\nexec \"$@\"\n")
                   .string();
    fs::permissions(wrapper_, fs::perms::owner_all);
  }

  std::string config(int stage, const std::string& folder, bool node_local) {
    MlpRunConfig cfg;
    cfg.train_steps = 10;
    cfg.extra = "\"zero_optimization\": {\"stage\": " + std::to_string(stage) +
                "}, \"checkpoint_dir\": \"" + (dir_.path() / folder).string() +
                "\", \"save_interval\": 10, \"checkpoint\": {\"use_node_local_storage\": " +
                (node_local ? "true" : "false") + "}";
    return dir_.write(folder + "_stage" + std::to_string(stage) + ".json", cfg.text()).string();
  }

  // `ranks` ranks under mpirun, each through the wrapper.
  ProcessResult run_ranks(int ranks, bool bind_disks, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        "/usr/bin/mpirun",     "-n", std::to_string(ranks), "--oversubscribe", "--bind-to", "none",
        "--allow-run-as-root", "-x", "BIND_DISKS",          wrapper_,          DSCORE_EXE,  "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessOptions options;
    options.env = mpi_test_env();
    options.env["BIND_DISKS"] = bind_disks ? "1" : "0";
    options.timeout = std::chrono::minutes(2);
    return run_process(argv, options);
  }

  std::set<std::string> files_in(const std::string& folder) {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path() / folder))
      if (e.is_regular_file()) out.insert(fs::relative(e.path(), dir_.path() / folder).string());
    return out;
  }

  // Every "step k/N | loss L" (lines, or the progress bar's entries) from
  // step `from` on.
  static std::vector<std::string> losses(const ProcessResult& r, int from) {
    static const std::regex kStep(R"(step (\d+)/\d+ \| loss [^ ]+)");
    std::vector<std::string> out;
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), kStep), end; it != end; ++it)
      if (std::stoi((*it)[1]) >= from) out.push_back(it->str());
    return out;
  }
  static std::string final_loss(const ProcessResult& r) {
    for (const std::string& line : lines_starting_with(r.out, "done: "))
      return line.substr(line.find("final loss"));
    return "";
  }

  TempDir dir_{"dscore_node_local"};
  std::string wrapper_;
};

TEST_F(NodeLocal, EachNodeKeepsItsShardsAndTheSameLayoutResumesFromThem) {
  for (int stage : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    for (const char* d : {"disk0", "disk1"}) {
      fs::remove_all(dir_.path() / d);
      fs::create_directories(dir_.path() / d);
    }
    const std::string cfg = config(stage, "ckpt", true);
    ProcessResult saved = run_ranks(4, true, {"--config", cfg});
    ASSERT_EQ(saved.exit_code, 0) << saved.describe();
    EXPECT_NE(saved.err.find("2 nodes: node0 (ranks 0-1), node1 (ranks 2-3)"), std::string::npos)
        << saved.err;
    const std::string tag = "global_step10/";
    const std::string optim = "_mp_rank_00_optim_states.safetensors";
    std::set<std::string> node0 = {"latest", tag + "zero_pp_rank_0" + optim,
                                   tag + "zero_pp_rank_1" + optim};
    std::set<std::string> node1 = {"latest", tag + "zero_pp_rank_2" + optim,
                                   tag + "zero_pp_rank_3" + optim};
    if (stage == 3) {
      for (int r : {0, 1})
        node0.insert(tag + "zero_pp_rank_" + std::to_string(r) +
                     "_mp_rank_00_model_states.safetensors");
      for (int r : {2, 3})
        node1.insert(tag + "zero_pp_rank_" + std::to_string(r) +
                     "_mp_rank_00_model_states.safetensors");
    } else {
      node0.insert(tag + "mp_rank_00_model_states.safetensors");
      node1.insert(tag + "mp_rank_00_model_states.safetensors");  // the copy
    }
    EXPECT_EQ(files_in("disk0"), node0);
    EXPECT_EQ(files_in("disk1"), node1);
    EXPECT_TRUE(files_in("ckpt").empty()) << "a rank wrote outside its node's disk";

    ProcessResult resumed = run_ranks(
        4, true, {"--config", cfg, "--steps", "20", "--resume", (dir_.path() / "ckpt").string()});
    ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
    ProcessOptions options;
    options.env = mpi_test_env();
    ProcessResult whole = run_dscore(
        {"run", "--config", config(stage, "shared", false), "-n", "4", "--steps", "20"}, options);
    ASSERT_EQ(whole.exit_code, 0) << whole.describe();
    ASSERT_FALSE(final_loss(whole).empty()) << whole.out;
    EXPECT_EQ(final_loss(resumed), final_loss(whole));
    EXPECT_EQ(losses(resumed, 11), losses(whole, 11));
    EXPECT_EQ(losses(resumed, 11).size(), 10u) << resumed.out;
  }
}

TEST_F(NodeLocal, FewerNodesNeedTheOtherNodesShardsAndThenResumeAsFromAFolderAllShare) {
  const std::string node_cfg = config(2, "ckpt", true);
  ProcessResult saved = run_ranks(4, true, {"--config", node_cfg});
  ASSERT_EQ(saved.exit_code, 0) << saved.describe();
  // One node (2 ranks on node0) needs ranks 2-3's shards, which node1 holds.
  const std::vector<std::string> resume = {"--config", node_cfg,   "--steps",
                                           "20",       "--resume", (dir_.path() / "ckpt").string()};
  ProcessResult lacking = run_ranks(2, true, resume);
  EXPECT_NE(lacking.exit_code, 0) << lacking.describe();
  EXPECT_NE(lacking.err.find("zero_pp_rank_2_mp_rank_00_optim_states.safetensors (on node1)"),
            std::string::npos)
      << lacking.err;
  EXPECT_NE(lacking.err.find("copy " + (dir_.path() / "ckpt").string() +
                             "/global_step10/ from every "
                             "node that saved it (node0 and "
                             "node1)"),
            std::string::npos)
      << lacking.err;
  // Copied in (as rsync would), the shards resume on one node as a
  // shared folder's do.
  for (const auto& e : fs::directory_iterator(dir_.path() / "disk1" / "global_step10"))
    fs::copy_file(e.path(), dir_.path() / "disk0" / "global_step10" / e.path().filename(),
                  fs::copy_options::skip_existing);
  ProcessResult one_node = run_ranks(2, true, resume);
  ASSERT_EQ(one_node.exit_code, 0) << one_node.describe();

  ProcessOptions options;
  options.env = mpi_test_env();
  const std::string shared_cfg = config(2, "shared", false);
  ProcessResult first = run_dscore({"run", "--config", shared_cfg, "-n", "4"}, options);
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  ProcessResult second = run_dscore({"run", "--config", shared_cfg, "-n", "2", "--steps", "20",
                                     "--resume", (dir_.path() / "shared").string()},
                                    options);
  ASSERT_EQ(second.exit_code, 0) << second.describe();
  ASSERT_FALSE(final_loss(second).empty()) << second.out;
  EXPECT_EQ(final_loss(one_node), final_loss(second));
  EXPECT_EQ(losses(one_node, 11), losses(second, 11));
}

TEST_F(NodeLocal, AFolderTheNodesShareIsWrittenOnce) {
  const std::string cfg = config(2, "shared", true);
  ProcessResult saved = run_ranks(4, false, {"--config", cfg});
  ASSERT_EQ(saved.exit_code, 0) << saved.describe();
  EXPECT_NE(saved.err.find("on node node1 is the folder an earlier node writes"), std::string::npos)
      << saved.err;
  const std::set<std::string> files = files_in("shared");
  EXPECT_EQ(files.size(), 6u);  // latest, model states, 4 optimizer shards
  EXPECT_TRUE(files.count("latest"));
  ProcessResult resumed = run_ranks(
      4, false, {"--config", cfg, "--steps", "20", "--resume", (dir_.path() / "shared").string()});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
}

}  // namespace
}  // namespace dscore::testing
