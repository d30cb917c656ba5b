// Every plugin exports exactly one defined dynamic symbol, the entry point
// dscore_plugin_library_v1: everything else (inline C++, the C++ helpers,
// third-party code) stays hidden, so two plugins can never clash and the
// ABI is the table, not whatever the linker happened to export. Reads the
// ELF .dynsym directly (no dependency on binutils).
#include <elf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Defined GLOBAL/WEAK symbols of the dynamic symbol table of a 64-bit ELF.
std::set<std::string> defined_dynamic_symbols(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GE(bytes.size(), sizeof(Elf64_Ehdr)) << file;
  if (bytes.size() < sizeof(Elf64_Ehdr)) return {};
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  EXPECT_EQ(std::memcmp(eh.e_ident, ELFMAG, SELFMAG), 0) << file << " is not ELF";
  EXPECT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64) << file;
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes.data() + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
    return sh;
  };
  std::set<std::string> names;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_DYNSYM) continue;
    Elf64_Shdr strtab = section(sh.sh_link);
    for (size_t off = sh.sh_offset; off + sizeof(Elf64_Sym) <= sh.sh_offset + sh.sh_size;
         off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, bytes.data() + off, sizeof sym);
      unsigned bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0) continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      names.insert(bytes.data() + strtab.sh_offset + sym.st_name);
    }
  }
  return names;
}

std::vector<fs::path> shared_objects_in(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".so") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ExportedSymbols, ReaderSeesWhatALibraryExports) {
  // The one library here built without the version script: proves the
  // reader finds exported symbols, so an empty answer elsewhere means something.
  fs::path lib = fs::path(DSCORE_TEST_PLUGIN_DIR) / "fake_not_a_plugin" / "libfake_not_a_plugin.so";
  ASSERT_TRUE(fs::exists(lib)) << lib;
  std::set<std::string> symbols = defined_dynamic_symbols(lib);
  EXPECT_TRUE(symbols.count("not_a_dscore_plugin")) << lib;
  EXPECT_FALSE(symbols.count("dscore_plugin_library_v1"));
}

void expect_only_entry_symbol(const std::vector<fs::path>& libraries) {
  for (const fs::path& lib : libraries) {
    std::set<std::string> symbols = defined_dynamic_symbols(lib);
    EXPECT_EQ(symbols, std::set<std::string>{"dscore_plugin_library_v1"})
        << lib << " exports more (or less) than the entry symbol";
  }
}

// The CUDA modules a model plugin loads itself (the plugin folder's cuda/
// subfolder, which the host does not scan) export their factory,
// dscore_<model>_cuda_make_compute.
bool is_cuda_module(const fs::path& lib) { return lib.parent_path().filename() == "cuda"; }

TEST(ExportedSymbols, BuiltInPluginsExportOnlyTheEntrySymbol) {
  std::vector<fs::path> libraries;
  for (const fs::path& lib : shared_objects_in(DSCORE_BUILD_PLUGIN_DIR))
    if (!is_cuda_module(lib)) libraries.push_back(lib);
  // The built-in plugins are what this checks; an empty folder would pass vacuously.
  EXPECT_FALSE(libraries.empty()) << "no plugins in " << DSCORE_BUILD_PLUGIN_DIR;
  expect_only_entry_symbol(libraries);
}

TEST(ExportedSymbols, CudaModulesExportOnlyTheirFactory) {
  for (const fs::path& lib : shared_objects_in(DSCORE_BUILD_PLUGIN_DIR)) {
    if (!is_cuda_module(lib)) continue;
    // libdscore_gpt_cuda.so -> dscore_gpt_cuda_make_compute
    const std::string stem = lib.stem().string();
    const std::string factory = stem.substr(3) + "_make_compute";
    EXPECT_EQ(defined_dynamic_symbols(lib), std::set<std::string>{factory})
        << lib << " exports more (or less) than its factory";
  }
}

TEST(ExportedSymbols, TestPluginsExportOnlyTheEntrySymbol) {
  std::vector<fs::path> libraries;
  for (const fs::path& lib : shared_objects_in(DSCORE_TEST_PLUGIN_DIR))
    if (lib.filename() != "libfake_not_a_plugin.so") libraries.push_back(lib);
  EXPECT_GE(libraries.size(), 15u);
  expect_only_entry_symbol(libraries);
}

}  // namespace
