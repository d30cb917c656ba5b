// Status and Result<T>: how core code reports errors a caller can act on
// (a bad config key, a plugin that failed to load, an unreadable file). The
// codes are the ABI's dscore_status values, so a plugin's error passes
// through unchanged. Broken invariants throw instead (DSCORE_CHECK).
#pragma once

#include <dscore/plugin.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace dscore {

using StatusCode = dscore_status;

// Canonical name of a code ("INVALID_ARGUMENT"); "UNKNOWN_STATUS(<n>)" for
// values outside the enum (a plugin returning garbage).
std::string status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == DSCORE_OK; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // A copy whose message is "<context>: <message>".
  Status with_context(const std::string& context) const;

  // Every rank of the job holds this same status (comm::agree): a program
  // reports it once, from rank 0.
  bool shared_by_all_ranks() const { return shared_; }
  Status as_shared_by_all_ranks() const {
    Status s = *this;
    s.shared_ = !ok();
    return s;
  }

 private:
  StatusCode code_ = DSCORE_OK;
  std::string message_;
  bool shared_ = false;
};

Status invalid_argument(std::string message);
Status not_found(std::string message);
Status failed_precondition(std::string message);
Status internal_error(std::string message);
Status unimplemented(std::string message);
Status io_error(std::string message);   // DSCORE_UNAVAILABLE: a file or device failed
Status data_loss(std::string message);  // DSCORE_DATA_LOSS: corrupt or truncated data

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {  // NOLINT
    if (std::get<Status>(data_).ok())
      throw std::logic_error("Result constructed from an OK status without a value");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T& operator*() { return checked(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &value(); }

 private:
  T& checked() {
    if (!ok()) throw std::logic_error("Result::value() on an error: " + status().message());
    return std::get<T>(data_);
  }
  std::variant<T, Status> data_;
};

// Broken invariant inside core: a bug, not a user error.
#define DSCORE_CHECK(cond, message)                                                   \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                             ": check failed: " #cond ": " + (message));              \
  } while (0)

#define DSCORE_RETURN_IF_ERROR(expr) \
  do {                               \
    ::dscore::Status _st = (expr);   \
    if (!_st.ok()) return _st;       \
  } while (0)

#define DSCORE_CONCAT_INNER(a, b) a##b
#define DSCORE_CONCAT(a, b) DSCORE_CONCAT_INNER(a, b)
#define DSCORE_ASSIGN_OR_RETURN(lhs, expr)                                                        \
  auto DSCORE_CONCAT(_result_, __LINE__) = (expr);                                                \
  if (!DSCORE_CONCAT(_result_, __LINE__).ok()) return DSCORE_CONCAT(_result_, __LINE__).status(); \
  lhs = std::move(DSCORE_CONCAT(_result_, __LINE__)).value()

}  // namespace dscore
