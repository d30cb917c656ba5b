// GPT-2's byte-level alphabet (written by hand: no library provides it).
// Every byte 0..255 stands for one Unicode character: the printable bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') for themselves, the rest for U+0100 onwards
// in byte order (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). A byte-level
// BPE vocabulary is written in these characters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dscore::tokenizer {

// The UTF-8 text of the character standing for each byte of `bytes`.
std::string bytes_to_unicode(std::string_view bytes);

// The bytes a byte-level token stands for, or nullopt when a character of
// `token` is not in the alphabet (then the token is not byte-level text,
// e.g. an added token such as "<|über|>").
std::optional<std::string> unicode_to_bytes(std::string_view token);

// The code point of the character standing for byte b.
uint32_t byte_char(uint8_t b);

// Appends the UTF-8 encoding of a code point.
void append_utf8(uint32_t code_point, std::string* out);

// The length in bytes of the UTF-8 sequence starting with lead byte c (1 for
// a byte that does not start a valid sequence: it stands alone).
size_t utf8_length(unsigned char c);

}  // namespace dscore::tokenizer
