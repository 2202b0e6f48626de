#include "models/hf/prompt_reranker.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace kiln::models {

namespace fs = std::filesystem;

const char* const kQwen3RerankPrompt =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a "
    "web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: "
    "{document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
const char* const kQwen3RerankLabels[2] = {"yes", "no"};

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

bool is_qwen3_reranker_folder(const std::string& dir, const nlohmann::json& config) {
  if (config.value("model_type", std::string()) != "qwen3") return false;
  const std::string name_or_path = config.contains("_name_or_path") && config["_name_or_path"].is_string()
                                       ? config["_name_or_path"].get<std::string>()
                                       : std::string();
  fs::path folder = fs::path(dir).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();  // "DIR/"
  for (const std::string& hint : {folder.filename().string(), name_or_path})
    if (lower(hint).find("qwen3-reranker") != std::string::npos) return true;
  std::ifstream readme(fs::path(dir) / "README.md");
  std::string head(4096, '\0');  // the heading is at the top; a model card can be long
  readme.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(readme.gcount()));
  return lower(head).find("# qwen3-reranker") != std::string::npos;
}

}  // namespace kiln::models
