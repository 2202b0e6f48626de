// GPT-2's byte-level alphabet: each of the 256 byte values as a printable
// character, so that BPE over text can cover any bytes. Printable Latin-1
// bytes stand for themselves; the rest take the code points from U+0100 on.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text {

struct ByteLevelAlphabet {
  std::array<std::string, 256> char_of_byte;  // UTF-8 of each byte's character
  std::array<int16_t, 512> byte_of_char;      // code point (< 512) -> byte, or -1
  ByteLevelAlphabet();
};
const ByteLevelAlphabet& byte_level_alphabet();

std::string bytes_to_byte_level(std::string_view bytes);
// The inverse; characters outside the alphabet are kept as their UTF-8 bytes.
std::string byte_level_to_bytes(std::string_view text);

}  // namespace kiln::text
