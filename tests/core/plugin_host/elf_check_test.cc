// check_elf_file (core/plugin_host/elf_check.cc): a plugin library cut short
// (an interrupted copy, a full disk) is named with what does not fit before
// the loader maps it; intact libraries and files the loader refuses on its
// own pass.
#include "core/plugin_host/elf_check.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/core/plugin_host/test_plugins.h"

namespace dscore::plugin_host {
namespace {

namespace fs = std::filesystem;
using testing::test_plugin_file;

class ElfCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "dscore_elf_XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    std::ifstream in(test_plugin_file("fake_sgd"), std::ios::binary);
    library_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_GT(library_.size(), sizeof(Elf64_Ehdr));
    std::memcpy(&header_, library_.data(), sizeof header_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The library's first `size` bytes, as a file.
  std::string write(std::string bytes, size_t size) {
    bytes.resize(size);
    const std::string path = (dir_ / "libcut.so").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return path;
  }

  std::string message(const std::string& path) { return check_elf_file(path).message(); }

  fs::path dir_;
  std::string library_;
  Elf64_Ehdr header_{};
};

const char kFix[] =
    " bytes; reinstall or rebuild it (an interrupted copy or a full disk leaves a file like this)";

TEST_F(ElfCheck, AnIntactLibraryPasses) {
  EXPECT_TRUE(check_elf_file(test_plugin_file("fake_sgd")).ok());
  EXPECT_TRUE(check_elf_file(write(library_, library_.size())).ok());
}

TEST_F(ElfCheck, ACopyCutShortNamesTheSectionHeadersAndBothSizes) {
  const uint64_t end = header_.e_shoff + uint64_t{header_.e_shnum} * header_.e_shentsize;
  ASSERT_EQ(end, library_.size()) << "the linker puts the section headers last";
  const Status s = check_elf_file(write(library_, 3000));
  EXPECT_EQ(s.code(), DSCORE_FAILED_PRECONDITION);
  EXPECT_EQ(s.message(), "truncated ELF: section headers end at byte " + std::to_string(end) +
                             " but the file has 3000" + kFix);
  // One byte short is caught as well.
  EXPECT_EQ(message(write(library_, library_.size() - 1)),
            "truncated ELF: section headers end at byte " + std::to_string(end) +
                " but the file has " + std::to_string(library_.size() - 1) + kFix);
}

TEST_F(ElfCheck, AHeaderCutShortIsNamed) {
  EXPECT_EQ(
      message(write(library_, 40)),
      std::string("truncated ELF: the ELF header ends at byte 64 but the file has 40") + kFix);
  const uint64_t ph_end = header_.e_phoff + uint64_t{header_.e_phnum} * header_.e_phentsize;
  EXPECT_EQ(message(write(library_, ph_end - 8)),
            "truncated ELF: program headers end at byte " + std::to_string(ph_end) +
                " but the file has " + std::to_string(ph_end - 8) + kFix);
}

TEST_F(ElfCheck, ASegmentCutShortIsNamedWhenThereAreNoSectionHeaders) {
  // Section headers are optional (a stripped-down file); the loadable
  // segments are what the loader maps.
  std::string bytes = library_;
  Elf64_Ehdr eh = header_;
  eh.e_shoff = 0;
  eh.e_shnum = 0;
  std::memcpy(bytes.data(), &eh, sizeof eh);
  uint64_t last_end = 0;
  size_t last = 0;
  for (size_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_filesz > 0 && ph.p_offset + ph.p_filesz > last_end) {
      last_end = ph.p_offset + ph.p_filesz;
      last = i;
    }
  }
  ASSERT_GT(last_end, 100u);
  EXPECT_TRUE(check_elf_file(write(bytes, bytes.size())).ok());
  EXPECT_EQ(message(write(bytes, last_end - 100)),
            "truncated ELF: segment " + std::to_string(last) + " ends at byte " +
                std::to_string(last_end) + " but the file has " + std::to_string(last_end - 100) +
                kFix);
}

TEST_F(ElfCheck, FilesTheLoaderRefusesOnItsOwnPass) {
  // Its own message ("invalid ELF header", "wrong ELF class") says more.
  EXPECT_TRUE(check_elf_file(write("this is text, not ELF\n", 22)).ok());
  std::string other_class = library_;
  other_class[EI_CLASS] = ELFCLASS32;
  EXPECT_TRUE(check_elf_file(write(other_class, 3000)).ok());
  EXPECT_TRUE(check_elf_file((dir_ / "missing.so").string()).ok());
}

}  // namespace
}  // namespace dscore::plugin_host
