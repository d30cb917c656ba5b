// Discovery and load-time validation (core/plugin_host/registry.cc,
// validate.cc, library.cc, search_path.cc): every broken library is
// reported with the exact message a user would see, naming the library,
// its path and the field or versions at fault; nothing crashes.
#include "core/plugin_host/registry.h"
#include "tests/fakes/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "core/plugin_host/library.h"
#include "tests/core/plugin_host/test_plugins.h"
#include "tests/fakes/scoped_env.h"

namespace dscore::plugin_host {
namespace {

namespace fs = std::filesystem;
using testing::folders_of;
using testing::open_test_registry;
using testing::test_plugin_dir;
using testing::test_plugin_file;

// The one problem a registry over one broken library must report.
std::string only_problem(const std::string& name) {
  auto registry = open_test_registry({name});
  if (!registry) return "";
  EXPECT_TRUE(registry->plugins().empty());
  EXPECT_EQ(registry->problems().size(), 1u);
  if (registry->problems().empty()) return "";
  EXPECT_EQ(registry->problems()[0].path, test_plugin_file(name));
  return registry->problems()[0].message;
}

TEST(PluginRegistry, ListsAGoodPluginWithItsMetadataWithoutRunningIt) {
  auto registry = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(registry);
  EXPECT_TRUE(registry->problems().empty());
  ASSERT_EQ(registry->plugins().size(), 1u);
  const PluginInfo& info = registry->plugins()[0];
  EXPECT_EQ(info.kind, DSCORE_KIND_OPTIMIZER);
  EXPECT_EQ(info.name, "fake_sgd");
  EXPECT_EQ(info.version, "1.2.3");
  EXPECT_EQ(info.capabilities, DSCORE_CAP_CPU | DSCORE_CAP_F32);
  EXPECT_EQ(info.library_path, test_plugin_file("fake_sgd"));
  EXPECT_EQ(info.library_name, "lib-fake_sgd");
  EXPECT_EQ(info.vendor, "dscore tests");
  EXPECT_EQ(info.abi_major, 1u);
  EXPECT_EQ(info.abi_minor, 2u);
  EXPECT_FALSE(info.params_schema.empty());
  EXPECT_EQ(info.display(), "optimizer 'fake_sgd' (" + test_plugin_file("fake_sgd") + ")");
  // Listing and validating never run plugin code beyond the entry symbol.
  EXPECT_FALSE(info.library->initialized());
}

TEST(PluginRegistry, FindIgnoresCase) {
  auto registry = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(registry);
  auto found = registry->find(DSCORE_KIND_OPTIMIZER, "FAKE_Sgd");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->name, "fake_sgd");
  // The same name under another kind is another plugin.
  EXPECT_EQ(registry->find(DSCORE_KIND_SCHEDULER, "fake_sgd").status().code(), DSCORE_NOT_FOUND);
}

// DeepSpeed's class names FusedAdam / FusedLamb find the plugins named
// adam / lamb (any case), for optimizers only, unless a plugin carries the
// alias's own name.
TEST(PluginRegistry, FusedOptimizerNamesFindTheirPluginsUnlessOneHasThatName) {
  auto registry = open_test_registry({"fake_named_adam"});
  ASSERT_TRUE(registry);
  auto found = registry->find(DSCORE_KIND_OPTIMIZER, "FUSEDadam");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->name, "adam");
  EXPECT_EQ(registry->find(DSCORE_KIND_SCHEDULER, "FusedAdam").status().code(), DSCORE_NOT_FOUND);
  EXPECT_EQ(registry->find(DSCORE_KIND_OPTIMIZER, "FusedLamb").status().code(), DSCORE_NOT_FOUND)
      << "no plugin named lamb here";
  registry = open_test_registry({"fake_named_adam", "fake_named_fusedadam"});
  ASSERT_TRUE(registry);
  found = registry->find(DSCORE_KIND_OPTIMIZER, "fusedadam");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->name, "FusedAdam");
  EXPECT_EQ(PluginRegistry::optimizer_alias("fusedLAMB"), "lamb");
  EXPECT_EQ(PluginRegistry::optimizer_alias("adam"), "");
}

TEST(PluginRegistry, NotFoundSuggestsListsAndNamesWhereItLooked) {
  auto registry = open_test_registry({"fake_sgd", "fake_not_a_plugin"});
  ASSERT_TRUE(registry);
  auto found = registry->find(DSCORE_KIND_OPTIMIZER, "fake_sdg");
  ASSERT_EQ(found.status().code(), DSCORE_NOT_FOUND);
  const std::string& m = found.status().message();
  EXPECT_NE(m.find("no optimizer plugin named 'fake_sdg'; did you mean \"fake_sgd\"?"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("available: fake_sgd"), std::string::npos) << m;
  EXPECT_NE(m.find("Searched: " + test_plugin_dir("fake_sgd")), std::string::npos) << m;
  EXPECT_NE(m.find("Libraries that failed to load: " + test_plugin_file("fake_not_a_plugin")),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("DSCORE_PLUGIN_PATH"), std::string::npos) << m;
}

TEST(PluginRegistry, LibraryWithoutEntrySymbolIsAProblemWhenScanned) {
  EXPECT_EQ(only_problem("fake_not_a_plugin"),
            test_plugin_file("fake_not_a_plugin") +
                ": not a dscore plugin: no symbol dscore_plugin_library_v1 (a plugin must export "
                "it; see sdk/examples)");
}

TEST(PluginRegistry, ExplicitlyNamedFileThatFailsIsFatal) {
  SearchPath path;
  path.add(test_plugin_file("fake_not_a_plugin"), true, "plugins.paths");
  auto registry = PluginRegistry::open(path);
  ASSERT_FALSE(registry.ok());
  EXPECT_EQ(registry.status().code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_EQ(registry.status().message(),
            test_plugin_file("fake_not_a_plugin") +
                ": not a dscore plugin: no symbol dscore_plugin_library_v1 (a plugin must export "
                "it; see sdk/examples)");
}

TEST(PluginRegistry, ExplicitlyNamedGoodFileLoads) {
  SearchPath path;
  path.add(test_plugin_file("fake_sgd"), true, "plugins.paths");
  auto registry = PluginRegistry::open(path);
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  EXPECT_EQ((*registry)->plugins().size(), 1u);
}

TEST(PluginRegistry, AbiMajorMismatchNamesBothMajorsAndTheFix) {
  EXPECT_EQ(only_problem("fake_major2"),
            "library 'lib-fake_major2' (" + test_plugin_file("fake_major2") +
                ") was built against dscore plugin ABI major 2 (2.2), but this dscore speaks ABI "
                "major 1 (1.2): rebuild the plugin against this dscore's sdk");
}

TEST(PluginRegistry, NewerMinorNeedingANewerHostIsRejectedWithBothVersionsAndTheFix) {
  EXPECT_EQ(only_problem("fake_minor99"),
            "library 'lib-fake_minor99' (" + test_plugin_file("fake_minor99") +
                ") was built against plugin ABI 1.99 and needs a host of ABI 1.99 or later; this "
                "dscore is ABI 1.2: upgrade dscore to ABI 1.99 or later or rebuild the plugin "
                "against sdk 1.2");
}

TEST(PluginRegistry, NewerMinorLoadsWhenItsMinimumHostMinorIsMet) {
  auto registry = open_test_registry({"fake_minor5"});
  ASSERT_TRUE(registry);
  EXPECT_TRUE(registry->problems().empty());
  auto found = registry->find(DSCORE_KIND_OPTIMIZER, "fake_minor5");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->abi_minor, 5u);
  EXPECT_EQ((*found)->min_host_minor, 0u);
}

TEST(PluginRegistry, NullRequiredFunctionNamesTheField) {
  EXPECT_EQ(only_problem("fake_null_step"),
            "optimizer 'fake_null_step' (" + test_plugin_file("fake_null_step") +
                "): required function 'step' is NULL (dscore_optimizer_vtable.step must be set)");
}

TEST(PluginRegistry, UnparsableParamsSchemaNamesThePlugin) {
  std::string m = only_problem("fake_bad_schema");
  EXPECT_EQ(m.rfind("optimizer 'fake_bad_schema' (" + test_plugin_file("fake_bad_schema") +
                        "): invalid params_schema: ",
                    0),
            0u)
      << m;
}

TEST(PluginRegistry, DuplicateNameAcrossLibrariesIsAnErrorNamingBothFiles) {
  auto registry = PluginRegistry::open(folders_of({"fake_dup_a", "fake_dup_b"}));
  ASSERT_FALSE(registry.ok());
  EXPECT_EQ(registry.status().code(), DSCORE_ALREADY_EXISTS);
  EXPECT_EQ(registry.status().message(),
            "two optimizer plugins are named 'dup' / 'DUP' (names match ignoring case), in " +
                test_plugin_file("fake_dup_a") + " and in " + test_plugin_file("fake_dup_b") +
                "; remove one of them from the plugin search path");
}

TEST(PluginRegistry, UnknownKindFromANewerMinorIsSkippedWithANote) {
  auto registry = open_test_registry({"fake_future_kind"});
  ASSERT_TRUE(registry);
  ASSERT_EQ(registry->plugins().size(), 1u);
  EXPECT_EQ(registry->plugins()[0].name, "fake_future");
  ASSERT_EQ(registry->problems().size(), 1u);
  EXPECT_EQ(registry->problems()[0].message,
            "library 'lib-fake_future' (" + test_plugin_file("fake_future_kind") +
                "): plugins[0] ('from_the_future') has kind 99, which this dscore (ABI 1.2) does "
                "not know; skipped (it needs a newer dscore)");
}

TEST(PluginRegistry, MissingFolderTheUserNamedIsAProblemAndABuiltInOneIsNot) {
  SearchPath path;
  path.add("/nonexistent/dscore/plugins", true, "plugins.paths");
  path.add("/nonexistent/dscore/env", true, "DSCORE_PLUGIN_PATH");
  path.add("/nonexistent/dscore/builtin", false);
  auto registry = PluginRegistry::open(path);
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  ASSERT_EQ((*registry)->problems().size(), 2u);
  EXPECT_EQ((*registry)->problems()[0].message,
            "plugins.paths entry /nonexistent/dscore/plugins does not exist");
  EXPECT_EQ((*registry)->problems()[1].message,
            "DSCORE_PLUGIN_PATH entry /nonexistent/dscore/env does not exist");
}

using dscore::testing::TempDir;  // tests/fakes/temp_dir.h

TEST(PluginRegistry, ScansOnlySharedLibrariesAndReportsCorruptOnes) {
  TempDir dir;
  fs::copy_file(test_plugin_file("fake_sgd"), dir.path() / "libcopy.so");
  std::ofstream(dir.path() / "README.txt") << "not a library\n";
  std::ofstream(dir.path() / "libnotes.so.txt") << "not a library either\n";
  std::ofstream(dir.path() / "libjunk.so") << "this is text, not ELF\n";
  SearchPath path;
  path.add(dir.path().string(), true, "plugins.paths");
  auto registry = PluginRegistry::open(path);
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  ASSERT_EQ((*registry)->plugins().size(), 1u);
  EXPECT_EQ((*registry)->plugins()[0].library_path,
            fs::canonical(dir.path() / "libcopy.so").string());
  ASSERT_EQ((*registry)->problems().size(), 1u);
  const LoadProblem& p = (*registry)->problems()[0];
  EXPECT_EQ(p.path, fs::canonical(dir.path() / "libjunk.so").string());
  EXPECT_EQ(p.message.rfind(p.path + ": cannot be loaded: ", 0), 0u) << p.message;
}

// A library cut short (the first 3000 bytes of a copy) used to kill the
// process with SIGBUS inside dlopen; it is reported and skipped like any
// other unloadable file, and is an error when named explicitly.
TEST(PluginRegistry, ATruncatedLibraryIsReportedAndSkippedNotMapped) {
  TempDir dir;
  fs::copy_file(test_plugin_file("fake_sgd"), dir.path() / "libgood.so");
  {
    std::ifstream in(test_plugin_file("fake_sgd"), std::ios::binary);
    std::string head(3000, '\0');
    in.read(head.data(), 3000);
    std::ofstream(dir.path() / "libcut.so", std::ios::binary) << head;
  }
  const std::string cut = fs::canonical(dir.path() / "libcut.so").string();
  SearchPath path;
  path.add(dir.path().string(), true, "plugins.paths");
  auto registry = PluginRegistry::open(path);
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  ASSERT_EQ((*registry)->plugins().size(), 1u);
  ASSERT_EQ((*registry)->problems().size(), 1u);
  const LoadProblem& p = (*registry)->problems()[0];
  EXPECT_EQ(p.path, cut);
  EXPECT_EQ(
      p.message.rfind(cut + ": cannot be loaded: truncated ELF: section headers end at byte ", 0),
      0u)
      << p.message;
  EXPECT_NE(p.message.find(" but the file has 3000 bytes; reinstall or rebuild it"),
            std::string::npos)
      << p.message;
  EXPECT_FALSE(library_is_open(cut));

  SearchPath named;
  named.add(cut, true, "plugins.paths");
  auto refused = PluginRegistry::open(named);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), p.message);
}

TEST(PluginRegistry, TheSameFileReachedTwiceIsScannedOnce) {
  TempDir dir;
  fs::create_directory_symlink(test_plugin_dir("fake_sgd"), dir.path() / "link");
  SearchPath path;
  path.add(test_plugin_dir("fake_sgd"), false);
  path.add((dir.path() / "link").string(), true, "plugins.paths");
  path.add(test_plugin_file("fake_sgd"), true, "plugins.paths");
  auto registry = PluginRegistry::open(path);
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  EXPECT_EQ((*registry)->plugins().size(), 1u);
  EXPECT_TRUE((*registry)->problems().empty());
}

TEST(PluginRegistry, TwoRegistriesShareOneLoadOfALibrary) {
  auto a = open_test_registry({"fake_sgd"});
  auto b = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->plugins()[0].library.get(), b->plugins()[0].library.get());
}

TEST(PluginRegistry, KindNamesParseBothWays) {
  for (dscore_plugin_kind k : {DSCORE_KIND_OPTIMIZER, DSCORE_KIND_SCHEDULER, DSCORE_KIND_OFFLOAD,
                               DSCORE_KIND_COMM, DSCORE_KIND_MONITOR, DSCORE_KIND_MODEL}) {
    dscore_plugin_kind parsed = 0;
    ASSERT_TRUE(parse_kind(kind_name(k), &parsed)) << kind_name(k);
    EXPECT_EQ(parsed, k);
  }
  dscore_plugin_kind parsed = 0;
  EXPECT_TRUE(parse_kind("Schedulers", &parsed));
  EXPECT_EQ(parsed, DSCORE_KIND_SCHEDULER);
  EXPECT_FALSE(parse_kind("optimiser", &parsed));
  EXPECT_STREQ(kind_name(42), "unknown");
}

// --- the standard search path and the build's own plugins

TEST(PluginRegistry, StandardSearchPathOrderAndOrigins) {
  ScopedEnv env("DSCORE_PLUGIN_PATH", "/env/a::/env/b");
  SearchPath path = SearchPath::standard({"rel/plugins", "/abs/plugins"}, "/cfg");
  const std::string build_dir = fs::canonical(DSCORE_BUILD_PLUGIN_DIR).string();
  // The test binary runs from the build tree, whose plugin folder exists, so
  // the install prefix's folder is not added (it could hold an older copy).
  ASSERT_EQ(path.entries.size(), 5u);
  EXPECT_EQ(path.entries[0], "/cfg/rel/plugins");
  EXPECT_EQ(path.entries[1], "/abs/plugins");
  EXPECT_EQ(path.entries[2], "/env/a");
  EXPECT_EQ(path.entries[3], "/env/b");
  EXPECT_EQ(fs::canonical(path.entries[4]).string(), build_dir);
  EXPECT_EQ(path.explicit_entry, (std::vector<bool>{true, true, true, true, false}));
  EXPECT_EQ(path.origins[0], "plugins.paths");
  EXPECT_EQ(path.origins[2], "DSCORE_PLUGIN_PATH");
  EXPECT_EQ(path.origins[4], "");
}

TEST(PluginRegistry, DiscoversEveryLibraryInTheBuildsPluginFolder) {
  ScopedEnv env("DSCORE_PLUGIN_PATH", std::nullopt);
  auto registry = PluginRegistry::open(SearchPath::standard({}, ""));
  ASSERT_TRUE(registry.ok()) << registry.status().message();
  for (const LoadProblem& p : (*registry)->problems()) ADD_FAILURE() << p.path << ": " << p.message;
  std::set<std::string> with_plugins;
  for (const PluginInfo& info : (*registry)->plugins()) with_plugins.insert(info.library_path);
  size_t libraries = 0;
  for (const auto& e : fs::directory_iterator(DSCORE_BUILD_PLUGIN_DIR)) {
    if (e.path().extension() != ".so") continue;
    ++libraries;
    EXPECT_TRUE(with_plugins.count(fs::canonical(e.path()).string())) << e.path();
  }
  EXPECT_GT(libraries, 0u) << "the build's plugin folder " << DSCORE_BUILD_PLUGIN_DIR
                           << " is empty";
  EXPECT_EQ(with_plugins.size(), libraries);
}

}  // namespace
}  // namespace dscore::plugin_host
