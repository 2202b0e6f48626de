// The Precompiled normalizer, as `tokenizers` runs it (normalizers/
// precompiled.rs over the spm_precompiled crate): the text is cut into
// grapheme clusters; a cluster under 6 bytes that the trie knows becomes
// the replacement of its shortest known prefix ("this seems broken", says
// tokenizers' own comment, and it is what XLM-R and T5 were tested with);
// otherwise each character is replaced on its own where the trie knows it.
// Every read of the trie is bounds-checked: the blob comes from a file.
#include "kiln/text/precompiled.h"

#include <utf8proc.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/text/base64.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

class Precompiled : public Normalizer {
 public:
  explicit Precompiled(const nlohmann::json& j) {
    const auto& map = j.at("precompiled_charsmap");
    if (map.is_null()) return;  // no rules: the text passes unchanged
    const std::optional<std::string> decoded = base64_decode(map.get<std::string>());
    KILN_CHECK(decoded, "tokenizer.json: precompiled_charsmap is not base64");
    const std::string& blob = *decoded;
    if (blob.empty()) return;
    KILN_CHECK(blob.size() >= 4, "tokenizer.json: precompiled_charsmap is truncated");
    uint32_t trie_bytes;
    std::memcpy(&trie_bytes, blob.data(), 4);
    KILN_CHECK(trie_bytes % 4 == 0 && trie_bytes <= blob.size() - 4,
               "tokenizer.json: precompiled_charsmap's trie size ", trie_bytes, " does not fit its ", blob.size(),
               " bytes");
    units_.resize(trie_bytes / 4);
    std::memcpy(units_.data(), blob.data() + 4, trie_bytes);
    normalized_ = blob.substr(4 + trie_bytes);
  }

  std::string normalize(std::string s, bool) const override {
    if (units_.empty()) return s;
    std::string out;
    out.reserve(s.size());
    const auto cps = utf8_code_points(s);
    utf8proc_int32_t state = 0;
    size_t byte = 0;
    for (size_t i = 0; i < cps.size();) {
      // One grapheme cluster: code points i..j.
      size_t j = i + 1;
      while (j < cps.size() && !utf8proc_grapheme_break_stateful(utf8proc_int32_t(cps[j - 1]), utf8proc_int32_t(cps[j]), &state))
        ++j;
      size_t cluster_bytes = 0;
      for (size_t k = i; k < j; ++k) cluster_bytes += utf8_length(cps[k]);
      const std::string_view cluster(s.data() + byte, cluster_bytes);
      if (cluster.size() < 6) {
        if (const char* r = replacement(cluster)) {
          out += r;
          byte += cluster_bytes;
          i = j;
          continue;
        }
      }
      for (size_t k = i; k < j; ++k) {
        const std::string_view one(s.data() + byte, utf8_length(cps[k]));
        const char* r = replacement(one);
        if (r)
          out += r;
        else
          out.append(one);
        byte += one.size();
      }
      i = j;
    }
    return out;
  }

 private:
  static size_t utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

  uint32_t unit(size_t pos) const {
    KILN_CHECK(pos < units_.size(), "tokenizer.json: precompiled_charsmap's trie points outside itself");
    return units_[pos];
  }

  // The replacement of the shortest prefix of `key` the trie holds (darts-clone's common prefix search).
  const char* replacement(std::string_view key) const {
    auto offset = [](uint32_t u) { return size_t((u >> 10) << ((u & (1u << 9)) >> 6)); };
    auto label = [](uint32_t u) { return u & ((1u << 31) | 0xffu); };
    size_t pos = 0;
    pos ^= offset(unit(pos));
    for (unsigned char c : key) {
      if (c == 0) break;
      pos ^= c;
      const uint32_t u = unit(pos);
      if (label(u) != c) return nullptr;
      pos ^= offset(u);
      if ((u >> 8) & 1) {  // a leaf: its value is an offset into the replacement strings
        const size_t at = unit(pos) & ((1u << 31) - 1);
        KILN_CHECK(at < normalized_.size(), "tokenizer.json: precompiled_charsmap's replacement ", at,
                   " is past its strings");
        return normalized_.c_str() + at;
      }
    }
    return nullptr;
  }

  std::vector<uint32_t> units_;
  std::string normalized_;  // NUL-terminated replacements, one after another
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const nlohmann::json& j) { return std::make_unique<Precompiled>(j); }

}  // namespace kiln::text
