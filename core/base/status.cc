#include "core/base/status.h"

namespace dscore {

std::string status_code_name(StatusCode code) {
  switch (code) {
    case DSCORE_OK:
      return "OK";
    case DSCORE_CANCELLED:
      return "CANCELLED";
    case DSCORE_UNKNOWN:
      return "UNKNOWN";
    case DSCORE_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case DSCORE_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case DSCORE_NOT_FOUND:
      return "NOT_FOUND";
    case DSCORE_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case DSCORE_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case DSCORE_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case DSCORE_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case DSCORE_ABORTED:
      return "ABORTED";
    case DSCORE_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case DSCORE_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case DSCORE_INTERNAL:
      return "INTERNAL";
    case DSCORE_UNAVAILABLE:
      return "UNAVAILABLE";
    case DSCORE_DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "UNKNOWN_STATUS(" + std::to_string(code) + ")";
  }
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_ = context + ": " + message_;
  return s;
}

Status invalid_argument(std::string message) {
  return {DSCORE_INVALID_ARGUMENT, std::move(message)};
}
Status not_found(std::string message) { return {DSCORE_NOT_FOUND, std::move(message)}; }
Status failed_precondition(std::string message) {
  return {DSCORE_FAILED_PRECONDITION, std::move(message)};
}
Status internal_error(std::string message) { return {DSCORE_INTERNAL, std::move(message)}; }
Status unimplemented(std::string message) { return {DSCORE_UNIMPLEMENTED, std::move(message)}; }
Status io_error(std::string message) { return {DSCORE_UNAVAILABLE, std::move(message)}; }
Status data_loss(std::string message) { return {DSCORE_DATA_LOSS, std::move(message)}; }

}  // namespace dscore
