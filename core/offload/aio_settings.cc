// aio_settings_from (swapper.h): the config's "aio" section as numbers.
#include "core/offload/swapper.h"

namespace dscore::offload {
namespace {

Status read_int(const json::Value& aio, const char* key, int64_t* out) {
  const json::Value* v = aio.find(key);
  if (v == nullptr || v->is_null() || v->is_auto()) return Status::Ok();
  if (!v->is_integral()) return invalid_argument(std::string("aio.") + key + " must be an integer");
  if (v->as_int() < 1)
    return invalid_argument(std::string("aio.") + key + " must be at least 1, not " +
                            std::to_string(v->as_int()));
  *out = v->as_int();
  return Status::Ok();
}

Status read_bool(const json::Value& aio, const char* key, bool* out) {
  const json::Value* v = aio.find(key);
  if (v == nullptr || v->is_null() || v->is_auto()) return Status::Ok();
  if (!v->is_bool()) return invalid_argument(std::string("aio.") + key + " must be true or false");
  *out = v->as_bool();
  return Status::Ok();
}

}  // namespace

Result<AioSettings> aio_settings_from(const json::Value& aio) {
  AioSettings s;
  if (aio.is_null()) return s;
  if (!aio.is_object()) return invalid_argument("\"aio\" must be an object");
  DSCORE_RETURN_IF_ERROR(read_int(aio, "block_size", &s.block_size));
  DSCORE_RETURN_IF_ERROR(read_int(aio, "queue_depth", &s.queue_depth));
  DSCORE_RETURN_IF_ERROR(read_int(aio, "intra_op_parallelism", &s.intra_op_parallelism));
  if (aio.find("intra_op_parallelism") == nullptr)  // the old name, as the schema allows
    DSCORE_RETURN_IF_ERROR(read_int(aio, "thread_count", &s.intra_op_parallelism));
  DSCORE_RETURN_IF_ERROR(read_bool(aio, "single_submit", &s.single_submit));
  DSCORE_RETURN_IF_ERROR(read_bool(aio, "overlap_events", &s.overlap_events));
  return s;
}

}  // namespace dscore::offload
