// The server side of the TCP key-value store (tcp_kv.h): rank 0 listens on
// MASTER_PORT and one thread serves every rank's connections with poll(),
// holding the keys, the GETs waiting for them and their deadlines. It keeps
// going until its owner destroys it; then the thread is joined and every
// socket closed, so the ranks still connected see the connection close
// (UNAVAILABLE on their side).
//
// A rank whose connection drops without a BYE (killed, crashed) is taken to
// have failed: the GETs waiting at that moment, and every later GET of a key
// not yet published, end with UNAVAILABLE naming that rank, rather than
// waiting for a value it can no longer publish.
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"

namespace dscore::comm::tcp_kv {

class Server {
 public:
  // Listens at `port` (0: a free port the system picks, see port()) for a
  // job of `world_size` ranks. Fails when the port is taken, with a message
  // naming `address` (what the ranks connect to).
  // Listens at `address` when it is a literal IP address (127.0.0.1: this
  // host only), else on every interface (a host name may resolve to a
  // loopback address here, as Debian maps its own name to 127.0.1.1, that
  // the other hosts cannot reach). With a non-empty `token`, a HELLO must
  // carry it: other processes cannot join or write to the job's store.
  static Result<std::unique_ptr<Server>> start(const std::string& address, int port, int world_size,
                                               const std::string& token = "");
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;

 private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace dscore::comm::tcp_kv
