// Always-built robustness test for load_config_text: the seed corpus
// (tests/fuzz/corpus/*.json, valid and broken configs) and 20,000
// deterministic mutants of it (byte flips, inserts of JSON tokens,
// deletions, truncations, splices between files, duplications). For every
// input: no crash or exception, a config exactly when there are no errors,
// every error a non-empty single line; and a valid config reloads from its
// own resolved form to the same result. config_fuzzer.cc runs the same
// checks under libFuzzer (DSCORE_FUZZ=ON with clang).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/config/config.h"
#include "tests/fuzz/config_checks.h"
#include "tests/fuzz/mutate.h"

namespace dscore::config {
namespace {

struct Seed {
  std::string name;
  std::string text;
};

std::vector<Seed> read_corpus() {
  std::vector<Seed> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(DSCORE_FUZZ_CORPUS_DIR)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    seeds.push_back({entry.path().filename().string(), s.str()});
  }
  std::sort(seeds.begin(), seeds.end(),
            [](const Seed& a, const Seed& b) { return a.name < b.name; });
  return seeds;
}

TEST(ConfigFuzzCorpus, SeedsBehaveAsNamed) {
  std::vector<Seed> seeds = read_corpus();
  ASSERT_GE(seeds.size(), 10u);
  for (const Seed& s : seeds) {
    LoadedConfig c = load_config_text(s.text, s.name, ResolveContext{});
    std::string problem = check_loaded(c, s.text, ResolveContext{});
    EXPECT_EQ(problem, "") << s.name;
    // bad_*.json must fail; the others must load.
    const bool bad = s.name.rfind("bad_", 0) == 0;
    EXPECT_EQ(c.ok(), !bad) << s.name << ": "
                            << (c.errors.empty() ? "" : format_error(c.errors[0], c.source_name));
  }
}

// Tokens that steer mutants into interesting corners of the grammar and
// the schema.
const std::vector<std::string> kTokens = {"{",
                                          "}",
                                          "[",
                                          "]",
                                          ",",
                                          ":",
                                          "\"",
                                          "\\",
                                          "\"auto\"",
                                          "null",
                                          "true",
                                          "false",
                                          "0",
                                          "-1",
                                          "1e400",
                                          "2.5",
                                          "9223372036854775808",
                                          "-9223372036854775809",
                                          "5e8",
                                          "\"stage\"",
                                          "\"zero_optimization\"",
                                          "\"train_batch_size\"",
                                          "//",
                                          "/*",
                                          "*/",
                                          "\n",
                                          "\xc3\xa9",
                                          "\xff",
                                          "\\u0000",
                                          "{\"a\":1}"};

TEST(ConfigFuzzCorpus, TwentyThousandMutantsNeitherCrashNorMisreport) {
  std::vector<Seed> seeds = read_corpus();
  ASSERT_FALSE(seeds.empty());
  std::vector<std::string> texts;
  for (const Seed& s : seeds) texts.push_back(s.text);
  const fuzz::Mutations mutations{kTokens, /*digits=*/true, /*integers=*/false};
  std::mt19937_64 rng(20250221);
  size_t loaded = 0, failed = 0;
  for (int i = 0; i < 20000; ++i) {
    const Seed& seed = seeds[static_cast<size_t>(i) % seeds.size()];
    const std::string text = fuzz::mutate(seed.text, texts, mutations, rng);
    ResolveContext ctx;
    ctx.world_size = 1 + static_cast<int>(rng() % 4);
    if (rng() % 3 == 0) ctx.hidden_size = static_cast<int64_t>(rng() % 4096);
    if (rng() % 3 == 0) ctx.train_steps = static_cast<int64_t>(rng() % 1000);
    std::string problem;
    try {
      LoadedConfig c = load_config_text(text, "mutant.json", ctx);
      problem = check_loaded(c, text, ctx);
      (c.ok() ? loaded : failed)++;
    } catch (const std::exception& e) {
      problem = std::string("exception: ") + e.what();
    }
    ASSERT_EQ(problem, "") << "mutant " << i << " of " << seed.name << " (seed 20250221):\n"
                           << text;
  }
  // The mutants must exercise both outcomes, or the loop tests nothing.
  EXPECT_GT(loaded, 200u);
  EXPECT_GT(failed, 5000u);
}

}  // namespace
}  // namespace dscore::config
