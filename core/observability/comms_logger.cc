#include "core/observability/comms_logger.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/observability/ds_format.h"

namespace dscore::observability {
namespace {

bool one_of(std::string_view op, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), op) != names.end();
}

// Python's size / duration with an int size and a float duration; a zero
// duration gives inf (DeepSpeed would raise ZeroDivisionError).
double per_ms(double size, double duration) {
  if (duration == 0) return size == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return size / duration;
}

constexpr size_t kColumn = 20;

std::string header_row(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += pad_right(n, kColumn);
  return out + "\n";
}

std::string figure(double v) { return pad_right(format_fixed(v, 2), kColumn); }

}  // namespace

std::optional<CommsLoggerConfig> comms_logger_config(const json::Value& written,
                                                     const json::Value& resolved) {
  if (!written.is_object() || written.find("comms_logger") == nullptr) return std::nullopt;
  CommsLoggerConfig c;
  const json::Value* section = resolved.is_object() ? resolved.find("comms_logger") : nullptr;
  if (section == nullptr || !section->is_object()) return c;
  if (const json::Value* v = section->find("prof_all"); v && v->is_bool())
    c.prof_all = v->as_bool();
  if (const json::Value* v = section->find("verbose"); v && v->is_bool()) c.verbose = v->as_bool();
  if (const json::Value* v = section->find("debug"); v && v->is_bool()) c.debug = v->as_bool();
  if (const json::Value* v = section->find("prof_ops"); v && v->is_array())
    for (const json::Value& op : v->items())
      if (op.is_string()) c.prof_ops.push_back(op.as_string());
  return c;
}

Result<Bandwidth> comm_bandwidth(std::string_view op, uint64_t message_bytes, double latency_ms,
                                 int64_t world_size) {
  // The operation order is Python's, so results match DeepSpeed to the bit.
  const double n = static_cast<double>(world_size);
  double size = static_cast<double>(message_bytes);
  double tput = 0, busbw = 0;
  if (op == "all_to_all_single") {
    tput = per_ms(size, latency_ms);
    busbw = per_ms(size, latency_ms) * ((n - 1) / n);
  } else if (one_of(op, {"all_gather", "all_gather_into_tensor", "reduce_scatter",
                         "reduce_scatter_tensor"})) {
    size = static_cast<double>(message_bytes * static_cast<uint64_t>(world_size));
    tput = per_ms(size, latency_ms);
    busbw = per_ms(size, latency_ms) * ((n - 1) / n);
  } else if (one_of(op, {"all_reduce", "all_reduce_coalesced", "inference_all_reduce"})) {
    tput = per_ms(static_cast<double>(message_bytes * 2), latency_ms);
    busbw = per_ms(size, latency_ms) * (2 * (n - 1) / n);
  } else if (one_of(op, {"send", "recv", "isend", "irecv", "broadcast", "reduce", "gather",
                         "scatter", "barrier"})) {
    tput = per_ms(size, latency_ms);
    busbw = tput;
  } else {
    return invalid_argument(
        "comms_logger: no bandwidth formula for collective '" + std::string(op) +
        "' (DeepSpeed: \"wrong comm_op specified\"); profile only the collectives "
        "listed in docs/deepspeed-reference.md#comms-logger");
  }
  // bytes/ms -> Gbit/s, in DeepSpeed's two steps.
  tput *= 8;
  busbw *= 8;
  tput /= 1e6;
  busbw /= 1e6;
  return Bandwidth{tput, busbw};
}

std::string convert_size(uint64_t bytes) {
  if (bytes == 0) return "0B";
  static const char* const kNames[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  // math.log(size, 1024) is log(size) / log(1024) in CPython.
  const double size = static_cast<double>(bytes);
  const auto i = static_cast<int>(std::floor(std::log(size) / std::log(1024.0)));
  const double p = std::pow(1024.0, i);
  return format_repr(python_round(size / p, 2)) + " " + kNames[i];
}

bool CommsLogger::should_profile(std::string_view log_name, bool prof) const {
  return prof || config_.prof_all ||
         std::find(config_.prof_ops.begin(), config_.prof_ops.end(), log_name) !=
             config_.prof_ops.end();
}

std::string CommsLogger::record_name(std::string_view log_name, std::string_view caller) const {
  if (!config_.debug) return std::string(log_name);
  return std::string(log_name) + " | [Caller Func: " + std::string(caller) + "]";
}

Result<std::string> CommsLogger::append(std::string_view op, std::string_view record_name,
                                        double latency_ms, uint64_t message_bytes,
                                        int64_t world_size) {
  DSCORE_ASSIGN_OR_RETURN(Bandwidth bw, comm_bandwidth(op, message_bytes, latency_ms, world_size));
  auto record = std::find_if(records_.begin(), records_.end(),
                             [&](const Record& r) { return r.name == record_name; });
  if (record == records_.end()) {
    records_.push_back(Record{std::string(record_name), {}});
    record = records_.end() - 1;
  }
  auto entry = std::lower_bound(record->sizes.begin(), record->sizes.end(), message_bytes,
                                [](const Entry& e, uint64_t b) { return e.message_bytes < b; });
  if (entry == record->sizes.end() || entry->message_bytes != message_bytes)
    entry = record->sizes.insert(entry, Entry{message_bytes, 0, {}, {}, {}});
  entry->count += 1;
  entry->latencies_ms.push_back(latency_ms);
  entry->algbw_gbps.push_back(bw.algbw_gbps);
  entry->busbw_gbps.push_back(bw.busbw_gbps);
  if (!config_.verbose) return std::string();
  return "comm op: " + std::string(record_name) + " | time (ms): " + format_fixed(latency_ms, 2) +
         " | msg size: " + convert_size(message_bytes) +
         " | algbw (Gbps): " + format_fixed(bw.algbw_gbps, 2) +
         " | busbw (Gbps): " + format_fixed(bw.busbw_gbps, 2);
}

const CommsLogger::Entry* CommsLogger::find(std::string_view record_name,
                                            uint64_t message_bytes) const {
  for (const Record& r : records_)
    if (r.name == record_name)
      for (const Entry& e : r.sizes)
        if (e.message_bytes == message_bytes) return &e;
  return nullptr;
}

std::string CommsLogger::summary() const {
  std::string out = header_row({"Comm. Op", "Message Size", "Count", "Total Latency(ms)",
                                "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)"});
  for (const Record& r : records_) {
    out += r.name + "\n";
    for (const Entry& e : r.sizes) {
      double total = 0;
      for (double l : e.latencies_ms) total += l;
      out += pad_right(" ", kColumn) + pad_right(convert_size(e.message_bytes), kColumn) +
             pad_right(std::to_string(e.count), kColumn) + figure(total) +
             figure(trim_mean(e.latencies_ms, 0.1)) + figure(trim_mean(e.algbw_gbps, 0.1)) +
             figure(trim_mean(e.busbw_gbps, 0.1)) + "\n";
    }
  }
  return out;
}

std::string CommsLogger::straggler_summary(
    const std::function<std::vector<double>(const std::vector<double>&)>& all_reduce_min) const {
  std::string out =
      "_______________________________\nBreakdown with straggler effect\n"
      "-------------------------------\n";
  out += header_row({"Comm. Op", "Message Size", "Count", "Total comm lat(ms)",
                     "Total straggler(ms)", "Avg comm lat(ms)", "Avg straggler(ms)"});
  for (const Record& r : records_) {
    out += r.name + "\n";
    for (const Entry& e : r.sizes) {
      const std::vector<double> min_lats = all_reduce_min(e.latencies_ms);
      std::vector<double> straggler(e.latencies_ms.size());
      double total_lat = 0, total_straggler = 0;
      for (size_t i = 0; i < straggler.size() && i < min_lats.size(); ++i) {
        straggler[i] = e.latencies_ms[i] - min_lats[i];
        total_lat += min_lats[i];
        total_straggler += straggler[i];
      }
      out += pad_right(" ", kColumn) + pad_right(convert_size(e.message_bytes), kColumn) +
             pad_right(std::to_string(e.count), kColumn) + figure(total_lat) +
             figure(total_straggler) + figure(trim_mean(min_lats, 0.1)) +
             figure(trim_mean(straggler, 0.1)) + "\n";
    }
  }
  return out;
}

}  // namespace dscore::observability
