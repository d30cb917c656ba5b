// /v1/completions' request fields and their refusals, the text of a
// stream of tokens (a character split over tokens waits for its end;
// invalid bytes become U+FFFD), and the response bodies.
#include "core/serve/completions_api.h"

#include <gtest/gtest.h>

#include <string>

#include "core/base/strings.h"
#include "core/config/json.h"

namespace dscore::serve {
namespace {

ServedModel byte_level() {
  ServedModel m;
  m.name = "tiny";
  m.byte_level = true;
  m.vocab_size = 256;
  return m;
}

TEST(CompletionsApi, ReadsTheFieldsWithOpenAisDefaults) {
  auto r = parse_completion_request(R"({"prompt": "ab", "model": "x"})", byte_level());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->generation.prompt, (std::vector<int32_t>{97, 98}));
  EXPECT_EQ(r->generation.max_new_tokens, 16);
  EXPECT_EQ(r->generation.sampling.temperature, 1.0);
  EXPECT_FALSE(r->stream);
  r = parse_completion_request(
      R"({"prompt": [1, 2], "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": -1,
          "repetition_penalty": 1.2, "seed": 7, "stream": true, "n": 1})",
      byte_level());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->generation.prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r->generation.max_new_tokens, 5);
  EXPECT_EQ(r->generation.sampling.top_p, 0.5);
  EXPECT_EQ(r->generation.sampling.top_k, 0);
  EXPECT_EQ(r->generation.sampling.seed, 7u);
  EXPECT_TRUE(r->stream);
}

TEST(CompletionsApi, RefusesBadFieldsByName) {
  const ServedModel m = byte_level();
  const auto message = [&](const char* body) {
    return parse_completion_request(body, m).status().message();
  };
  EXPECT_NE(message("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(message(R"({"max_tokens": 3})").find("\"prompt\" is required"), std::string::npos);
  EXPECT_NE(message(R"({"prompt": [300]})").find("below the vocabulary's 256"), std::string::npos);
  EXPECT_NE(message(R"({"prompt": "a", "max_tokens": -2})").find("max_tokens"), std::string::npos);
  EXPECT_NE(message(R"({"prompt": "a", "top_p": 0})").find("top_p"), std::string::npos);
  EXPECT_NE(message(R"({"prompt": "a", "n": 2})").find("\"n\" is not supported"),
            std::string::npos);
  ServedModel ids_only = m;
  ids_only.byte_level = false;
  EXPECT_NE(parse_completion_request(R"({"prompt": "a"})", ids_only)
                .status()
                .message()
                .find("no tokenizer"),
            std::string::npos);
}

TEST(CompletionsApi, TextWaitsForWholeCharactersAndReplacesInvalidBytes) {
  const ServedModel m = byte_level();
  TextStream text(m);
  EXPECT_EQ(text.add('h'), "h");
  EXPECT_EQ(text.add(0xC3), "");  // the first byte of "é"
  EXPECT_EQ(text.add(0xA9), "\xC3\xA9");
  EXPECT_EQ(text.add(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("a\xE2\x82"), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\x80!"), "\xF0\x9F\x98\x80!");
}

TEST(CompletionsApi, BodiesAreOpenAisShapes) {
  const ServedModel m = byte_level();
  auto body = json::parse(completion_body("cmpl-1", 5, m, "hi", {104, 105}, "length", 3), "body");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(body->find("object")->as_string(), "text_completion");
  const json::Value& choice = body->find("choices")->items()[0];
  EXPECT_EQ(choice.find("text")->as_string(), "hi");
  EXPECT_EQ(choice.find("finish_reason")->as_string(), "length");
  EXPECT_EQ(body->find("usage")->find("total_tokens")->as_int(), 5);
  auto chunk = json::parse(chunk_body("cmpl-1", 5, m, "h", 104, ""), "chunk");
  ASSERT_TRUE(chunk.ok());
  EXPECT_TRUE(chunk->find("choices")->items()[0].find("finish_reason")->is_null());
  EXPECT_EQ(json::parse(error_body("no", "invalid_request_error"), "e")
                ->find("error")
                ->find("message")
                ->as_string(),
            "no");
}

}  // namespace
}  // namespace dscore::serve
