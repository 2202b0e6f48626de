// The fortunes corpus: every fortune of Debian's `fortunes` package (about
// 15,000 short texts, 2.5 MB of English: quotes, jokes, poems, a few ASCII
// drawings). Small enough to train a tokenizer in seconds and a small GPT in
// minutes on a laptop, varied enough that samples are recognisable.
#pragma once
#include <string>
#include <vector>

namespace kiln::data {

inline constexpr const char* kFortunesDefaultDir = "/usr/share/games/fortunes";

// `dir` when non-empty, else $KILN_FORTUNES_DIR when set, else the Debian path.
std::string fortunes_dir(const std::string& dir = "");

// Every fortune, in a fixed order: files sorted by name, fortunes in file
// order. Files are plain text with fortunes separated by lines holding only
// "%". Skipped: the strfile indexes (*.dat), subdirectories (such as the
// offensive "off/"), and any entry that resolves to a file already read (the
// *.u8 symlinks). Each fortune is returned without its trailing newline;
// blank fortunes are dropped. A missing directory, an empty corpus or text
// that is not UTF-8 throws kiln::Error naming the file.
std::vector<std::string> load_fortunes(const std::string& dir = "");

// The same fortunes, each with the name of the file it came from ("people",
// "computers", ...): the labels of the fortunes-classify recipe.
struct LabelledFortune {
  std::string text, source;
};
std::vector<LabelledFortune> load_labelled_fortunes(const std::string& dir = "");

// Splits the text of one fortune file; exposed for tests.
std::vector<std::string> split_fortune_file(const std::string& text);

}  // namespace kiln::data
