// Counter-based random numbers: every value is a pure function of a key
// (seed, stream, index), so any rank can produce any slice of a parameter's
// initial values or of a synthetic batch without generating what precedes it.
// splitmix64 finalisers chained over the key words.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace dscore::sdk {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t hash_key(uint64_t a, uint64_t b, uint64_t c, uint64_t d = 0) {
  return splitmix64(splitmix64(splitmix64(splitmix64(a) ^ b) ^ c) ^ d);
}

// FNV-1a: a stable hash of a parameter name.
inline uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Uniform in [0, 1) from the top 53 bits.
inline double uniform01(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Standard normal at key (a, b, c): Box-Muller on two hashed uniforms.
inline double normal_at(uint64_t a, uint64_t b, uint64_t c) {
  double u1 = 1.0 - uniform01(hash_key(a, b, c, 1));  // (0, 1]: log is finite
  double u2 = uniform01(hash_key(a, b, c, 2));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace dscore::sdk
