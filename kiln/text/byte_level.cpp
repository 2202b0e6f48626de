#include "kiln/text/byte_level.h"

#include "kiln/text/utf8.h"

namespace kiln::text {

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_char.fill(-1);
  const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? uint32_t(b) : uint32_t(next++);
    utf8_append(char_of_byte[b], cp);
    byte_of_char[cp] = int16_t(b);
  }
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& a = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.char_of_byte[uint8_t(c)];
  return out;
}

std::string byte_level_to_bytes(std::string_view text) {
  const auto& a = byte_level_alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_char_length(text, i);
    if (n == 0) {
      out += text[i++];
      continue;
    }
    const uint32_t cp = utf8_decode_at(text, i);
    if (cp < 512 && a.byte_of_char[cp] >= 0)
      out += char(a.byte_of_char[cp]);
    else
      out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace kiln::text
