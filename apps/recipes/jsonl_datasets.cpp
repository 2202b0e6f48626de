#include "apps/recipes/jsonl_datasets.h"

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "apps/recipes/classify_recipe.h"
#include "kiln/core/error.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/splits.h"
#include "kiln/io/atomic_file.h"

namespace kiln::recipes {

namespace {

using nlohmann::json;

// One JSON object per line, for the split's documents that `line` turns into one (null: left out).
std::string write_split(const std::string& out_dir, const std::string& file, const std::vector<int64_t>& which,
                        const std::function<json(int64_t)>& line) {
  std::string text;
  int64_t n = 0;
  for (int64_t i : which) {
    const json j = line(i);
    if (j.is_null()) continue;
    text += j.dump() + "\n";
    ++n;
  }
  write_file_atomic((std::filesystem::path(out_dir) / file).string(), text);
  return std::to_string(n) + " in " + file;
}

// {"prompt": first line, "completion": the rest}, for fortunes of two lines or more.
std::string fortunes_sft(const std::string& out_dir, const std::string& fortunes_dir) {
  const std::vector<std::string> docs = data::load_fortunes(fortunes_dir);
  const data::Split split = data::split_documents(int64_t(docs.size()));
  const auto line = [&](int64_t i) {
    const std::string& d = docs[size_t(i)];
    const size_t nl = d.find('\n');
    if (nl == std::string::npos || nl == 0 || nl + 1 >= d.size()) return json();
    return json{{"prompt", d.substr(0, nl + 1)}, {"completion", d.substr(nl + 1)}};
  };
  std::filesystem::create_directories(out_dir);
  return "fortunes-sft: " + write_split(out_dir, "train.jsonl", split.train, line) + ", " +
         write_split(out_dir, "val.jsonl", split.validation, line);
}

// {"text": a fortune, "label": its file}, for the files fortunes-classify
// keeps (kMinFortunesPerClass fortunes or more).
std::string fortunes_classify(const std::string& out_dir, const std::string& fortunes_dir) {
  const std::vector<data::LabelledFortune> all = data::load_labelled_fortunes(fortunes_dir);
  std::map<std::string, int64_t> counts;
  for (const auto& f : all) ++counts[f.source];
  const data::Split split = data::split_documents(int64_t(all.size()));
  const auto line = [&](int64_t i) {
    const data::LabelledFortune& f = all[size_t(i)];
    return counts[f.source] >= kMinFortunesPerClass ? json{{"text", f.text}, {"label", f.source}} : json();
  };
  std::filesystem::create_directories(out_dir);
  return "fortunes-classify: " + write_split(out_dir, "train.jsonl", split.train, line) + ", " +
         write_split(out_dir, "val.jsonl", split.validation, line);
}

}  // namespace

const std::vector<JsonlDataset>& jsonl_datasets() {
  static const std::vector<JsonlDataset> table = {
      {"fortunes-sft", "fortunes of two lines or more as {\"prompt\": the first line, \"completion\": the rest}",
       fortunes_sft},
      {"fortunes-classify", "fortunes as {\"text\", \"label\": the file it is from}, for the files fortunes-classify "
       "keeps (kiln train classify)", fortunes_classify},
  };
  return table;
}

const JsonlDataset& find_jsonl_dataset(const std::string& name) {
  std::string known;
  for (const JsonlDataset& d : jsonl_datasets()) {
    if (d.name == name) return d;
    known += (known.empty() ? "" : ", ") + d.name;
  }
  KILN_FAIL("unknown data set '", name, "' (kiln data makes: ", known, ")");
}

}  // namespace kiln::recipes
