#include "tests/fuzz/reader_targets.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/torch_file.h"
#include "core/data/token_file.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "hf_config.h"
#include "hf_folder.h"

namespace dscore::fuzz {
namespace {

namespace fs = std::filesystem;

// One folder per process, emptied before each input.
const fs::path& scratch() {
  static const fs::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/dscore_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    return fs::path(pattern);
  }();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) fs::remove_all(e.path(), ec);
  return dir;
}

std::string write(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

// An error must say something, on one line, and name the file.
std::string check_error(const std::string& message, const std::string& file) {
  if (message.empty()) return "an empty error message";
  if (message.find('\n') != std::string::npos) return "a message of several lines: " + message;
  if (message.find(fs::path(file).filename().string()) == std::string::npos)
    return "a message that does not name " + file + ": " + message;
  return "";
}

}  // namespace

std::string safetensors_header(std::string_view bytes) {
  const std::string path = write(scratch() / "model.safetensors", bytes);
  auto reader = checkpoint::SafetensorsReader::open(path);
  if (!reader.ok()) return check_error(reader.status().message(), path);
  for (const checkpoint::TensorInfo& t : reader->tensors()) {
    if (t.offset > reader->file_size() || t.bytes > reader->file_size() - t.offset)
      return "tensor " + t.name + " reaches past the end of the file";
    std::vector<char> data(t.bytes);
    const Status read = reader->read(t, 0, t.bytes, data.data());
    if (!read.ok()) return "tensor " + t.name + " was accepted, then not read: " + read.message();
  }
  return "";
}

std::string hf_folder(std::string_view bytes) {
  const fs::path dir = scratch();
  const size_t nul = bytes.find('\0');
  write(dir / "config.json", bytes.substr(0, nul));
  if (nul != std::string_view::npos)
    write(dir / "model.safetensors.index.json", bytes.substr(nul + 1));
  else
    write(dir / "model.safetensors",
          std::string("\x08\0\0\0\0\0\0\0{}      ", 16));  // an empty, valid weights file
  try {
    auto folder = hf::HfFolder::open(dir.string());
    const hf::HfConfig& config = folder->config();
    // The typed lookups the model plugins make; a wrong type is an error.
    for (const char* key : {"vocab_size", "hidden_size", "n_layer", "num_hidden_layers"}) {
      try {
        (void)config.integer(key, 0);
      } catch (const std::exception& e) {
        if (std::string(e.what()).empty()) return "an empty error for key " + std::string(key);
      }
    }
    try {
      (void)config.number("rope_theta", 1.0);
      (void)config.string("model_type", "");
      (void)config.boolean("tie_word_embeddings", false);
      (void)config.json("rope_scaling");
    } catch (const std::exception& e) {
      if (std::string(e.what()).empty()) return "an empty error for a typed lookup";
    }
    for (const std::string& file : folder->files()) {
      if (!fs::exists(file)) return "a weights file that does not exist was opened: " + file;
      if (fs::weakly_canonical(file).parent_path() != fs::weakly_canonical(dir))
        return "a weights file outside the folder was opened: " + file;
    }
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (message.empty()) return "an empty error message";
  }
  return "";
}

std::string tokenizer_json(std::string_view bytes) {
  const std::string path = write(scratch() / "tokenizer.json", bytes);
  auto tokenizer = tokenizer::load_hf_tokenizer(path, {});
  if (!tokenizer.ok()) return check_error(tokenizer.status().message(), path);
  for (const char* text : {"hello world", "aa\n34 \xc3\xa9", ""}) {
    auto ids = (*tokenizer)->encode(text, true);
    if (!ids.ok()) continue;  // text the vocabulary cannot encode
    for (int32_t id : *ids)
      if (id < 0 || id >= (*tokenizer)->vocab_size())
        return "an id outside the vocabulary: " + std::to_string(id);
    auto decoded = (*tokenizer)->decode(*ids, false);
    if (!decoded.ok()) return "ids it made do not decode: " + decoded.status().message();
  }
  return "";
}

std::string llmc_shard(std::string_view bytes) {
  const std::string path = write(scratch() / "shard.bin", bytes);
  auto file = data::TokenFile::open(path, data::TokenFormat::kLlmcShard);
  if (!file.ok()) return check_error(file.status().message(), path);
  const int64_t n = std::min<int64_t>(file->token_count(), 64);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  const Status copied = file->copy(0, n, tokens.data());
  if (!copied.ok()) return "tokens accepted, then not read: " + copied.message();
  const Status vocab = file->check_vocab(50257);
  if (!vocab.ok()) return check_error(vocab.message(), path);
  return "";
}

// Every tensor the pickle names (any depth) is read, or refused by name.
std::string read_tensors(const checkpoint::TorchFile& file, const checkpoint::PickleValue& v,
                         int depth) {
  using K = checkpoint::PickleValue::Kind;
  if (depth > 64) return "";
  if (v.is(K::kTensor) && v.tensor.numel() <= (1 << 20)) {
    auto values = file.read_f32(v.tensor);
    if (!values.ok()) return check_error(values.status().message(), file.path());
  }
  for (const checkpoint::PickleRef& item : v.items)
    if (std::string p = read_tensors(file, *item, depth + 1); !p.empty()) return p;
  for (const auto& [key, value] : v.dict)
    if (std::string p = read_tensors(file, *value, depth + 1); !p.empty()) return p;
  return "";
}

std::string torch_file(std::string_view bytes) {
  const std::string path = write(scratch() / "model_states.pt", bytes);
  auto file = checkpoint::TorchFile::open(path);
  if (!file.ok()) return check_error(file.status().message(), path);
  return read_tensors(*file, file->root(), 0);
}

}  // namespace dscore::fuzz
