// The job's key-value store across processes, over TCP (in the manner of
// torch's TCPStore): rank 0 serves it at MASTER_ADDR:MASTER_PORT
// (tcp_kv_server.h) and every rank, rank 0 included, is a client. Comm
// backends bootstrap through it (the nccl plugin passes its unique id with
// host->kv_set / kv_get). Values are arbitrary bytes.
//
// Thread-safe: concurrent calls use separate connections, so a thread
// blocked in get() never holds up another thread's set().
// Failures: get() past its deadline is DEADLINE_EXCEEDED naming the key, the
// store's address and which ranks have connected; a server that went away
// (rank 0 exited or failed) or a rank that dropped its connection is
// UNAVAILABLE at once, never a hang.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/comm/tcp_kv_server.h"
#include "core/comm/tcp_kv_wire.h"
#include "core/plugin_host/host_context.h"

namespace dscore::comm {

struct TcpKvOptions {
  std::string host;  // MASTER_ADDR: rank 0's host, as the other ranks reach it
  int port = 0;      // MASTER_PORT; 0 on rank 0: a free port (port() says which)
  int rank = 0;
  int world_size = 1;
  // How long a rank keeps trying to reach rank 0's server (rank 0 may start
  // later than the others), and the bound on every reply but a GET's.
  int64_t connect_timeout_ms = 300000;
  // The job's secret (DSCORE_JOB_TOKEN, made by the launcher): the server
  // admits only connections that present it. "" = none.
  std::string token;
};

class TcpKv : public plugin_host::KvBackend {
 public:
  // Rank 0 starts the server, then every rank connects (retrying until
  // connect_timeout_ms). Fails with a message naming MASTER_ADDR:MASTER_PORT
  // and the fix when the port is taken or nothing answers there.
  static Result<std::shared_ptr<TcpKv>> create(const TcpKvOptions& options);
  ~TcpKv() override;  // rank 0: stops the server, after closing its own connections

  Status set(const std::string& key, std::string value) override;
  Result<std::string> get(const std::string& key, int64_t timeout_ms) override;

  int port() const { return options_.port; }
  std::string address() const { return tcp_kv::address_text(options_.host, options_.port); }

 private:
  explicit TcpKv(TcpKvOptions options) : options_(std::move(options)) {}
  // An idle connection, or a new one; give it back after a complete exchange.
  Result<tcp_kv::Fd> take_connection();
  void give_back(tcp_kv::Fd fd);
  // Sends `request` and returns the reply (status byte, bytes) read before
  // `deadline`. A connection that fails is closed, not given back.
  Result<std::pair<dscore_status, std::string>> exchange(const std::string& request,
                                                         tcp_kv::Clock::time_point deadline,
                                                         const std::string& what);
  Result<tcp_kv::Fd> connect(tcp_kv::Clock::time_point deadline, bool retry_refused);
  Status lost(const Status& io, const std::string& what) const;

  TcpKvOptions options_;
  std::unique_ptr<tcp_kv::Server> server_;  // rank 0
  std::mutex mutex_;
  std::vector<tcp_kv::Fd> idle_;
};

// A TCP port on this host that nothing listens on right now (bound on
// 127.0.0.1 and released): what `dscore run -n` gives MASTER_PORT. Taken
// below the kernel's ephemeral range where there is room, so a program
// binding port 0 meanwhile (mpirun's listeners) cannot take it.
Result<int> pick_free_port();

}  // namespace dscore::comm
