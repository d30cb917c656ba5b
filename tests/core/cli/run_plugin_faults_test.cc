// Broken plugins met by `dscore run`: the fault-injecting optimizers of
// tests/fakes/plugins reach the real executable through DSCORE_PLUGIN_PATH
// or the config's "plugins": {"paths": [...]}. Each fault must end in one
// clear message naming the plugin and its library (and the field, versions
// or function at fault) with the documented exit code: 2 when the config
// names a plugin that cannot be used, 1 when a plugin fails at run time; a
// plugin that segfaults still kills the process, after the crash handler
// named it.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "core/base/sha256.h"
#include "tests/core/cli/process.h"
#include "tests/core/cli/run_config.h"

namespace dscore::testing {
namespace {

namespace fs = std::filesystem;

std::string test_plugin_dir(const std::string& name) {
  return std::string(DSCORE_TEST_PLUGIN_DIR) + "/" + name;
}

std::string test_plugin_file(const std::string& name) {
  return fs::canonical(test_plugin_dir(name) + "/lib" + name + ".so").string();
}

// "optimizer 'x' (/path/libx.so)", as the host names a plugin.
std::string display(const std::string& name) {
  return "optimizer '" + name + "' (" + test_plugin_file(name) + ")";
}

// Appends `option` to a sanitizer's options variable (keeping what the test
// preset set), so a sanitizer runtime never takes over a fatal signal.
void append_sanitizer_option(EnvOverrides* env, const char* variable, const std::string& option) {
  const char* current = std::getenv(variable);
  (*env)[variable] =
      (current != nullptr && *current != '\0' ? std::string(current) + ":" : "") + option;
}

class CliPluginFaults : public ::testing::Test {
 protected:
  // Runs `dscore run` on the small mlp config whose optimizer is `optimizer`
  // (a JSON object), with DSCORE_PLUGIN_PATH = `plugin_path` ("" = unset).
  ProcessResult run(const std::string& optimizer, const std::string& plugin_path,
                    const std::string& extra = "", EnvOverrides env = {},
                    const std::vector<std::string>& flags = {}) {
    MlpRunConfig cfg;
    cfg.optimizer = optimizer;
    cfg.train_steps = 3;
    cfg.extra = extra;
    config_ = dir_.write("ds_config.json", cfg.text()).string();
    ProcessOptions options;
    options.env = std::move(env);
    if (!plugin_path.empty()) options.env["DSCORE_PLUGIN_PATH"] = plugin_path;
    options.cwd = dir_.path();
    std::vector<std::string> args = {"run", "--config", config_};
    args.insert(args.end(), flags.begin(), flags.end());
    return run_dscore(args, options);
  }

  // Plugins the config names outside its own folder (trust.h).
  static EnvOverrides trusting() { return {{"DSCORE_TRUST_CONFIG_PLUGIN_PATHS", "1"}}; }

  // The optimizer section naming plugin `name`.
  static std::string optimizer(const std::string& name) {
    return "{\"type\": \"" + name + "\", \"params\": {\"lr\": 0.01}}";
  }

  // A plugin the config names cannot be used: a config error on the
  // optimizer.type line, exit 2, nothing trained.
  std::string config_error(const ProcessResult& r) {
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_EQ(r.out, "");
    std::vector<std::string> lines = split_lines(r.err);
    EXPECT_EQ(lines.size(), 1u) << r.err;
    if (lines.empty()) return "";
    const std::string prefix = "error: " + config_ + ":4:16: optimizer.type: ";
    EXPECT_EQ(lines[0].rfind(prefix, 0), 0u) << lines[0];
    return lines[0].rfind(prefix, 0) == 0 ? lines[0].substr(prefix.size()) : lines[0];
  }

  // A failure at run time: one "[dscore] error: " line, exit 1, a normal exit.
  std::string runtime_error(const ProcessResult& r) {
    EXPECT_EQ(r.signal, 0) << "killed by a signal: " << r.describe();
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    std::vector<std::string> lines = lines_starting_with(r.err, "[dscore] error: ");
    EXPECT_EQ(lines.size(), 1u) << r.err;
    return lines.empty() ? "" : lines[0].substr(std::string("[dscore] error: ").size());
  }

  TempDir dir_{"dscore_cli_faults"};
  std::string config_;
};

TEST_F(CliPluginFaults, AWellBehavedPluginFromDscorePluginPathTrains) {
  ProcessResult r = run(optimizer("fake_sgd"), test_plugin_dir("fake_sgd"));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "done: 3 steps").size(), 1u) << r.out;
}

TEST_F(CliPluginFaults, AWellBehavedPluginFromARelativeConfigPathTrains) {
  // plugins.paths entries are relative to the config file's folder.
  fs::create_directories(dir_.path() / "my_plugins");
  fs::copy_file(test_plugin_file("fake_sgd"), dir_.path() / "my_plugins/libfake_sgd.so");
  ProcessResult r = run(optimizer("FAKE_SGD"), "", R"("plugins": {"paths": ["my_plugins"]})");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_starting_with(r.out, "done: 3 steps").size(), 1u) << r.out;
}

TEST_F(CliPluginFaults, NameNotFoundSuggestsAndListsWhatExistsAndWhereItLooked) {
  std::string m = config_error(run(optimizer("fake_sdg"), test_plugin_dir("fake_sgd")));
  EXPECT_EQ(
      m.rfind("no optimizer plugin named 'fake_sdg'; did you mean \"fake_sgd\"?; available: ", 0),
      0u)
      << m;
  for (const char* name : {"adam", "adamw", "fake_sgd"})
    EXPECT_NE(m.find(name), std::string::npos) << name << " not listed: " << m;
  EXPECT_NE(m.find("Searched: " + test_plugin_dir("fake_sgd")), std::string::npos) << m;
  EXPECT_NE(m.find("DSCORE_PLUGIN_PATH"), std::string::npos) << m;
}

TEST_F(CliPluginFaults, ExplicitlyNamedLibraryWithoutTheEntrySymbolIsFatal) {
  const std::string file = test_plugin_file("fake_not_a_plugin");
  const std::string expected = file +
                               ": not a dscore plugin: no symbol dscore_plugin_library_v1 "
                               "(a plugin must export it; see sdk/examples)";
  ProcessResult r =
      run(optimizer("adam"), "", "\"plugins\": {\"paths\": [\"" + file + "\"]}", trusting());
  EXPECT_EQ(runtime_error(r), expected);
  EXPECT_EQ(r.out, "") << "nothing trained";

  // `config check` refuses the same config with the same message.
  ProcessOptions check_options;
  check_options.env = trusting();
  ProcessResult check = run_dscore({"config", "check", config_}, check_options);
  EXPECT_EQ(check.exit_code, 2) << check.describe();
  std::vector<std::string> lines = split_lines(check.err);
  ASSERT_EQ(lines.size(), 1u) << check.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(expected), std::string::npos) << lines[0];
}

TEST_F(CliPluginFaults, ScannedLibraryWithoutTheEntrySymbolIsNamedWhenTheLookupFails) {
  std::string m =
      config_error(run(optimizer("nothing_here"), test_plugin_dir("fake_not_a_plugin")));
  EXPECT_NE(m.find("Libraries that failed to load: " + test_plugin_file("fake_not_a_plugin") +
                   ": not a dscore plugin: no symbol dscore_plugin_library_v1"),
            std::string::npos)
      << m;
}

TEST_F(CliPluginFaults, AbiMajorMismatchNamesBothMajorsAndTheFix) {
  std::string m = config_error(run(optimizer("fake_major2"), test_plugin_dir("fake_major2")));
  EXPECT_NE(m.find("library 'lib-fake_major2' (" + test_plugin_file("fake_major2") +
                   ") was built against dscore plugin ABI major 2 (2.2), but this dscore speaks "
                   "ABI major 1 (1.2): rebuild the plugin against this dscore's sdk"),
            std::string::npos)
      << m;

  // Named as a file in plugins.paths, the same problem stops the run at once.
  ProcessResult r =
      run(optimizer("fake_major2"), "",
          "\"plugins\": {\"paths\": [\"" + test_plugin_file("fake_major2") + "\"]}", trusting());
  EXPECT_NE(runtime_error(r).find("was built against dscore plugin ABI major 2 (2.2)"),
            std::string::npos)
      << r.err;
}

// A config's plugin folder outside the config's own folder loads code only
// when the user says they trust the config; inside it, it needs no word.
TEST_F(CliPluginFaults, ConfigPluginPathsOutsideTheConfigsFolderNeedTrust) {
  const std::string paths = "\"plugins\": {\"paths\": [\"" + test_plugin_dir("fake_sgd") + "\"]}";
  ProcessResult refused = run(optimizer("FAKE_SGD"), "", paths);
  EXPECT_NE(refused.exit_code, 0) << refused.describe();
  EXPECT_NE(refused.err.find("plugins.paths entry '" + test_plugin_dir("fake_sgd") +
                             "' refused: it is outside the config file's folder"),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--trust-config-plugin-paths"), std::string::npos) << refused.err;
  EXPECT_EQ(refused.out, "") << "nothing trained";

  ProcessResult flagged =
      run(optimizer("FAKE_SGD"), "", paths, {}, {"--trust-config-plugin-paths"});
  EXPECT_EQ(flagged.exit_code, 0) << flagged.describe();
  ProcessResult by_variable = run(optimizer("FAKE_SGD"), "", paths, trusting());
  EXPECT_EQ(by_variable.exit_code, 0) << by_variable.describe();
}

// A plugin folder every user may write is refused, as ssh refuses such
// keys: the library in it is never loaded, and the failed lookup says why.
TEST_F(CliPluginFaults, AWorldWritablePluginFolderIsRefused) {
  const fs::path folder = dir_.path() / "open_plugins";
  fs::create_directories(folder);
  fs::copy_file(test_plugin_file("fake_sgd"), folder / "libfake_sgd.so");
  fs::permissions(folder, fs::perms::all);  // 0777, no sticky bit
  std::string m = config_error(run(optimizer("FAKE_SGD"), folder.string()));
  EXPECT_NE(m.find(folder.string() + " is writable by every user (mode 0777)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("chmod o-w " + folder.string()), std::string::npos) << m;
  fs::permissions(folder, fs::perms::owner_all);  // then it loads
  ProcessResult r = run(optimizer("FAKE_SGD"), folder.string());
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  // The run names the code it loaded.
  const std::string library = fs::canonical(folder / "libfake_sgd.so").string();
  EXPECT_NE(r.err.find("plugin library " + library + " sha256 " + *sha256_of_file(library)),
            std::string::npos)
      << r.err;
}

TEST_F(CliPluginFaults, NewerMinorNeedingANewerHostNamesBothVersions) {
  std::string m = config_error(run(optimizer("fake_minor99"), test_plugin_dir("fake_minor99")));
  EXPECT_NE(m.find("library 'lib-fake_minor99' (" + test_plugin_file("fake_minor99") +
                   ") was built against plugin ABI 1.99 and needs a host of ABI 1.99 or later; "
                   "this dscore is ABI 1.2: upgrade dscore to ABI 1.99 or later or rebuild the "
                   "plugin against sdk 1.2"),
            std::string::npos)
      << m;
}

TEST_F(CliPluginFaults, NewerMinorWhoseMinimumHostIsMetTrains) {
  ProcessResult r = run(optimizer("fake_minor5"), test_plugin_dir("fake_minor5"));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
}

TEST_F(CliPluginFaults, NullRequiredFunctionNamesTheField) {
  std::string m = config_error(run(optimizer("fake_null_step"), test_plugin_dir("fake_null_step")));
  EXPECT_NE(m.find(display("fake_null_step") +
                   ": required function 'step' is NULL (dscore_optimizer_vtable.step must be set)"),
            std::string::npos)
      << m;
}

TEST_F(CliPluginFaults, CreateReturningAnErrorShowsThePluginsMessage) {
  EXPECT_EQ(
      runtime_error(run(optimizer("fake_create_invalid"), test_plugin_dir("fake_create_invalid"))),
      display("fake_create_invalid") + " create: fake rejects its params: 'lr' must be > 0");
}

TEST_F(CliPluginFaults, ExceptionThroughTheAbiIsConvertedNotACrash) {
  ProcessResult r = run(optimizer("fake_throws_raw"), test_plugin_dir("fake_throws_raw"));
  EXPECT_FALSE(r.signal == SIGABRT) << "std::terminate: " << r.describe();
  EXPECT_EQ(runtime_error(r),
            display("fake_throws_raw") +
                " threw a C++ exception out of create across the C ABI; its exported functions "
                "must catch everything (use dscore::sdk::guard from dscore/cpp/plugin.hpp); the "
                "exception said: raw boom from create");
}

TEST_F(CliPluginFaults, ExceptionCaughtBySdkGuardBecomesThePluginsError) {
  EXPECT_EQ(
      runtime_error(run(optimizer("fake_throws_guarded"), test_plugin_dir("fake_throws_guarded"))),
      display("fake_throws_guarded") + " create: guarded boom from create");
}

TEST_F(CliPluginFaults, GarbageStatusAndNullHandleAreRejected) {
  EXPECT_EQ(
      runtime_error(run(optimizer("fake_garbage_status"), test_plugin_dir("fake_garbage_status"))),
      display("fake_garbage_status") +
          " create returned an invalid status 1234 (not a dscore_status code; a bug in the "
          "plugin)");
  EXPECT_EQ(runtime_error(run(optimizer("fake_null_handle"), test_plugin_dir("fake_null_handle"))),
            display("fake_null_handle") +
                " create returned OK but no instance (the handle is NULL); a bug in the plugin");
}

TEST_F(CliPluginFaults, FailingInitNamesTheLibraryAndItsMessage) {
  std::string m =
      runtime_error(run(optimizer("fake_init_fails"), test_plugin_dir("fake_init_fails")));
  EXPECT_EQ(m.rfind("library 'lib-fake_init_fails' (" + test_plugin_file("fake_init_fails") +
                        ") init: license file /nonexistent/fake.lic not found",
                    0),
            0u)
      << m;
}

TEST_F(CliPluginFaults, SegfaultInStepKillsTheProcessAfterNamingThePluginAndFunction) {
  EnvOverrides env;
  // Under a sanitizer preset its runtime would report the fault and exit(1)
  // instead of letting the signal end the process; this test is about
  // dscore's own handler.
  for (const char* variable : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"})
    append_sanitizer_option(&env, variable, "handle_segv=0");
  ProcessResult r = run(optimizer("fake_segv"), test_plugin_dir("fake_segv"), "", env);
  EXPECT_EQ(r.signal, SIGSEGV) << r.describe();
  std::vector<std::string> lines = lines_starting_with(r.err, "dscore: fatal signal");
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0], "dscore: fatal signal SIGSEGV while running step of " + display("fake_segv"));
}

}  // namespace
}  // namespace dscore::testing
