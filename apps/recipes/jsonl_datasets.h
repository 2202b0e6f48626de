// Fine-tuning data sets made from Debian's fortunes, as JSON Lines files
// (`kiln data NAME --out DIR`): train.jsonl and val.jsonl, split as the
// fortunes recipes split the corpus, so a fortunes-gpt run never trained on
// a validation fortune.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace kiln::recipes {

struct JsonlDataset {
  std::string name, summary;
  // Writes DIR/train.jsonl and DIR/val.jsonl; returns one line saying what it wrote.
  std::function<std::string(const std::string& out_dir, const std::string& fortunes_dir)> write;
};

const std::vector<JsonlDataset>& jsonl_datasets();
const JsonlDataset& find_jsonl_dataset(const std::string& name);

}  // namespace kiln::recipes
