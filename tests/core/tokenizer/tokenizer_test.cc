// Tests for core/tokenizer: the byte alphabet, BPE merging (rank order,
// leftmost first, long words), bytes no merge reaches, added/special tokens,
// a Split regex pre-tokenizer (Llama 3's), the template's BOS,
// ignore_merges, special tokens from tokenizer_config.json, and the errors
// for kinds dscore does not read. The tokenizer.json files are hand-made
// (tiny_tokenizer.h); tests/external/hf/check_tokenizers.py holds dscore to
// Hugging Face's own tokenizers on trained ones.
#include "core/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/tokenizer/byte_level.h"
#include "tests/core/tokenizer/tiny_tokenizer.h"

namespace dscore::tokenizer {
namespace {

using ::dscore::testing::TinyTokenizer;
namespace fs = std::filesystem;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dscore_tokenizer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Tokenizer> load(const TinyTokenizer& t) {
    t.write(dir_.string());
    auto tok = load_tokenizer(dir_.string());
    EXPECT_TRUE(tok.ok()) << tok.status().message();
    return tok.ok() ? std::move(*tok) : nullptr;
  }
  Status load_error(const TinyTokenizer& t) {
    t.write(dir_.string());
    auto tok = load_tokenizer(dir_.string());
    return tok.ok() ? Status::Ok() : tok.status();
  }
  std::vector<int32_t> encode(const Tokenizer& t, std::string_view text, bool special = true) {
    auto ids = t.encode(text, special);
    EXPECT_TRUE(ids.ok()) << ids.status().message();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
  std::string decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip = false) {
    auto text = t.decode(ids, skip);
    EXPECT_TRUE(text.ok()) << text.status().message();
    return text.ok() ? *text : "";
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

using Ids = std::vector<int32_t>;

TEST(ByteLevel, Gpt2AlphabetRoundTripsEveryByte) {
  EXPECT_EQ(bytes_to_unicode(" "), "\xC4\xA0");         // U+0120 'Ġ'
  EXPECT_EQ(bytes_to_unicode("\n"), "\xC4\x8A");        // U+010A 'Ċ'
  EXPECT_EQ(bytes_to_unicode("\xAD"), "\xC5\x83");      // U+0143, the last one
  EXPECT_EQ(bytes_to_unicode("a~\xA1"), "a~\xC2\xA1");  // printable bytes stand for themselves
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(unicode_to_bytes(bytes_to_unicode(all)), all);
  EXPECT_EQ(unicode_to_bytes("\xE6\x9D\xB1"), std::nullopt);  // '東' is not in the alphabet
}

TEST_F(TokenizerTest, MergesApplyByRankAndTheRestAreBytes) {
  auto tok = load(TinyTokenizer{});
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), testing::kTinyVocabSize);
  // "hello" merges fully; " world" is "Ġw" then bytes.
  EXPECT_EQ(encode(*tok, "hello world"),
            (Ids{testing::kTinyHello, testing::kTinySpaceW, 'o', 'r', 'l', 'd'}));
  // "a a" before "aa aa", leftmost first: aaaaa -> (aa)(aa)a -> (aaaa)a.
  EXPECT_EQ(encode(*tok, "aaaaa"), (Ids{testing::kTinyAaaa, 'a'}));
  EXPECT_EQ(encode(*tok, "aaa"), (Ids{261, 'a'}));
  // GPT-2's pattern keeps digits together: "12345" meets the merge "3 4".
  EXPECT_EQ(encode(*tok, "12345"), (Ids{'1', '2', testing::kTiny34, '5'}));
  EXPECT_EQ(decode(*tok, encode(*tok, "hello world aaaaa")), "hello world aaaaa");
}

TEST_F(TokenizerTest, MergesWrittenAsStringsReadTheSame) {
  TinyTokenizer t;
  t.merges_as_strings = true;
  auto tok = load(t);
  ASSERT_TRUE(tok);
  // ' ' is byte 32 (id 32); "Ġa" has no merge.
  EXPECT_EQ(encode(*tok, "hello aaaa"), (Ids{testing::kTinyHello, ' ', testing::kTinyAaaa}));
}

TEST_F(TokenizerTest, BytesNoMergeReachesAreByteTokensAndDecodeBack) {
  auto tok = load(TinyTokenizer{});
  ASSERT_TRUE(tok);
  // é is C3 A9, 東 E6 9D B1, 😀 F0 9F 98 80: one id per byte (id = byte here).
  EXPECT_EQ(encode(*tok, "\xC3\xA9"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(encode(*tok, "\xE6\x9D\xB1\xF0\x9F\x98\x80"),
            (Ids{0xE6, 0x9D, 0xB1, 0xF0, 0x9F, 0x98, 0x80}));
  const std::string text = "caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80\n\n\t \x01";
  EXPECT_EQ(decode(*tok, encode(*tok, text)), text);
  // Decoding half a character gives its bytes, not valid UTF-8.
  EXPECT_EQ(decode(*tok, {0xE6, 0x9D}), "\xE6\x9D");
  auto bad = tok->decode({5000}, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token id 5000 is not in the vocabulary"),
            std::string::npos);
}

TEST_F(TokenizerTest, SpecialTokensAreSplitOutBeforePreTokenizing) {
  write("tokenizer_config.json", R"({"eos_token": "<|endoftext|>", "bos_token": null})");
  auto tok = load(TinyTokenizer{});
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->special().eos, testing::kTinyEndOfText);
  EXPECT_EQ(tok->special().bos, std::nullopt);
  EXPECT_EQ(tok->token_id("<|endoftext|>"), testing::kTinyEndOfText);
  EXPECT_EQ(tok->token_id("\xC4\xA0w"), testing::kTinySpaceW);
  const Ids ids = encode(*tok, "hi<|endoftext|>hello<|endoftext|>");
  EXPECT_EQ(ids,
            (Ids{'h', 'i', testing::kTinyEndOfText, testing::kTinyHello, testing::kTinyEndOfText}));
  EXPECT_EQ(decode(*tok, ids), "hi<|endoftext|>hello<|endoftext|>");
  EXPECT_EQ(decode(*tok, ids, /*skip=*/true), "hihello");
  // Nothing is added to a GPT-2-style encoding.
  EXPECT_EQ(encode(*tok, "", true), Ids{});
}

TEST_F(TokenizerTest, Llama3SplitPatternTemplateAndIgnoreMerges) {
  TinyTokenizer t;
  t.pre_tokenizer = testing::kLlama3PreTokenizer;
  t.post_processor = testing::kBosTemplate;
  t.ignore_merges = true;
  auto tok = load(t);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->special().bos, testing::kTinyEndOfText);  // the template's first token
  // Llama 3's pattern cuts digits in threes: "123" "45", so "3 4" never meets.
  EXPECT_EQ(encode(*tok, "12345", false), (Ids{'1', '2', '3', '4', '5'}));
  EXPECT_EQ(encode(*tok, "12345"), (Ids{testing::kTinyEndOfText, '1', '2', '3', '4', '5'}));
  // ignore_merges: a word in the vocabulary is one token, merges or not.
  EXPECT_EQ(encode(*tok, "xyz", false), (Ids{testing::kTinyXyz}));
  // Contractions are their own pieces, case-insensitively ("'LL"); " hello"
  // is not a vocabulary word, so it merges as usual: 'Ġ' then "hello".
  EXPECT_EQ(encode(*tok, "we'LL hello", false),
            (Ids{'w', 'e', '\'', 'L', 'L', ' ', testing::kTinyHello}));
  EXPECT_EQ(decode(*tok, encode(*tok, "we'LL  hello\n\n12345"), true), "we'LL  hello\n\n12345");

  TinyTokenizer plain;  // without ignore_merges the same word is bytes
  plain.pre_tokenizer = testing::kLlama3PreTokenizer;
  auto tok2 = load(plain);
  ASSERT_TRUE(tok2);
  EXPECT_EQ(encode(*tok2, "xyz", false), (Ids{'x', 'y', 'z'}));
}

TEST_F(TokenizerTest, SplitOnAPlainStringRemovingTheMatches) {
  TinyTokenizer t;
  t.pre_tokenizer = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": "l"}, "behavior": "Removed", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  auto tok = load(t);
  ASSERT_TRUE(tok);
  // "hello" -> "he", "o" (the l's removed): "he" is merge 256.
  EXPECT_EQ(encode(*tok, "hello"), (Ids{256, 'o'}));
  // A literal pattern: "." is a dot, not any character.
  t.pre_tokenizer = R"({"type": "Split", "pattern": {"String": "."}, "behavior": "Isolated",
                        "invert": false})";
  auto dot = load(t);
  ASSERT_TRUE(dot);
  EXPECT_EQ(encode(*dot, "a.b"), (Ids{'a', '.', 'b'}));
}

TEST_F(TokenizerTest, CharactersOutsideTheVocabularyWithoutByteLevel) {
  // No ByteLevel step: characters are looked up as they are, and '東' is not
  // in the vocabulary (its bytes are, as byte-level characters).
  TinyTokenizer t;
  t.pre_tokenizer = "null";
  t.decoder = "null";
  auto tok = load(t);
  ASSERT_TRUE(tok);
  const std::string text =
      "a\xE6\x9D\xB1\xE6\x9D\xB1"
      "b";
  auto ids = tok->encode(text, false);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("the character \"\xE6\x9D\xB1\" of the word \"" + text +
                                        "\" is not in model.vocab and the model has no unk_token"),
            std::string::npos)
      << ids.status().message();
  // With an unk token each unknown character is one unk; fuse_unk joins runs.
  t.unk_token = "\"xyz\"";
  auto unk = load(t);
  ASSERT_TRUE(unk);
  EXPECT_EQ(encode(*unk, text), (Ids{'a', testing::kTinyXyz, testing::kTinyXyz, 'b'}));
  t.fuse_unk = true;
  auto fused = load(t);
  ASSERT_TRUE(fused);
  EXPECT_EQ(encode(*fused, text), (Ids{'a', testing::kTinyXyz, 'b'}));
  // Without a decoder Hugging Face joins the tokens with spaces.
  EXPECT_EQ(decode(*fused, {'a', testing::kTinyHello}), "a hello");
}

TEST_F(TokenizerTest, LongWordsMergeInReasonableTime) {
  auto tok = load(TinyTokenizer{});
  ASSERT_TRUE(tok);
  // 400k letters in one pre-token: the heap keeps this O(n log n).
  const Ids ids = encode(*tok, std::string(400001, 'a'));
  ASSERT_EQ(ids.size(), 100001u);
  EXPECT_EQ(ids.front(), testing::kTinyAaaa);
  EXPECT_EQ(ids.back(), 'a');
}

TEST_F(TokenizerTest, UnsupportedKindsNameTheFileTheFieldAndTheKind) {
  struct Case {
    TinyTokenizer t;
    std::string expected;
  };
  std::vector<Case> cases(6);
  cases[0].t.model_type = "WordPiece";
  cases[0].expected = "model.type \"WordPiece\" is not supported";
  cases[1].t.model_type = "Unigram";
  cases[1].expected = "model.type \"Unigram\" is not supported";
  cases[2].t.normalizer = R"({"type": "NFC"})";
  cases[2].expected = "normalizer \"NFC\" is not supported";
  cases[3].t.pre_tokenizer = R"({"type": "Metaspace", "replacement": "_"})";
  cases[3].expected = "pre_tokenizer \"Metaspace\" is not supported";
  cases[4].t.decoder = R"({"type": "WordPiece"})";
  cases[4].expected = "decoder \"WordPiece\" is not supported";
  cases[5].t.post_processor = R"({"type": "RobertaProcessing"})";
  cases[5].expected = "post_processor \"RobertaProcessing\" is not supported";
  for (const Case& c : cases) {
    Status s = load_error(c.t);
    EXPECT_EQ(s.code(), DSCORE_UNIMPLEMENTED) << c.expected;
    EXPECT_NE(s.message().find((dir_ / "tokenizer.json").string() + ": "), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << s.message();
  }
}

TEST_F(TokenizerTest, BrokenFilesAreErrorsNamingTheField) {
  TinyTokenizer merge;
  merge.extra_merge = R"(["q", "zz"])";
  Status s = load_error(merge);
  EXPECT_EQ(s.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("model.merges[8] (\"q zz\") uses \"zz\", which is not in model.vocab"),
            std::string::npos)
      << s.message();

  TinyTokenizer regex;
  regex.pre_tokenizer = R"({"type": "Split", "pattern": {"Regex": "(unclosed"},
                            "behavior": "Isolated", "invert": false})";
  s = load_error(regex);
  EXPECT_NE(s.message().find("pre_tokenizer.pattern: the pattern \"(unclosed\" does not compile"),
            std::string::npos)
      << s.message();

  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  s = load_error(TinyTokenizer{});
  EXPECT_NE(s.message().find("eos_token \"</s>\""), std::string::npos) << s.message();
}

TEST_F(TokenizerTest, Gpt2VocabAndMergesFiles) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b)
    vocab += (b ? ", " : "") + testing::tiny_json_string(testing::tiny_byte_char(b)) + ": " +
             std::to_string(b);
  std::string merges = "#version: 0.2\n";
  int id = 256;
  for (const auto& [a, b] : testing::tiny_merges()) {
    vocab += ", " + testing::tiny_json_string(a + b) + ": " + std::to_string(id++);
    merges += a + " " + b + "\n";
  }
  write("vocab.json", vocab + ", \"<|endoftext|>\": 263}");
  write("merges.txt", merges);
  write("tokenizer_config.json", R"({"eos_token": "<|endoftext|>"})");
  auto tok = load_tokenizer(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->special().eos, testing::kTinyEndOfText);
  const Ids ids = encode(**tok, "hello world<|endoftext|>aaaaa");
  EXPECT_EQ(ids, (Ids{testing::kTinyHello, testing::kTinySpaceW, 'o', 'r', 'l', 'd',
                      testing::kTinyEndOfText, testing::kTinyAaaa, 'a'}));
  EXPECT_EQ(decode(**tok, ids), "hello world<|endoftext|>aaaaa");

  write("merges.txt", "#version: 0.2\nh e\nl l l\n");
  auto bad = load_tokenizer(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("merges.txt:3: \"l l l\" must be two tokens"),
            std::string::npos)
      << bad.status().message();
}

TEST_F(TokenizerTest, FoldersWithoutATokenizerAreNotFound) {
  auto missing = load_tokenizer((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), DSCORE_NOT_FOUND);
  auto empty = load_tokenizer(dir_.string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find(
                "holds neither tokenizer.json (Hugging Face tokenizers), tokenizer.model"),
            std::string::npos);
}

}  // namespace
}  // namespace dscore::tokenizer
