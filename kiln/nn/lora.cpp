#include "kiln/nn/lora.h"

#include <algorithm>
#include <map>

namespace kiln::nn {

std::vector<std::string> parse_lora_targets(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    KILN_CHECK(!name.empty(), "--lora-targets '", list, "' has an empty name; give module names such as "
               "q_proj,v_proj, or all-linear");
    out.push_back(name);
    start = comma + 1;
  }
  return out;
}

namespace {

// Whether a target names the Linear at `path` (whose last component is `leaf`), as peft matches.
bool names_layer(const std::string& target, const std::string& path, const std::string& leaf, const std::string& head) {
  return target == "all-linear" ? leaf != head : path == target || path.ends_with("." + target);
}

// Every Linear under root (not the adapters' own), by path.
std::vector<std::pair<std::string, Linear*>> linears(Module& root) {
  std::vector<std::pair<std::string, Linear*>> out;
  root.for_each_module([&](const std::string& prefix, Module& m) {
    auto* l = dynamic_cast<Linear*>(&m);
    const std::string path = prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1);
    if (l && !path.ends_with(".lora_A") && !path.ends_with(".lora_B")) out.emplace_back(path, l);
  });
  return out;
}

}  // namespace

std::vector<std::string> apply_lora(Module& root, const LoraConfig& config, Generator& init,
                                    std::shared_ptr<Generator> dropout_gen, const std::string& head) {
  KILN_CHECK(!config.targets.empty(), "LoRA needs target modules (--lora-targets q_proj,v_proj or all-linear)");
  std::vector<std::string> adapted, names;
  std::map<std::string, bool> used;
  for (auto& [path, linear] : linears(root)) {
    const std::string leaf = path.substr(path.rfind('.') + 1);
    names.push_back(leaf);
    bool any = false;
    for (const std::string& t : config.targets)
      if (names_layer(t, path, leaf, head)) any = used[t] = true;
    if (!any) continue;
    linear->attach_lora(config.rank, config.scale(), config.dropout, init, dropout_gen);
    adapted.push_back(path);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  for (const std::string& t : config.targets)
    KILN_CHECK(used[t], "LoRA target '", t, "' names no linear layer of this model (its linear layers: ", known,
               "; or all-linear)");
  for (auto& [name, p] : root.named_parameters()) p.set_requires_grad(is_lora_parameter(name));
  return adapted;
}

bool is_lora_parameter(const std::string& name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
}

NamedTensors lora_parameters(const Module& root) {
  NamedTensors out;
  for (const auto& [name, p] : root.named_parameters())
    if (is_lora_parameter(name)) out.emplace_back(name, p);
  return out;
}

void merge_lora(Module& root) {
  root.for_each_module([](const std::string&, Module& m) {
    if (auto* l = dynamic_cast<Linear*>(&m); l && l->lora_A) l->merge_lora();
  });
}

}  // namespace kiln::nn
