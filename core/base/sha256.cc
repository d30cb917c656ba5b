#include "core/base/sha256.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

namespace dscore {
namespace {

// FIPS 180-4's constants, computed rather than copied: the first 32 bits of
// the fractional parts of the square roots of the first 8 primes (the
// initial state) and of the cube roots of the first 64 primes (K). The
// test vectors (tests/core/base/sha256_test.cc) hold every one of them.
struct Constants {
  std::array<uint32_t, 8> initial{};
  std::array<uint32_t, 64> k{};

  Constants() {
    std::array<int, 64> primes{};
    for (int n = 2, found = 0; found < 64; ++n) {
      bool prime = true;
      for (int d = 2; d * d <= n; ++d) prime = prime && n % d != 0;
      if (prime) primes[static_cast<size_t>(found++)] = n;
    }
    const auto fraction_bits = [](long double root) {
      return static_cast<uint32_t>(std::floor((root - std::floor(root)) * 4294967296.0L));
    };
    for (size_t i = 0; i < 8; ++i) initial[i] = fraction_bits(std::sqrt((long double)primes[i]));
    for (size_t i = 0; i < 64; ++i) k[i] = fraction_bits(std::cbrt((long double)primes[i]));
  }
};

const Constants& constants() {
  static const Constants c;
  return c;
}

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256() { std::memcpy(state_, constants().initial.data(), sizeof state_); }

void Sha256::compress(const uint8_t* block) {
  const auto& k = constants().k;
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t{block[4 * t]} << 24 | uint32_t{block[4 * t + 1]} << 16 |
           uint32_t{block[4 * t + 2]} << 8 | uint32_t{block[4 * t + 3]};
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                        k[static_cast<size_t>(t)] + w[t];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  while (size > 0) {
    const size_t take = std::min(size, sizeof block_ - block_used_);
    std::memcpy(block_ + block_used_, bytes, take);
    block_used_ += take;
    bytes += take;
    size -= take;
    if (block_used_ == sizeof block_) {
      compress(block_);
      block_used_ = 0;
    }
  }
}

std::string Sha256::hex_digest() {
  const uint64_t bits = total_bytes_ * 8;
  const uint8_t one = 0x80, zero = 0;
  update(&one, 1);
  while (block_used_ != 56) update(&zero, 1);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(length, 8);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint32_t word : state_)
    for (int shift = 28; shift >= 0; shift -= 4) out += kHex[(word >> shift) & 0xf];
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 sha;
  sha.update(data.data(), data.size());
  return sha.hex_digest();
}

Result<std::string> sha256_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(DSCORE_NOT_FOUND, path + ": cannot be read: " + std::strerror(errno));
  Sha256 sha;
  std::vector<char> buffer(1 << 20);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0)
    sha.update(buffer.data(), static_cast<size_t>(in.gcount()));
  if (in.bad()) return Status(DSCORE_DATA_LOSS, path + ": read failed while hashing it");
  return sha.hex_digest();
}

}  // namespace dscore
