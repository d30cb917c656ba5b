// DeepSpeed's comms_logger (docs/deepspeed-reference.md#comms-logger;
// deepspeed/utils/comms_logging.py): which collectives are profiled, the
// algbw/busbw of each timed collective, the verbose per-op line and the
// log_summary table. Pure bookkeeping: the comm layer times each op (after
// synchronising, as DeepSpeed does) and hands the latency in; nothing here
// reads a clock or talks to other ranks.
//
// Thread-safety: none; the comm layer records from the thread that issues
// collectives. Same order on all ranks: the straggler table all-reduces one
// latency list per record in record order, so every rank must have issued the
// same profiled collectives.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/config/json.h"

namespace dscore::observability {

// The "comms_logger" section. DeepSpeed switches the logger on by the mere
// presence of the key and never reads `enabled`; so does comms_logger_config.
struct CommsLoggerConfig {
  bool prof_all = true;
  std::vector<std::string> prof_ops;
  bool verbose = false;
  bool debug = false;
};

// The logger's settings when `written` (the config as the user wrote it)
// has a "comms_logger" key, values taken from `resolved` (defaults filled);
// nullopt when the key is absent (logger off).
std::optional<CommsLoggerConfig> comms_logger_config(const json::Value& written,
                                                     const json::Value& resolved);

struct Bandwidth {
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};

// DeepSpeed's calc_bw_log for collective `op` ("all_reduce", "all_gather_into_tensor",
// ...; the function name, not the record name) that moved `message_bytes`
// (S: element size x numel of the input tensor, summed over list arguments;
// 0 for barrier) in `latency_ms`, with `world_size` = the GLOBAL world size n:
//   all_to_all_single                    algbw = S/t     busbw = S/t * (n-1)/n
//   all_gather, all_gather_into_tensor,
//   reduce_scatter, reduce_scatter_tensor  S <- S*n, then as all_to_all_single
//   all_reduce, all_reduce_coalesced,
//   inference_all_reduce                 algbw = 2S/t    busbw = S/t * 2(n-1)/n
//   send, recv, isend, irecv, broadcast,
//   reduce, gather, scatter, barrier     algbw = busbw = S/t
// in bytes/ms, converted to Gbit/s with x8 / 1e6. Any other op is an
// INVALID_ARGUMENT error (DeepSpeed prints "wrong comm_op specified" and
// exits the process). A latency of 0 gives infinite bandwidth (DeepSpeed
// raises ZeroDivisionError).
Result<Bandwidth> comm_bandwidth(std::string_view op, uint64_t message_bytes, double latency_ms,
                                 int64_t world_size);

// DeepSpeed's convert_size: "0B", "512.0 B", "1.5 KB", "4.0 MB" (powers of
// 1024, rounded to 2 decimals, printed as Python prints a float).
std::string convert_size(uint64_t bytes);

class CommsLogger {
 public:
  explicit CommsLogger(CommsLoggerConfig config) : config_(std::move(config)) {}

  const CommsLoggerConfig& config() const { return config_; }

  // Whether a collective called with `log_name` (default: the op's name)
  // and `prof` (the per-call prof=True argument) is timed and recorded:
  // prof, or prof_all, or log_name listed in prof_ops.
  bool should_profile(std::string_view log_name, bool prof = false) const;

  // The record name: log_name, or "<log_name> | [Caller Func: <caller>]"
  // with `debug`.
  std::string record_name(std::string_view log_name, std::string_view caller) const;

  // Record one timed collective. Records are keyed by (record_name,
  // message_bytes); `op` picks the bandwidth formula. Returns the verbose
  // line when `verbose` is set, else "":
  //   comm op: <record> | time (ms): 1.23 | msg size: 4.0 MB | algbw (Gbps): 6.82 | busbw
  //   (Gbps): 3.41
  // (DeepSpeed's log_dist prints it on rank 0 with a "[Rank 0] " prefix.)
  Result<std::string> append(std::string_view op, std::string_view record_name, double latency_ms,
                             uint64_t message_bytes, int64_t world_size);

  // log_summary's table: a header row, then per record name (in first-seen
  // order) its name on a line of its own and one row per message size
  // (ascending): size, count, total latency, and 10% trimmed means of
  // latency, algbw and busbw; columns 20 wide, figures with 2 decimals.
  std::string summary() const;

  // log_summary(show_straggler=True)'s second table. `all_reduce_min`
  // returns the element-wise minimum of a latency list across ranks (an
  // all-reduce with MIN); it is called once per (record, size) in summary
  // order. (DeepSpeed holds these lists in float32 torch tensors; dscore
  // keeps doubles, so the last printed digit can differ.)
  std::string straggler_summary(
      const std::function<std::vector<double>(const std::vector<double>&)>& all_reduce_min) const;

  struct Entry {
    uint64_t message_bytes = 0;
    int64_t count = 0;
    std::vector<double> latencies_ms, algbw_gbps, busbw_gbps;
  };
  struct Record {
    std::string name;
    std::vector<Entry> sizes;  // kept sorted by message_bytes
  };
  const std::vector<Record>& records() const { return records_; }
  const Entry* find(std::string_view record_name, uint64_t message_bytes) const;

 private:
  CommsLoggerConfig config_;
  std::vector<Record> records_;  // in first-seen order, as Python's dict
};

}  // namespace dscore::observability
