// The readers of files a user hands dscore, as fuzz targets (issue 54,
// item 6): a safetensors header (checkpoints, Hugging Face weights), a
// Hugging Face folder's config.json and model.safetensors.index.json, a
// tokenizer.json, an llm.c token shard, and a torch.save file (a DeepSpeed
// checkpoint's .pt: zip archive and pickle). Each function writes `bytes` as
// the file(s) its reader opens, in a scratch folder of this process, and
// runs the reader over them. The reader must return, never crash or hang:
// either a value that holds together (a tensor inside its file, tokens that
// decode) or an error naming the file. The function returns "" when that
// held, else what went wrong. reader_fuzzer.cc runs them under libFuzzer,
// reader_fuzz_corpus_test.cc over seeds and deterministic mutants.
#pragma once

#include <string>
#include <string_view>

namespace dscore::fuzz {

std::string safetensors_header(std::string_view bytes);
// config.json, a NUL byte, then model.safetensors.index.json (absent
// without the NUL).
std::string hf_folder(std::string_view bytes);
std::string tokenizer_json(std::string_view bytes);
std::string llmc_shard(std::string_view bytes);
std::string torch_file(std::string_view bytes);

}  // namespace dscore::fuzz
