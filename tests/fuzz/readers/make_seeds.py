#!/usr/bin/env python3
"""Writes the seed corpora of the reader fuzz targets (tests/fuzz/reader_targets.h),
one folder per target, deterministically: run it again after changing it and
commit what it writes. python3 tests/fuzz/readers/make_seeds.py"""
import io
import json
import os
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> the file's bytes."""
    header, offset, data = {}, 0, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


write("safetensors", "one_f32.safetensors",
      safetensors([("w", "F32", [2], struct.pack("<2f", 1.0, -2.0))], {"format": "pt"}))
write("safetensors", "mixed.safetensors",
      safetensors([("a", "BF16", [2, 2], b"\x80\x3f" * 4), ("b", "I64", [1], struct.pack("<q", 7)),
                   ("c", "F16", [], b"\x00\x3c")], {"dscore": json.dumps({"tag": "global_step1"})}))
write("safetensors", "empty.safetensors", safetensors([]))

# hf_folder: config.json, a NUL, then model.safetensors.index.json.
gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16,
        "vocab_size": 32, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
llama = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32,
         "rope_theta": 10000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
         "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
index = {"metadata": {"total_size": 16},
         "weight_map": {"wte.weight": "model-00001-of-00002.safetensors",
                        "h.0.ln_1.weight": "model-00002-of-00002.safetensors"}}
write("hf_folder", "gpt2_index", json.dumps(gpt2) + "\0" + json.dumps(index))
write("hf_folder", "llama_no_index", json.dumps(llama) + "\0")

# tokenizer: byte-level BPE as tests/core/tokenizer/tiny_tokenizer.h writes it.
def byte_char(b):
    printable = ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or b >= 0xAE
    if printable:
        return chr(b)
    n = sum(1 for c in range(b) if not (ord("!") <= c <= ord("~") or 0xA1 <= c <= 0xAC or c >= 0xAE))
    return chr(256 + n)


vocab = {byte_char(b): b for b in range(256)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w")]
for i, (a, b) in enumerate(merges):
    vocab[a + b] = 256 + i
vocab["<|endoftext|>"] = 256 + len(merges)
tokenizer = {"version": "1.0", "truncation": None, "padding": None,
             "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>",
                               "single_word": False, "lstrip": False, "rstrip": False,
                               "normalized": False, "special": True}],
             "normalizer": None,
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
             "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
             "model": {"type": "BPE", "dropout": None, "unk_token": None,
                       "continuing_subword_prefix": None, "end_of_word_suffix": None,
                       "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                       "vocab": vocab, "merges": [[a, b] for a, b in merges]}}
write("tokenizer", "byte_level_bpe.json", json.dumps(tokenizer, ensure_ascii=False))
tokenizer["model"]["merges"] = [a + " " + b for a, b in merges]
tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+|\\p{L}+|\\p{N}{1,3}"}, "behavior": "Isolated",
     "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
write("tokenizer", "split_then_byte_level.json", json.dumps(tokenizer, ensure_ascii=False))

# llmc: llm.c shards, uint16 (magic 20240520, version 1) and uint32 (20240801, 7).
def shard(magic, version, tokens, fmt):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens)
    return struct.pack("<256i", *header) + struct.pack("<%d%s" % (len(tokens), fmt), *tokens)


write("llmc", "u16.bin", shard(20240520, 1, [50256, 1, 2, 3, 65535], "H"))
write("llmc", "u32.bin", shard(20240801, 7, [128000, 1, 2**31 - 1], "I"))


# torch: torch.save archives (stored zip entries, pickle protocol 2) in the
# shape of DeepSpeed's checkpoint files, assembled by hand (no torch).
def p_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def p_int(v):
    return b"J" + struct.pack("<i", v)


def p_global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def p_dict(items):
    return b"}(" + b"".join(k + v for k, v in items) + b"u"


def p_tensor(key, shape, dtype="FloatStorage", offset=0):
    strides, n = [], 1
    for d in reversed(shape):
        strides.insert(0, n)
        n *= d
    return (p_global("torch._utils", "_rebuild_tensor_v2") + b"((" + p_str("storage") +
            p_global("torch", dtype) + p_str(key) + p_str("cpu") + p_int(n) + b"tQ" + p_int(offset) +
            b"(" + b"".join(p_int(d) for d in shape) + b"t(" + b"".join(p_int(s) for s in strides) +
            b"t\x89" + p_global("collections", "OrderedDict") + b")RtR")


def torch_save(name, pickled, storages):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr(name + "/data.pkl", b"\x80\x02" + pickled + b".")
        z.writestr(name + "/byteorder", "little")
        for key, data in storages.items():
            z.writestr(name + "/data/" + key, data)
        z.writestr(name + "/version", "3\n")
    return out.getvalue()


size = p_global("torch", "Size") + b"(" + p_int(2) + p_int(2) + b"t\x85R"
model = p_dict([(p_str("module"), p_dict([(p_str("w"), p_tensor("0", [2, 2])),
                                         (p_str("b"), p_tensor("0", [2], offset=4))])),
                (p_str("param_shapes"), b"](" + p_global("collections", "OrderedDict") + b")R(" +
                 p_str("w") + size + b"ue"),
                (p_str("global_steps"), p_int(5)), (p_str("dp_world_size"), p_int(1)),
                (p_str("ds_config"), p_dict([(p_str("train_batch_size"), p_int(4))]))])
write("torch", "model_states.pt", torch_save("mp_rank_00_model_states", model,
                                             {"0": struct.pack("<6f", 1, 2, 3, 4, 5, 6)}))
scaler = (p_global("deepspeed.runtime.fp16.loss_scaler", "LossScaler") + b")\x81" +
          p_dict([(p_str("cur_scale"), b"G" + struct.pack(">d", 1.0))]) + b"b")
optim = p_dict([(p_str("optimizer_state_dict"), p_dict([
    (p_str("loss_scaler"), scaler), (p_str("dynamic_loss_scale"), b"\x89"),
    (p_str("single_partition_of_fp32_groups"), b"](" + p_tensor("0", [3]) + b"e"),
    (p_str("base_optimizer_state"), p_dict([(p_str("state"), p_dict([(p_int(0), p_dict([
        (p_str("step"), p_int(5)), (p_str("exp_avg"), p_tensor("1", [4], "BFloat16Storage"))]))]))]))]))])
write("torch", "optim_states.pt", torch_save("zero_pp_rank_0_mp_rank_00_optim_states", optim,
                                             {"0": struct.pack("<3f", 1, 2, 3),
                                              "1": struct.pack("<4H", 0x3f80, 0x4000, 0, 0xbf80)}))
