#include "kiln/data/fortunes.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::data {

namespace {

namespace fs = std::filesystem;

// Byte offset of the first invalid UTF-8 sequence, or npos. SentencePiece
// would silently replace such bytes, breaking decode(encode(s)) == s.
size_t first_invalid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + size_t(len) > s.size()) return i;
    for (int k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + size_t(k)]) & 0xC0) != 0x80) return i;
    i += size_t(len);
  }
  return std::string::npos;
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

}  // namespace

std::string fortunes_dir(const std::string& dir) {
  if (!dir.empty()) return dir;
  const char* env = std::getenv("KILN_FORTUNES_DIR");
  if (env && *env) return env;
  return kFortunesDefaultDir;
}

std::vector<std::string> split_fortune_file(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  auto flush = [&] {
    if (!current.empty() && current.back() == '\n') current.pop_back();
    if (!is_blank(current)) out.push_back(current);
    current.clear();
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    size_t line_end = end == std::string::npos ? text.size() : end;
    std::string_view line(text.data() + start, line_end - start);
    if (line == "%" || line == "%\r") {
      flush();
    } else {
      current.append(line);
      current.push_back('\n');
    }
    start = line_end + 1;
  }
  flush();
  return out;
}

std::vector<LabelledFortune> load_labelled_fortunes(const std::string& dir_arg) {
  const std::string dir = fortunes_dir(dir_arg);
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), "fortunes directory ", dir,
             " not found; install it with: sudo apt-get install fortunes (or set KILN_FORTUNES_DIR)");

  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec)) continue;  // e.g. off/, the offensive fortunes
    if (!e.is_regular_file(ec)) continue;  // follows symlinks; dangling ones drop out
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  KILN_CHECK(!ec, "cannot list fortunes directory ", dir, ": ", ec.message());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });

  std::vector<LabelledFortune> fortunes;
  std::set<fs::path> seen;  // canonical paths: art.u8 -> art is read once, as "art"
  for (const fs::path& p : files) {
    fs::path canonical = fs::canonical(p, ec);
    if (ec || !seen.insert(canonical).second) continue;
    std::ifstream in(p, std::ios::binary);
    KILN_CHECK(in, "cannot read fortunes file ", p.string());
    std::ostringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    size_t bad = first_invalid_utf8(s);
    KILN_CHECK(bad == std::string::npos, "fortunes file ", p.string(), ": byte ", bad,
               " is not valid UTF-8; convert the file (iconv -f latin1 -t utf-8) or remove it");
    for (std::string& f : split_fortune_file(s)) fortunes.push_back({std::move(f), p.filename().string()});
  }
  KILN_CHECK(!fortunes.empty(), "fortunes directory ", dir,
             " holds no fortunes; install them with: sudo apt-get install fortunes");
  return fortunes;
}

std::vector<std::string> load_fortunes(const std::string& dir) {
  std::vector<std::string> texts;
  for (LabelledFortune& f : load_labelled_fortunes(dir)) texts.push_back(std::move(f.text));
  return texts;
}

}  // namespace kiln::data
