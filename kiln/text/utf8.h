// UTF-8 helpers for the tokenizers: walking code points, encoding them, and
// repairing invalid bytes the way Rust's String::from_utf8_lossy does (each
// maximal invalid sequence becomes U+FFFD), which is what `tokenizers` decodes to.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

// The byte length of the valid UTF-8 character at s[i], or 0 if the bytes
// there do not start one (truncated, overlong, surrogate, > U+10FFFF).
size_t utf8_char_length(std::string_view s, size_t i);
// Decodes a valid character at s[i] (utf8_char_length(s, i) > 0).
uint32_t utf8_decode_at(std::string_view s, size_t i);
void utf8_append(std::string& out, uint32_t code_point);
std::string utf8_lossy(std::string_view bytes);
// Code points of valid UTF-8 (invalid bytes become U+FFFD, as in utf8_lossy).
std::vector<uint32_t> utf8_code_points(std::string_view s);
// The length of the longest prefix of `s` that holds only whole characters:
// a stream may print that much and keep the rest for the next piece.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace kiln::text
