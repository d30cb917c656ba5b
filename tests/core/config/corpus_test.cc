// Real-world ds_config.json files (tests/config_corpus/, origins in its
// manifest.tsv) through the config loader: each file is accepted, or
// rejected with errors each of one kind (ErrorKind), and the set of kinds is
// the one the manifest states ("removed", or "deepspeed_rejects+removed" for
// a file with problems of two kinds), so a change in classification fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace dscore::config {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(DSCORE_SOURCE_DIR) / "tests" / "config_corpus";

struct Entry {
  std::string file;      // relative to kCorpus
  std::string expected;  // "accepted", or error_kind_names joined by '+' in name order
  int line = 0;          // in the manifest
};

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, '\t')) out.push_back(cell);
  return out;
}

std::vector<Entry> read_manifest() {
  std::ifstream in(kCorpus / "manifest.tsv");
  EXPECT_TRUE(in) << "cannot read " << (kCorpus / "manifest.tsv");
  std::vector<Entry> entries;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells = split_tabs(line);
    EXPECT_GE(cells.size(), 5u) << "manifest.tsv:" << n << ": file, class, repo, path, commit";
    if (cells.size() < 2) continue;
    entries.push_back({cells[0], cells[1], n});
  }
  return entries;
}

ResolveContext context(bool allow_unsupported) {
  ResolveContext c;
  c.world_size = 1;
  c.hidden_size = 1024;  // what the model would give the hidden-size "auto" rules
  c.allow_unsupported = allow_unsupported;
  return c;
}

// "accepted", or the kinds of the errors, in name order, joined by '+'.
std::string classify(const LoadedConfig& loaded) {
  if (loaded.ok()) return "accepted";
  std::set<std::string> kinds;
  for (const ConfigError& e : loaded.errors) kinds.insert(error_kind_name(e.kind));
  std::string out;
  for (const std::string& k : kinds) out += (out.empty() ? "" : "+") + k;
  return out;
}

std::string all_errors(const LoadedConfig& loaded) {
  std::string out;
  for (const ConfigError& e : loaded.errors)
    out +=
        "\n  [" + std::string(error_kind_name(e.kind)) + "] " + format_error(e, loaded.source_name);
  return out;
}

TEST(ConfigCorpus, EveryFileHasItsStatedClass) {
  const std::vector<Entry> entries = read_manifest();
  ASSERT_GE(entries.size(), 40u);
  std::map<std::string, int> counts;
  for (const Entry& entry : entries) {
    const fs::path path = kCorpus / entry.file;
    const LoadedConfig loaded = load_config_file(path.string(), context(false));
    const std::string got = classify(loaded);
    ++counts[got];
    EXPECT_EQ(got, entry.expected)
        << "manifest.tsv:" << entry.line << ": " << entry.file << all_errors(loaded);
  }
  std::string summary;
  for (const auto& [kind, count] : counts) summary += " " + kind + "=" + std::to_string(count);
  std::printf("corpus: %zu configs:%s\n", entries.size(), summary.c_str());
}

// Each class reads as what it is: an unsupported feature says so, names the
// way out and is lifted by allow_unsupported alone; the other two are not.
TEST(ConfigCorpus, MessagesMatchTheirClass) {
  for (const Entry& entry : read_manifest()) {
    const fs::path path = kCorpus / entry.file;
    const LoadedConfig strict = load_config_file(path.string(), context(false));
    const LoadedConfig lenient = load_config_file(path.string(), context(true));
    for (const ConfigError& e : strict.errors) {
      const std::string line = format_error(e, strict.source_name);
      switch (e.kind) {
        case ErrorKind::kUnsupported:
          EXPECT_NE(line.find("not implemented by dscore: "), std::string::npos) << line;
          EXPECT_NE(line.find("--allow-unsupported"), std::string::npos) << line;
          EXPECT_TRUE(e.location.known()) << line;
          break;
        case ErrorKind::kDeepSpeedRejects:
        case ErrorKind::kRemoved:
          EXPECT_EQ(line.find("not implemented by dscore"), std::string::npos) << line;
          EXPECT_TRUE(e.location.known()) << line;
          break;
        case ErrorKind::kInvalid:
          EXPECT_EQ(line.find("not implemented by dscore"), std::string::npos) << line;
          break;
      }
    }
    if (entry.expected == "unsupported") {  // that kind alone
      EXPECT_TRUE(lenient.ok()) << entry.file << all_errors(lenient);
      size_t warnings = 0;
      for (const ConfigNotice& n : lenient.notices)
        if (n.message.rfind("warning: not implemented by dscore: ", 0) == 0) ++warnings;
      EXPECT_GE(warnings, 1u) << entry.file;
    } else {
      // Lenient loading drops exactly the unsupported kind.
      std::string rest;
      std::stringstream kinds(entry.expected);
      for (std::string k; std::getline(kinds, k, '+');)
        if (k != "unsupported") rest += (rest.empty() ? "" : "+") + k;
      EXPECT_EQ(classify(lenient), rest) << entry.file << all_errors(lenient);
    }
  }
}

// The manifest and the folder agree: no file without a stated class, no
// stated class without its file.
TEST(ConfigCorpus, ManifestListsEveryFile) {
  std::set<std::string> listed;
  for (const Entry& entry : read_manifest()) {
    EXPECT_TRUE(listed.insert(entry.file).second) << "listed twice: " << entry.file;
    EXPECT_TRUE(fs::exists(kCorpus / entry.file)) << "missing: " << entry.file;
    const std::set<std::string> classes = {"accepted", "invalid", "unsupported",
                                           "deepspeed_rejects", "removed"};
    std::stringstream kinds(entry.expected);
    for (std::string k; std::getline(kinds, k, '+');)
      EXPECT_TRUE(classes.count(k)) << entry.file << ": class " << entry.expected;
  }
  for (const auto& item : fs::recursive_directory_iterator(kCorpus)) {
    if (item.path().extension() != ".json") continue;
    const std::string rel = fs::relative(item.path(), kCorpus).generic_string();
    EXPECT_TRUE(listed.count(rel)) << "not in manifest.tsv: " << rel;
  }
}

}  // namespace
}  // namespace dscore::config
