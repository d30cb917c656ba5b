#include "core/checkpoint/format.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cstring>

#include "core/checkpoint/checksum.h"
#include "core/tensor/dtype_ops.h"

namespace dscore::checkpoint {
namespace {

constexpr const char* kStateKey = "dscore";
constexpr const char* kStateChecksumKey = "dscore.state_checksum";
constexpr int64_t kBounceBytes = 8 << 20;

std::string two_digits(int v) { return (v < 10 ? "0" : "") + std::to_string(v); }

bool is_float(dscore_dtype d) {
  return d == DSCORE_DTYPE_F32 || d == DSCORE_DTYPE_F16 || d == DSCORE_DTYPE_BF16;
}

}  // namespace

std::string model_states_name(int zero_stage, int rank, int mp_rank) {
  const std::string mp = "mp_rank_" + two_digits(mp_rank) + "_model_states.safetensors";
  if (zero_stage < 3) return mp;
  return "zero_pp_rank_" + std::to_string(rank) + "_" + mp;
}

std::string pipe_model_states_name(int pipe_stage, int mp_rank, int mp_size) {
  const std::string mp = mp_size > 1 ? "_mp_rank_" + two_digits(mp_rank) : "";
  return "pipe_stage_" + two_digits(pipe_stage) + mp + "_model_states.safetensors";
}

std::string expert_model_states_name(int expert_rank) {
  return "expp_rank_" + std::to_string(expert_rank) + "_mp_rank_00_model_states.safetensors";
}

std::string optim_states_name(bool bf16, int rank, int mp_rank) {
  return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_" +
         two_digits(mp_rank) + "_optim_states.safetensors";
}

std::string default_tag(int64_t global_steps) {
  return "global_step" + std::to_string(global_steps);
}

Status check_tag(const std::string& tag) {
  if (tag.empty() || tag == "." || tag == ".." || tag.size() > 200 ||
      tag.find('/') != std::string::npos || tag.find('\0') != std::string::npos ||
      tag.front() == '.' || tag == kLatestName || tag.find(".partial") != std::string::npos)
    return invalid_argument(
        "checkpoint tag \"" + tag +
        "\" cannot name a folder: use letters, digits, "
        "'_', '-' or '.', not starting with '.', without '/', at most 200 characters "
        "(and not \"latest\" or containing \".partial\")");
  return Status::Ok();
}

Status convert_values(const void* src, dscore_dtype from, void* dst, dscore_dtype to,
                      int64_t count) {
  if (from != to && (!is_float(from) || !is_float(to)))
    return invalid_argument(std::string("cannot convert ") + sdk::dtype_name(from) + " values to " +
                            sdk::dtype_name(to));
  tensor::convert(src, from, dst, to, count);
  return Status::Ok();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------- headers

std::map<std::string, std::string> header_metadata(const FileHeader& h) {
  json::Value v = json::Value::object();
  v.set("format", json::Value("dscore-checkpoint"));
  v.set("format_version", json::Value(kFormatVersion));
  v.set("kind", json::Value(h.kind));
  v.set("tag", json::Value(h.tag));
  v.set("checkpoint_id", json::Value(h.checkpoint_id));
  v.set("rank", json::Value(h.rank));
  v.set("world_size", json::Value(h.world_size));
  v.set("zero_stage", json::Value(h.zero_stage));
  json::Value fragments = json::Value::array();
  for (const Fragment& f : h.fragments) {
    json::Value e = json::Value::object();
    e.set("tensor", json::Value(f.tensor));
    e.set("param", json::Value(f.param));
    e.set("slot", json::Value(f.slot));
    e.set("begin", json::Value(f.begin));
    e.set("numel", json::Value(f.numel));
    if (f.split.split()) {
      json::Value split = json::Value::object();
      split.set("dim", json::Value(static_cast<int64_t>(f.split.dim)));
      split.set("blocks", json::Value(static_cast<int64_t>(f.split.blocks)));
      split.set("full_extent", json::Value(f.split.full_extent));
      split.set("offset", json::Value(f.split.offset));
      json::Value shape = json::Value::array();
      for (int64_t d : f.part_shape) shape.push_back(json::Value(d));
      split.set("part_shape", std::move(shape));
      e.set("tensor_parallel_part", std::move(split));
    }
    fragments.push_back(std::move(e));
  }
  v.set("fragments", std::move(fragments));
  if (!h.state.is_null()) v.set("state", h.state);
  std::string text = json::serialize(v);
  const std::string sum = format_checksum(checksum(text.data(), text.size()));
  return {{"format", "dscore"}, {kStateKey, std::move(text)}, {kStateChecksumKey, sum}};
}

namespace {

// A fragment's tensor-parallel part: a split that lies inside a shape of
// part_shape (whole blocks, the offset inside the whole tensor's block).
bool parse_part(const json::Value& v, Fragment* f) {
  const json::Value *dim = v.find("dim"), *blocks = v.find("blocks"), *full = v.find("full_extent"),
                    *offset = v.find("offset"), *shape = v.find("part_shape");
  if (dim == nullptr || blocks == nullptr || full == nullptr || offset == nullptr ||
      shape == nullptr || !dim->is_integral() || !blocks->is_integral() || !full->is_integral() ||
      !offset->is_integral() || !shape->is_array())
    return false;
  int64_t numel = 1;
  for (const json::Value& d : shape->items()) {
    if (!d.is_integral() || d.as_int() < 0) return false;
    f->part_shape.push_back(d.as_int());
    numel *= d.as_int();
  }
  f->split = {static_cast<int32_t>(dim->as_int()), static_cast<int32_t>(blocks->as_int()),
              full->as_int(), offset->as_int()};
  const sdk::TensorSplit& s = f->split;
  if (s.dim < 0 || s.dim >= static_cast<int32_t>(f->part_shape.size()) || s.blocks < 1 ||
      s.full_extent % s.blocks != 0 || s.offset < 0)
    return false;
  const int64_t part = f->part_shape[static_cast<size_t>(s.dim)];
  return part % s.blocks == 0 && s.offset + part / s.blocks <= s.full_extent / s.blocks &&
         f->begin + f->numel <= numel;
}

}  // namespace

Result<FileHeader> parse_header(const SafetensorsReader& file) {
  const auto& meta = file.metadata();
  auto text = meta.find(kStateKey);
  auto sum = meta.find(kStateChecksumKey);
  if (text == meta.end() || sum == meta.end())
    return data_loss(file.path() +
                     " has no dscore checkpoint metadata: it was not written by dscore's "
                     "save_checkpoint (a consolidated model.safetensors is not a checkpoint)");
  const auto stored = parse_checksum(sum->second);
  const uint64_t computed = checksum(text->second.data(), text->second.size());
  if (!stored || *stored != computed)
    return data_loss(file.path() + ": the checkpoint metadata fails its checksum (stored " +
                     sum->second + ", computed " + format_checksum(computed) +
                     "): the file is corrupt");
  DSCORE_ASSIGN_OR_RETURN(json::Value v, json::parse(text->second, file.path()));
  auto bad = [&](const std::string& what) {
    return data_loss(file.path() + ": checkpoint metadata: " + what);
  };
  auto str = [&](const char* key, std::string* out) -> bool {
    const json::Value* f = v.find(key);
    if (f == nullptr || !f->is_string()) return false;
    *out = f->as_string();
    return true;
  };
  auto integer = [&](const char* key, int* out) -> bool {
    const json::Value* f = v.find(key);
    if (f == nullptr || !f->is_integral()) return false;
    *out = static_cast<int>(f->as_int());
    return true;
  };
  int version = 0;
  if (!integer("format_version", &version)) return bad("no format_version");
  if (version > kFormatVersion)
    return failed_precondition(file.path() + " has checkpoint format version " +
                               std::to_string(version) + " but this dscore reads up to " +
                               std::to_string(kFormatVersion) + ": load it with a newer dscore");
  FileHeader h;
  if (!str("kind", &h.kind) || !str("tag", &h.tag) || !str("checkpoint_id", &h.checkpoint_id) ||
      !integer("rank", &h.rank) || !integer("world_size", &h.world_size) ||
      !integer("zero_stage", &h.zero_stage))
    return bad("kind, tag, checkpoint_id, rank, world_size or zero_stage is missing");
  const json::Value* fragments = v.find("fragments");
  if (fragments == nullptr || !fragments->is_array()) return bad("no fragments list");
  for (const json::Value& e : fragments->items()) {
    const json::Value *t = e.find("tensor"), *p = e.find("param"), *s = e.find("slot"),
                      *b = e.find("begin"), *n = e.find("numel");
    if (t == nullptr || p == nullptr || s == nullptr || b == nullptr || n == nullptr ||
        !t->is_string() || !p->is_string() || !s->is_string() || !b->is_integral() ||
        !n->is_integral() || b->as_int() < 0 || n->as_int() < 0)
      return bad("a fragment entry is malformed");
    const TensorInfo* tensor = file.find(t->as_string());
    if (tensor == nullptr) return bad("fragment tensor " + t->as_string() + " is not in the file");
    Fragment fragment{t->as_string(), p->as_string(), s->as_string(), b->as_int(), n->as_int()};
    if (const json::Value* part = e.find("tensor_parallel_part")) {
      if (!parse_part(*part, &fragment))
        return bad("fragment " + fragment.tensor + " has a malformed tensor_parallel_part");
    }
    h.fragments.push_back(std::move(fragment));
  }
  if (const json::Value* state = v.find("state")) h.state = *state;
  return h;
}

// ---------------------------------------------------------------- fragments

Result<FragmentSet> FragmentSet::open(const std::string& folder,
                                      const std::vector<std::string>& names) {
  FragmentSet set;
  for (const std::string& name : names) {
    auto file = SafetensorsReader::open(folder + "/" + name);
    if (!file.ok()) return file.status();
    set.files_.push_back(std::move(file).value());
  }
  for (const SafetensorsReader& file : set.files_) {
    DSCORE_ASSIGN_OR_RETURN(FileHeader h, parse_header(file));
    if (!set.headers_.empty() && h.checkpoint_id != set.headers_[0].checkpoint_id)
      return data_loss(file.path() + " comes from a different save than " + set.files_[0].path() +
                       " (checkpoint ids " + h.checkpoint_id + " and " +
                       set.headers_[0].checkpoint_id +
                       "): the folder mixes files of two saves; restore the folder from one save");
    set.headers_.push_back(std::move(h));
  }
  for (size_t f = 0; f < set.files_.size(); ++f) {
    for (const Fragment& fr : set.headers_[f].fragments) {
      Piece piece;
      piece.file = f;
      piece.tensor = set.files_[f].find(fr.tensor);
      piece.fragment_numel = fr.numel;
      piece.verified = std::make_shared<bool>(false);
      std::vector<Piece>& pieces = set.pieces_[{fr.slot, fr.param}];
      if (!fr.split.split()) {
        piece.begin = fr.begin;
        piece.numel = fr.numel;
        pieces.push_back(piece);
        continue;
      }
      // A tensor-parallel part's run: one piece per run it makes in the
      // whole parameter.
      dscore_model_param part{};
      part.struct_size = sizeof part;
      part.ndim = static_cast<int32_t>(fr.part_shape.size());
      part.shape = fr.part_shape.data();
      fr.split.declare(&part);
      sdk::for_each_whole_run(part, fr.begin, fr.numel,
                              [&](int64_t local, int64_t whole, int64_t n) {
                                piece.begin = whole;
                                piece.numel = n;
                                piece.offset = local - fr.begin;
                                pieces.push_back(piece);
                              });
    }
  }
  for (auto& [key, pieces] : set.pieces_)
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  return set;
}

bool FragmentSet::has_slot(const std::string& slot) const {
  for (const auto& [key, pieces] : pieces_)
    if (key.first == slot) return true;
  return false;
}

dscore_dtype FragmentSet::dtype_of(const std::string& slot, const std::string& param) const {
  auto it = pieces_.find({slot, param});
  if (it == pieces_.end() || it->second.empty()) return DSCORE_DTYPE_INVALID;
  return it->second.front().tensor->dtype;
}

Status FragmentSet::check_complete(const std::string& slot,
                                   const std::vector<SavedParam>& params) const {
  auto where = [&]() {
    std::string files;
    for (const SafetensorsReader& f : files_) files += (files.empty() ? "" : ", ") + f.path();
    return " (files read: " + files + "; a rank's file is missing or was replaced)";
  };
  for (const SavedParam& p : params) {
    auto it = pieces_.find({slot, p.name});
    int64_t next = 0;
    if (it != pieces_.end()) {
      for (const Piece& piece : it->second) {
        if (piece.begin != next)
          return data_loss("checkpoint is missing or repeats elements [" +
                           std::to_string(std::min(next, piece.begin)) + ", " +
                           std::to_string(std::max(next, piece.begin)) + ") of " + slot +
                           " of parameter " + p.name + where());
        next = piece.begin + piece.numel;
      }
    }
    if (next != p.numel)
      return data_loss("checkpoint has elements [0, " + std::to_string(next) + ") of " + slot +
                       " of parameter " + p.name + " but the parameter has " +
                       std::to_string(p.numel) + where());
  }
  return Status::Ok();
}

Status FragmentSet::read(const std::string& slot, const std::string& param, int64_t begin,
                         int64_t count, uint32_t epp, dscore_dtype dst_dtype, void* dst) {
  auto it = pieces_.find({slot, param});
  if (it == pieces_.end())
    return not_found("the checkpoint has no " + slot + " for parameter " + param);
  char* out = static_cast<char*>(dst);
  const size_t es = sdk::dtype_size(dst_dtype);
  const int64_t end = begin + count;
  int64_t covered = 0;
  for (Piece& piece : it->second) {
    const int64_t a = std::max(begin, piece.begin), b = std::min(end, piece.begin + piece.numel);
    if (a >= b) continue;
    DSCORE_RETURN_IF_ERROR(read_piece(piece, a - piece.begin, b - a, epp, dst_dtype,
                                      out + static_cast<size_t>((a - begin) * epp) * es));
    covered += b - a;
  }
  if (covered != count)
    return not_found("elements [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                     slot + " of parameter " + param + " are not all in the files read");
  return Status::Ok();
}

Status FragmentSet::read_piece(Piece& piece, int64_t from, int64_t count, uint32_t epp,
                               dscore_dtype dst_dtype, char* dst) {
  const SafetensorsReader& file = files_[piece.file];
  const TensorInfo& t = *piece.tensor;
  if (t.numel() != piece.fragment_numel * epp)
    return data_loss(file.path() + ": tensor " + t.name + " has " + std::to_string(t.numel()) +
                     " values but its "
                     "fragment needs " +
                     std::to_string(piece.fragment_numel * epp));
  const size_t src_size = sdk::dtype_size(t.dtype);
  const int64_t values_from = (piece.offset + from) * epp, values = count * epp;
  bool& verified = *piece.verified;
  // Whole tensor, same dtype: straight into place, checked on the way.
  if (!verified && values_from == 0 && values == t.numel() && t.dtype == dst_dtype) {
    DSCORE_RETURN_IF_ERROR(file.read_verified(t, dst));
    verified = true;
    return Status::Ok();
  }
  // Otherwise stream the tensor through a bounce buffer: the whole of it the
  // first time (to check it), only the needed part later.
  const int64_t chunk = std::max<int64_t>(1, kBounceBytes / static_cast<int64_t>(src_size));
  std::vector<char> bounce(static_cast<size_t>(std::min<int64_t>(chunk, t.numel())) * src_size);
  const int64_t scan_begin = verified ? values_from : 0;
  const int64_t scan_end = verified ? values_from + values : t.numel();
  ChecksumStream hash;
  for (int64_t v = scan_begin; v < scan_end; v += chunk) {
    const int64_t n = std::min(chunk, scan_end - v);
    DSCORE_RETURN_IF_ERROR(file.read(t, static_cast<uint64_t>(v) * src_size,
                                     static_cast<uint64_t>(n) * src_size, bounce.data()));
    if (!verified) hash.update(bounce.data(), static_cast<size_t>(n) * src_size);
    const int64_t a = std::max(v, values_from), b = std::min(v + n, values_from + values);
    if (a < b)
      DSCORE_RETURN_IF_ERROR(
          convert_values(bounce.data() + static_cast<size_t>(a - v) * src_size, t.dtype,
                         dst + static_cast<size_t>(a - values_from) * sdk::dtype_size(dst_dtype),
                         dst_dtype, b - a));
  }
  if (!verified) {
    DSCORE_RETURN_IF_ERROR(file.check(t, hash.digest()));
    verified = true;
  }
  return Status::Ok();
}

}  // namespace dscore::checkpoint
