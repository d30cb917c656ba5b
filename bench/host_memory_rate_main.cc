// host_memory_rate: the host's memory rate (host_memory_rate.h), for the
// scripted benches; the last line is machine-readable: "host_memory_gbps <value>"
// (GB/s read and written).
#include <cstdio>

#include "host_memory_rate.h"

int main() {
  const double rate = dscore::bench::measure_host_memory_rate();
  std::printf("limit measured now: host memory %.1f GB/s (parallel memcpy of 1 GiB, best of 5)\n",
              rate / 1e9);
  std::printf("host_memory_gbps %.2f\n", rate / 1e9);
  return 0;
}
