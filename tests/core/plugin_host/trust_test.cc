// Which plugin files may be loaded and which config folders may be searched
// (core/plugin_host/trust.h): each refusal names the file or entry and the
// fix; what is safe passes.
#include "core/plugin_host/trust.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/fakes/temp_dir.h"

namespace dscore::plugin_host {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

class TrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = dir_.path() / "plugins";
    fs::create_directories(folder_);
    fs::permissions(folder_, fs::perms::owner_all);
    library_ =
        fs::canonical(dir_.write("plugins/" + std::string("libx.so"), "not a library")).string();
  }

  TempDir dir_{"dscore_trust"};
  fs::path folder_;
  std::string library_;
};

TEST_F(TrustTest, AFileInFoldersOnlyItsOwnerMayWriteIsTrusted) {
  EXPECT_TRUE(check_library_trusted(library_).ok()) << check_library_trusted(library_).message();
}

TEST_F(TrustTest, AWorldWritableFileOrFolderIsRefusedNamingIt) {
  fs::permissions(library_, fs::perms::all);
  Status file = check_library_trusted(library_);
  EXPECT_EQ(file.code(), DSCORE_PERMISSION_DENIED);
  EXPECT_NE(file.message().find(library_ + " is writable by every user (mode 0777)"),
            std::string::npos)
      << file.message();
  fs::permissions(library_, fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(folder_, fs::perms::all);
  Status folder = check_library_trusted(library_);
  EXPECT_NE(folder.message().find("plugin library " + library_ + " refused: " +
                                  fs::canonical(folder_).string() + " is writable by every user"),
            std::string::npos)
      << folder.message();
  EXPECT_NE(folder.message().find("chmod o-w"), std::string::npos);
}

// Others may not replace what is in a sticky folder (/tmp's mode 1777).
TEST_F(TrustTest, AWorldWritableFolderWithTheStickyBitIsTrusted) {
  fs::permissions(folder_, fs::perms::all | fs::perms::sticky_bit);
  EXPECT_TRUE(check_library_trusted(library_).ok()) << check_library_trusted(library_).message();
}

// The owner is this process's user or root; any other user is refused.
// Seen from a process of another user (the policy), the test's own file is
// someone else's, unless the test runs as root, whose files are trusted:
// then the file is given to another user.
TEST_F(TrustTest, AFileOwnedByAnotherUserIsRefused) {
  TrustPolicy other{geteuid() + 1000};
  if (geteuid() == 0) {
    ASSERT_EQ(::chown(library_.c_str(), 12345, 0), 0);
    other = TrustPolicy::of_this_process();
  }
  Status st = check_library_trusted(library_, other);
  EXPECT_EQ(st.code(), DSCORE_PERMISSION_DENIED);
  EXPECT_NE(st.message().find("is owned by user "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("nor root"), std::string::npos) << st.message();
}

TEST(ConfigPluginPaths, EntriesUnderTheConfigsFolderNeedNoTrust) {
  TempDir dir("dscore_trust_config");
  const std::string config_dir = dir.path().string();
  EXPECT_TRUE(
      check_config_plugin_paths({"my_plugins", "./a/b", config_dir + "/c"}, config_dir, false)
          .ok());
}

TEST(ConfigPluginPaths, EntriesElsewhereAreRefusedUnlessTrusted) {
  TempDir dir("dscore_trust_config");
  const std::string config_dir = dir.path().string();
  for (const std::string entry : {"/usr/lib", "../elsewhere", "sub/../../escape"}) {
    Status st = check_config_plugin_paths({"inside", entry}, config_dir, false);
    EXPECT_EQ(st.code(), DSCORE_PERMISSION_DENIED) << entry;
    EXPECT_NE(st.message().find("plugins.paths entry '" + entry + "' refused"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("--trust-config-plugin-paths"), std::string::npos);
    EXPECT_TRUE(check_config_plugin_paths({entry}, config_dir, true).ok()) << entry;
  }
  // A folder whose name only starts like the config's is not inside it.
  EXPECT_FALSE(check_config_plugin_paths({config_dir + "_other"}, config_dir, false).ok());
  // A config that is no file has no folder: every entry needs trust.
  EXPECT_FALSE(check_config_plugin_paths({"/usr/lib"}, "", false).ok());
  EXPECT_TRUE(check_config_plugin_paths({}, "", false).ok());
}

}  // namespace
}  // namespace dscore::plugin_host
