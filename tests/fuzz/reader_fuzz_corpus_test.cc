// Always built (release and ASan in CI): the reader fuzz targets
// (reader_targets.h) over their seed corpora (tests/fuzz/readers/<target>/,
// written by make_seeds.py) and deterministic mutants of them: bytes
// flipped, inserted, deleted and duplicated, files truncated and spliced,
// and 8-byte and 4-byte little-endian integers (a safetensors header's
// length, an llm.c header's fields) overwritten with edge values. Every
// input must leave its reader returning a consistent value or an error that
// names the file (reader_targets.cc). reader_fuzzer.cc runs the same targets
// under libFuzzer (DSCORE_FUZZ=ON with clang).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "tests/fuzz/mutate.h"
#include "tests/fuzz/reader_targets.h"

namespace dscore::fuzz {
namespace {

std::vector<std::string> seeds_of(const std::string& target) {
  std::vector<std::string> seeds;
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(DSCORE_READER_SEEDS) + "/" + target))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    seeds.push_back(s.str());
  }
  return seeds;
}

const std::vector<std::string> kTokens = {"{",
                                          "}",
                                          "[",
                                          "]",
                                          ",",
                                          ":",
                                          "\"",
                                          "null",
                                          "true",
                                          "-1",
                                          "0",
                                          "1e400",
                                          "18446744073709551615",
                                          "\"F32\"",
                                          "\"BF16\"",
                                          "\"I64\"",
                                          "\"dtype\"",
                                          "\"shape\"",
                                          "\"data_offsets\"",
                                          "\"__metadata__\"",
                                          "\"vocab\"",
                                          "\"merges\"",
                                          "\"type\"",
                                          "\"BPE\"",
                                          "\"weight_map\"",
                                          "\xc4\xa0",
                                          "\xff",
                                          "\\u0000",
                                          "PK\x01\x02",
                                          "PK\x05\x06",
                                          "\x80\x02",
                                          "ctorch\nFloatStorage\n",
                                          "cos\nsystem\n",
                                          "R",
                                          "Q",
                                          "."};

const Mutations kMutations{kTokens, /*digits=*/false, /*integers=*/true};

void run(const std::string& target, const std::function<std::string(std::string_view)>& reader,
         int mutants) {
  const std::vector<std::string> seeds = seeds_of(target);
  ASSERT_GE(seeds.size(), 2u) << target;
  for (const std::string& s : seeds) EXPECT_EQ(reader(s), "") << target << " seed";
  std::mt19937_64 rng(20261205);
  int failures = 0;
  for (int i = 0; i < mutants && failures < 5; ++i) {
    const std::string input = mutate(seeds[rng() % seeds.size()], seeds, kMutations, rng);
    const std::string problem = reader(input);
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << target << " mutant " << i << ": " << problem;
    }
  }
}

// DSCORE_READER_MUTANTS sets the mutants per target (default 3000).
int mutants() {
  const char* v = std::getenv("DSCORE_READER_MUTANTS");
  return v != nullptr ? std::atoi(v) : 3000;
}

TEST(ReaderFuzzCorpus, SafetensorsHeaders) { run("safetensors", safetensors_header, mutants()); }
TEST(ReaderFuzzCorpus, HuggingFaceConfigAndIndex) { run("hf_folder", hf_folder, mutants()); }
TEST(ReaderFuzzCorpus, TokenizerJson) { run("tokenizer", tokenizer_json, mutants()); }
TEST(ReaderFuzzCorpus, LlmcShardHeaders) { run("llmc", llmc_shard, mutants()); }
TEST(ReaderFuzzCorpus, TorchSaveFiles) { run("torch", torch_file, mutants()); }

}  // namespace
}  // namespace dscore::fuzz
