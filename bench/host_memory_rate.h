// The host's memory rate, measured in the running process: a parallel
// memcpy of 1 GiB over every core TBB may use, best of 5, in bytes read and
// written per second. The limit host-side optimizer phases (ZeRO-Offload's
// update through host memory) are read against; benches link
// dscore_host_memory_rate.
#pragma once

namespace dscore::bench {

double measure_host_memory_rate();

}  // namespace dscore::bench
