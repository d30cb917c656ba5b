"""dscore's tokenizers against Hugging Face's own.

Builds, offline, from text this script writes:
  - gpt2: a byte-level BPE trained with `tokenizers` (ByteLevelBPETokenizer,
    GPT-2's pipeline), saved with transformers' save_pretrained;
  - llama3: a BPE with Llama 3's pipeline (Split with Llama 3's pattern,
    ByteLevel without regex, ignore_merges, <|begin_of_text|> added by a
    TemplateProcessing), saved with save_pretrained;
  - wide: a byte-level BPE of 70000 ids, whose shards are uint32;
  - sentencepiece: a SentencePiece BPE model (byte fallback, as Llama 2's)
    as tokenizer.model. The reference is the sentencepiece library with BOS
    first, what Hugging Face's LlamaTokenizer gives by default
    (add_bos_token true); transformers 5 cannot convert a tokenizer.model
    without protobuf, which this venv does not hold.
For each, `dscore tokenize --print` gives the Hugging Face ids for every
text, `dscore tokenize --decode` gives the Hugging Face decoding back, and
`dscore tokenize --out` writes the shards data.type "tokens" reads. A
WordPiece tokenizer.json is refused with an error naming the field.

Usage: check_tokenizers.py <dscore binary> <scratch dir>
"""
import json
import os
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
from tokenizers import (ByteLevelBPETokenizer, BertWordPieceTokenizer, Regex,  # noqa: E402
                        Tokenizer, decoders, models, pre_tokenizers, processors, trainers)
from transformers import GPT2Tokenizer, PreTrainedTokenizerFast  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = (
    "The quick brown fox jumps over the lazy dog. Don't stop; we'll see what they've done.\n"
    "Numbers 1234567890 and 3.14159, dates 2024-05-20.\n"
    "Café, naïve, façade, résumé, Ångström, straße.\n"
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.\n"
    "Emoji: 😀 🎉 👍🏽 ❤️ and symbols ∑ ∫ → ≠.\n"
    "    indented code\n\tdef f(x):\n\t\treturn x * 2\n\n\n"
    "Multiple   spaces   and\ttabs\r\nand CRLF lines.\n"
)

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "don't I'LL we've THEY'RE it's",
    "Café naïve Ångström straße façade",
    "東京は日本の首都です。서울 北京",
    "Emoji 😀🎉 👍🏽 ❤️ ∑∫→ unseen: ʤ ꙮ 𝔸",
    "   leading spaces, trailing spaces   ",
    "lines\n\n\nwith\r\n\r\nbreaks\n \n\t\t tabs",
    "digits 1 12 123 1234 12345 3.14159 2024-05-20",
    "",
    " ",
    "x",
]


def random_texts(count, seed=1234):
    """Texts drawn from a pool of letters, digits, marks, CJK, emoji and
    whitespace runs: where pre-tokenizer patterns and merges meet."""
    import random
    rng = random.Random(seed)
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
            list(" \n\t\r.,;:'\"!?-()[]{}<>/\\|_*&^%$#@~`+=") + list("éàüñçøßÅ東京日本首都中国") +
            ["😀", "🎉", "👍🏽", "❤️", "\u00a0", "\u2003", "'s", "'ll", "  ", "\n\n", "...", "<|"])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 80))) for _ in range(count)]


SPECIAL_TEXTS = {
    "gpt2": "first doc<|endoftext|>second doc <|endoftext|> third",
    "llama3": "<|begin_of_text|>Hi<|end_of_text|><|begin_of_text|> again <|eot_id|>",
}

failures = []


def check(name, ok, detail=""):
    print(f"check_{name}: {'ok' if ok else 'FAILED'} {detail}".rstrip())
    if not ok:
        failures.append(name)


def run(dscore, *args, expect_ok=True):
    p = subprocess.run([dscore, *args], capture_output=True)
    if expect_ok and p.returncode != 0:
        raise SystemExit(f"dscore {' '.join(args)} failed ({p.returncode}): "
                         f"{p.stderr.decode(errors='replace')}")
    return p


def build_gpt2(scratch, corpus):
    tok = ByteLevelBPETokenizer()
    tok.train([corpus], vocab_size=500, min_frequency=1, special_tokens=["<|endoftext|>"])
    out = os.path.join(scratch, "gpt2")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")
    fast.save_pretrained(out)
    return out


def build_llama3(scratch, corpus):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=1, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    out = os.path.join(scratch, "llama3")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                   eos_token="<|end_of_text|>")
    fast.save_pretrained(out)
    return out


def build_wide(scratch):
    """A byte-level BPE of 70000 ids (past uint16), trained on random words."""
    import random
    rng = random.Random(5)
    letters = "abcdefghijklmnopqrstuvwxyzéèàüößñ東京日本"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))
             for _ in range(120000)]
    corpus = os.path.join(scratch, "wide_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(" ".join(words + words))
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=70000, min_frequency=1,
                                  special_tokens=["<|end_of_text|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    out = os.path.join(scratch, "wide")
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end_of_text|>").save_pretrained(out)
    return out, words


def build_sentencepiece(scratch, corpus):
    out = os.path.join(scratch, "sentencepiece")
    os.makedirs(out)
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(out, "tokenizer"), vocab_size=600,
        model_type="bpe", byte_fallback=True, split_digits=True, character_coverage=0.995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    return out


def compare(dscore, scratch, name, folder, texts, hf_encode, hf_decode, decode_count=None):
    files = []
    for i, t in enumerate(texts):
        path = os.path.join(scratch, f"{name}_text{i}.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(t)
        files.append(path)
    lines = run(dscore, "tokenize", "--tokenizer", folder, "--print", *files).stdout.decode()
    got = [[int(x) for x in line.split(",") if x] for line in lines.split("\n")[:len(texts)]]
    bad = [(t, g, hf_encode(t)) for t, g in zip(texts, got) if g != hf_encode(t)]
    check(f"{name}_ids_equal_hf", not bad,
          f"({len(texts)} texts)" if not bad else f"first mismatch {bad[0]!r}")
    bad = []
    for t in texts[:decode_count]:  # one dscore process each
        ids = hf_encode(t)
        if not ids:
            continue
        text = run(dscore, "tokenize", "--tokenizer", folder, "--decode",
                   ",".join(map(str, ids))).stdout.decode("utf-8")
        if text != hf_decode(ids):
            bad.append((t, text, hf_decode(ids)))
    check(f"{name}_decode_equals_hf", not bad, "" if not bad else f"first mismatch {bad[0]!r}")
    return files


def compare_without_special(dscore, name, folder, files, texts, hf_encode_plain):
    """--no-special-tokens is add_special_tokens=False."""
    lines = run(dscore, "tokenize", "--tokenizer", folder, "--print", "--no-special-tokens",
                *files).stdout.decode()
    got = [[int(x) for x in line.split(",") if x] for line in lines.split("\n")[:len(texts)]]
    check(f"{name}_without_special_tokens_equal_hf",
          got == [hf_encode_plain(t) for t in texts], f"({len(texts)} texts)")


def compare_long(dscore, scratch, name, folder, hf_encode):
    """One long text (~120 kB): many pre-tokens, the word cache, long runs."""
    text = "".join(random_texts(3000, seed=2024)) + CORPUS * 30
    path = os.path.join(scratch, f"{name}_long.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    got = run(dscore, "tokenize", "--tokenizer", folder, "--print", path).stdout.decode()
    got = [int(x) for x in got.strip().split(",")]
    want = hf_encode(text)
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    check(f"{name}_long_text_ids_equal_hf", got == want,
          f"({len(want)} ids)" if got == want else f"lengths {len(got)}/{len(want)}, first "
                                                   f"difference at {first}")


def check_shards(dscore, scratch, name, folder, files, expected, width):
    prefix = os.path.join(scratch, f"{name}_shards", "data")
    os.makedirs(os.path.dirname(prefix))
    run(dscore, "tokenize", "--tokenizer", folder, "--out", prefix, "--shard-tokens", "50",
        *files)
    shards = sorted(f for f in os.listdir(os.path.dirname(prefix)) if f.endswith(".bin"))
    tokens = []
    for s in shards:
        raw = open(os.path.join(os.path.dirname(prefix), s), "rb").read()
        header = np.frombuffer(raw[:1024], dtype=np.int32)
        body = np.frombuffer(raw[1024:], dtype=np.uint16 if width == 2 else np.uint32)
        ok_header = (header[0], header[1]) == ((20240520, 1) if width == 2 else (20240801, 7))
        if not ok_header or header[2] != len(body):
            check(f"{name}_shards", False, f"{s}: header {header[:3]} for {len(body)} tokens")
            return
        tokens += body.tolist()
    check(f"{name}_shards_hold_the_documents", tokens == expected,
          f"({len(shards)} shards, {len(tokens)} tokens)")


def main():
    dscore, scratch = sys.argv[1], sys.argv[2]
    corpus = os.path.join(scratch, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(CORPUS * 20)

    gpt2 = build_gpt2(scratch, corpus)
    hf = PreTrainedTokenizerFast.from_pretrained(gpt2)
    texts = TEXTS + [SPECIAL_TEXTS["gpt2"], CORPUS] + random_texts(40)
    files = compare(dscore, scratch, "gpt2", gpt2, texts, lambda t: hf(t)["input_ids"],
                    lambda ids: hf.decode(ids))
    compare_long(dscore, scratch, "gpt2", gpt2, lambda t: hf(t)["input_ids"])
    eot = hf.convert_tokens_to_ids("<|endoftext|>")
    # llm.c's GPT-2 shards: <|endoftext|> before every document.
    expected = [x for t in texts for x in [eot] + hf(t)["input_ids"]]
    check_shards(dscore, scratch, "gpt2", gpt2, files, expected, 2)

    # GPT-2's older files: vocab.json + merges.txt and a tokenizer_config.json,
    # read by transformers' GPT2Tokenizer.
    old = os.path.join(scratch, "gpt2_vocab_merges")
    os.makedirs(old)
    Tokenizer.from_file(os.path.join(gpt2, "tokenizer.json")).model.save(old)
    with open(os.path.join(old, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f)
    hf_old = GPT2Tokenizer.from_pretrained(old)
    compare(dscore, scratch, "gpt2_vocab_merges", old, TEXTS + [SPECIAL_TEXTS["gpt2"]],
            lambda t: hf_old(t)["input_ids"], lambda ids: hf_old.decode(ids))

    # Pre-tokenizer variants on the same vocabulary: a prefix space (added to
    # every piece between special tokens, as Hugging Face does), and a Split
    # on a plain string whose matches are removed.
    variants = {
        "gpt2_prefix_space": pre_tokenizers.ByteLevel(add_prefix_space=True),
        "split_removed": pre_tokenizers.Sequence([
            pre_tokenizers.Split("o", behavior="removed"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    }
    for name, pre in variants.items():
        tok = Tokenizer.from_file(os.path.join(gpt2, "tokenizer.json"))
        tok.pre_tokenizer = pre
        folder = os.path.join(scratch, name)
        os.makedirs(folder)
        tok.save(os.path.join(folder, "tokenizer.json"))
        compare(dscore, scratch, name, folder, TEXTS + [SPECIAL_TEXTS["gpt2"]] + random_texts(20),
                lambda t: tok.encode(t).ids, lambda ids: tok.decode(ids, skip_special_tokens=False))

    llama3 = build_llama3(scratch, corpus)
    hf3 = PreTrainedTokenizerFast.from_pretrained(llama3)
    check("llama3_hf_adds_bos", hf3("x")["input_ids"][0] == hf3.bos_token_id)
    texts = TEXTS + [SPECIAL_TEXTS["llama3"], CORPUS] + random_texts(40, seed=99)
    files = compare(dscore, scratch, "llama3", llama3, texts, lambda t: hf3(t)["input_ids"],
                    lambda ids: hf3.decode(ids))
    compare_long(dscore, scratch, "llama3", llama3, lambda t: hf3(t)["input_ids"])
    compare_without_special(dscore, "llama3", llama3, files, texts,
                            lambda t: hf3(t, add_special_tokens=False)["input_ids"])
    expected = [x for t in texts for x in hf3(t)["input_ids"]]  # BOS starts each document
    check_shards(dscore, scratch, "llama3", llama3, files, expected, 2)

    wide, words = build_wide(scratch)
    hfw = PreTrainedTokenizerFast.from_pretrained(wide)
    check("wide_vocabulary_past_uint16", len(hfw) > 65536, f"({len(hfw)} ids)")
    texts = TEXTS + [" ".join(words[i:i + 50]) for i in range(0, 2000, 50)]
    files = compare(dscore, scratch, "wide", wide, texts, lambda t: hfw(t)["input_ids"],
                    lambda ids: hfw.decode(ids), decode_count=16)
    eos = hfw.convert_tokens_to_ids("<|end_of_text|>")
    expected = [x for t in texts for x in [eos] + hfw(t)["input_ids"]]
    check_shards(dscore, scratch, "wide", wide, files, expected, 4)

    sp_dir = build_sentencepiece(scratch, corpus)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(sp_dir, "tokenizer.model"))
    texts = TEXTS + [CORPUS] + random_texts(20, seed=7)
    files = compare(dscore, scratch, "sentencepiece", sp_dir, texts,
                    lambda t: [sp.bos_id()] + sp.encode(t), lambda ids: sp.decode(ids))
    compare_without_special(dscore, "sentencepiece", sp_dir, files, texts, sp.encode)
    compare_long(dscore, scratch, "sentencepiece", sp_dir, lambda t: [sp.bos_id()] + sp.encode(t))

    # A kind dscore does not read: WordPiece.
    wp = BertWordPieceTokenizer()
    wp.train([corpus], vocab_size=200, min_frequency=1)
    wp_dir = os.path.join(scratch, "wordpiece")
    os.makedirs(wp_dir)
    wp.save(os.path.join(wp_dir, "tokenizer.json"))
    p = run(dscore, "tokenize", "--tokenizer", wp_dir, "--print", files[0], expect_ok=False)
    err = p.stderr.decode()
    check("wordpiece_is_refused", p.returncode == 1 and "tokenizer.json" in err and
          "model.type \"WordPiece\" is not supported" in err, err.strip()[:300])

    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
