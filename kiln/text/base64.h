// Base64 (RFC 4648, with padding): how tokenizer.json carries SentencePiece's
// precompiled_charsmap, and how OpenAI's embeddings API carries floats.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace kiln::text {

std::string base64_encode(const void* data, size_t bytes);
// The bytes, or nullopt where `in` holds a character outside the alphabet (what follows '=' is ignored).
std::optional<std::string> base64_decode(const std::string& in);

}  // namespace kiln::text
