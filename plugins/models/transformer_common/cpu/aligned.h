// Storage for the bf16 GEMM's operands and results, 64-byte aligned. AMX
// loads and stores whole cache lines, and oneDNN's kernel ran at about half
// its speed on operands that straddled them; std::vector's own storage is
// only 16-byte aligned (bench/README.md).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace dscore::transformer::cpu {

constexpr std::size_t kCacheLine = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{kCacheLine}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const {
    return false;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace dscore::transformer::cpu
