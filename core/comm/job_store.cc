// The job's key-value store across processes, opened on first use
// (job_store.h).
#include "core/comm/job_store.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/base/logging.h"
#include "core/comm/tcp_kv.h"

namespace dscore::comm {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// How this job's launcher passes MASTER_ADDR and MASTER_PORT to its ranks.
std::string how_to_set(const std::string& launcher) {
  if (launcher == "srun")
    return "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) "
           "MASTER_PORT=29500 before srun (srun passes the environment on)";
  if (launcher == "pmi") return "mpiexec -genv MASTER_ADDR <rank 0's host> -genv MASTER_PORT 29500";
  return "mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500";
}

Result<int> port_from(const char* name, const std::string& text) {
  char* end = nullptr;
  const long port = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || port < 1 || port > 65535)
    return invalid_argument(std::string(name) + "=\"" + text +
                            "\" is not a TCP port (1-65535): the job's key-value store listens "
                            "there on rank 0");
  return static_cast<int>(port);
}

// Where rank 0 serves the store, from the environment.
Result<TcpKvOptions> options_from_env(const JobEnv& job, int64_t timeout_ms) {
  const std::string addr = env_or_empty("MASTER_ADDR"), port = env_or_empty("MASTER_PORT");
  if (addr.empty() || port.empty()) {
    std::string unset = addr.empty() && port.empty() ? "MASTER_ADDR and MASTER_PORT are"
                        : addr.empty()               ? "MASTER_ADDR is"
                                                     : "MASTER_PORT is";
    return failed_precondition(
        "this job's " + std::to_string(job.world_size) + " ranks are separate processes (" +
        job.launcher +
        "), and a plugin needs the job's key-value store (the nccl backend passes its unique id "
        "through it), which rank 0 serves at MASTER_ADDR:MASTER_PORT; " +
        unset + " not set. Give every rank both, e.g. " + how_to_set(job.launcher) +
        " (`dscore run -n N` and torchrun set them themselves)");
  }
  TcpKvOptions options;
  options.host = addr;
  options.rank = job.rank;
  options.world_size = job.world_size;
  options.connect_timeout_ms = timeout_ms;
  options.token = env_or_empty("DSCORE_JOB_TOKEN");
  const std::string kv_port = env_or_empty("DSCORE_KV_PORT");
  if (!kv_port.empty()) {
    DSCORE_ASSIGN_OR_RETURN(options.port, port_from("DSCORE_KV_PORT", kv_port));
  } else {
    DSCORE_ASSIGN_OR_RETURN(options.port, port_from("MASTER_PORT", port));
    // torchrun's agent holds torch's TCPStore on MASTER_PORT.
    if (env_or_empty("TORCHELASTIC_USE_AGENT_STORE") == "True") {
      if (options.port == 65535)
        return invalid_argument(
            "MASTER_PORT=65535 under torchrun leaves no port for dscore's "
            "key-value store (MASTER_PORT + 1): set DSCORE_KV_PORT");
      options.port += 1;
    }
  }
  return options;
}

// Opens the TCP store on the first call; a failure to open is kept and
// returned by every later call.
class JobKv : public plugin_host::KvBackend {
 public:
  explicit JobKv(Result<TcpKvOptions> options) : options_(std::move(options)) {}

  Status set(const std::string& key, std::string value) override {
    DSCORE_ASSIGN_OR_RETURN(plugin_host::KvBackend * store, open());
    return store->set(key, std::move(value));
  }
  Result<std::string> get(const std::string& key, int64_t timeout_ms) override {
    DSCORE_ASSIGN_OR_RETURN(plugin_host::KvBackend * store, open());
    return store->get(key, timeout_ms);
  }

 private:
  Result<plugin_host::KvBackend*> open() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!store_ && error_.ok()) {
      if (!options_.ok()) {
        error_ = options_.status();
      } else {
        Result<std::shared_ptr<TcpKv>> store = TcpKv::create(*options_);
        if (store.ok())
          store_ = std::move(*store);
        else
          error_ = store.status();
      }
    }
    if (store_) return store_.get();
    return error_;
  }

  const Result<TcpKvOptions> options_;
  std::mutex mutex_;
  std::shared_ptr<TcpKv> store_;
  Status error_;
};

}  // namespace

std::shared_ptr<plugin_host::KvBackend> make_job_kv(const JobEnv& job, int64_t timeout_ms) {
  if (job.world_size <= 1) return nullptr;
  Result<TcpKvOptions> options = options_from_env(job, timeout_ms);
  // Two engines of one rank alive at once would otherwise both serve (rank
  // 0) on one port.
  static std::mutex mutex;
  static std::map<std::tuple<std::string, int, int, int>, std::weak_ptr<JobKv>> live;
  std::lock_guard<std::mutex> lock(mutex);
  if (!options.ok()) return std::make_shared<JobKv>(std::move(options));
  log_debug("job key-value store: " + tcp_kv::address_text(options->host, options->port) +
            " (rank 0 serves it; it opens on a plugin's first kv_set/kv_get)");
  const auto key = std::make_tuple(options->host, options->port, job.rank, job.world_size);
  if (auto shared = live[key].lock()) return shared;
  auto store = std::make_shared<JobKv>(std::move(options));
  live[key] = store;
  return store;
}

}  // namespace dscore::comm
