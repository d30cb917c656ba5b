// Deterministic mutants for the always-built fuzz corpus tests
// (config_fuzz_corpus_test, reader_fuzz_corpus_test): 1-4 rounds, each a
// byte flipped, a token inserted, a range deleted, the input truncated,
// another seed's tail spliced in, or a range duplicated; for text, also a
// digit replaced; for binary files, also little-endian 8- and 4-byte
// integers near the start overwritten with edge values (a safetensors
// header's length, an llm.c header's fields) and NUL bytes inserted. The
// same rng gives the same mutants.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace dscore::fuzz {

struct Mutations {
  std::vector<std::string> tokens;  // inserted whole
  bool digits = false;              // text: replace a digit with 0-9, '-', 'e' or '.'
  bool integers = false;            // binary: edge-value integers, NUL bytes
};

inline std::string mutate(const std::string& base, const std::vector<std::string>& seeds,
                          const Mutations& m, std::mt19937_64& rng) {
  enum Kind { kFlip, kToken, kDelete, kTruncate, kSplice, kDuplicate, kDigit, kInt64, kInt32 };
  std::vector<Kind> kinds = {kFlip, kToken, kDelete, kTruncate, kSplice, kDuplicate};
  if (m.digits) kinds.push_back(kDigit);
  if (m.integers) kinds.insert(kinds.end(), {kInt64, kInt32});
  std::string s = base;
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const int rounds = 1 + static_cast<int>(pick(4));
  for (int r = 0; r < rounds; ++r) {
    const size_t at = pick(s.size() + 1);
    switch (kinds[pick(kinds.size())]) {
      case kFlip:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case kToken:
        if (m.integers && pick(8) == 0)
          s.insert(at, 1, '\0');
        else
          s.insert(at, m.tokens[pick(m.tokens.size())]);
        break;
      case kDelete:
        s.erase(at, 1 + pick(16));
        break;
      case kTruncate:
        s.resize(at);
        break;
      case kSplice: {
        const std::string& other = seeds[pick(seeds.size())];
        s = s.substr(0, at) + other.substr(pick(other.size() + 1));
        break;
      }
      case kDuplicate:  // duplicate keys, repeated members
        if (at < s.size()) s.insert(at, s.substr(at, 1 + pick(40)));
        break;
      case kDigit:
        for (size_t i = 0; i < s.size(); ++i) {
          size_t j = (at + i) % s.size();
          if (s[j] >= '0' && s[j] <= '9') {
            s[j] = "0123456789-e."[pick(13)];
            break;
          }
        }
        break;
      case kInt64: {
        const uint64_t values[] = {
            0, 1, 7, 8, 1u << 20, ~uint64_t{0}, uint64_t{1} << 63, s.size(), s.size() - 7};
        const uint64_t v = values[pick(std::size(values))];
        const size_t where = pick(std::min<size_t>(s.size() + 1, 24));
        if (where + 8 <= s.size()) std::memcpy(s.data() + where, &v, 8);
        break;
      }
      case kInt32: {
        const int32_t values[] = {0,        -1,       1,          7,
                                  20240520, 20240801, 0x7fffffff, static_cast<int32_t>(s.size())};
        const int32_t v = values[pick(std::size(values))];
        const size_t where = 4 * pick(4);
        if (where + 4 <= s.size()) std::memcpy(s.data() + where, &v, 4);
        break;
      }
    }
  }
  return s;
}

}  // namespace dscore::fuzz
