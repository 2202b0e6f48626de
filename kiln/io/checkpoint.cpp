#include "kiln/io/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "kiln/io/atomic_file.h"
#include "kiln/io/text_file.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kFormat = "kiln-checkpoint";
constexpr int kVersion = 1;

// "step_<digits>" -> step; anything else (including .tmp/.old leftovers) -> nullopt.
std::optional<int64_t> parse_step_name(const std::string& name, const std::string& suffix = "") {
  const std::string prefix = "step_";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  auto [ptr, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return step;
}

bool has_all_files(const fs::path& dir) {
  std::error_code ec;
  for (const char* f : {kModelFile, kOptimizerFile, kStateFile})
    if (!fs::is_regular_file(dir / f, ec)) return false;
  return true;
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  KILN_CHECK(!ec, "cannot delete ", p.string(), ": ", ec.message());
}

void rename_dir(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  KILN_CHECK(!ec, "cannot rename ", from.string(), " to ", to.string(), ": ", ec.message());
}


// Parses and checks state.json; returns the wrapper object.
nlohmann::json read_state(const fs::path& dir) {
  const std::string path = (dir / kStateFile).string();
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(path, ec), "checkpoint ", dir.string(), ": ", kStateFile,
             " is missing, so the checkpoint is incomplete or not a Kiln checkpoint; resume from another one");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL("checkpoint ", path, ": not valid JSON (", e.what(), "); the file is corrupt");
  }
  KILN_CHECK(j.is_object() && j.value("format", "") == kFormat, "checkpoint ", path,
             ": not a Kiln checkpoint state (expected \"format\": \"", kFormat, "\")");
  KILN_CHECK(j.contains("version") && j["version"].is_number_integer() && j["version"].get<int>() == kVersion,
             "checkpoint ", path, ": unsupported version ", j.value("version", nlohmann::json()).dump(),
             " (this Kiln reads version ", kVersion, ")");
  KILN_CHECK(j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= 0, "checkpoint ",
             path, ": \"step\" is missing or not a non-negative integer");
  KILN_CHECK(j.contains("state"), "checkpoint ", path, ": \"state\" is missing");
  return j;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  KILN_CHECK(step >= 0, "checkpoint step must be non-negative, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

void save_checkpoint(const std::string& out_dir, int64_t step, const NamedTensors& model,
                     const NamedTensors& optimizer, const nlohmann::json& state, int keep_last) {
  KILN_CHECK(keep_last >= 0, "save_checkpoint: keep_last must be >= 0 (0 keeps all), got ", keep_last);
  std::string state_text;
  try {
    state_text = nlohmann::json{{"format", kFormat}, {"version", kVersion}, {"step", step}, {"state", state}}.dump(2);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL("save_checkpoint: the state cannot be written as JSON (", e.what(), ")");
  }
  const fs::path root(out_dir);
  const fs::path final_dir = root / checkpoint_dir_name(step);
  const fs::path tmp_dir = root / (checkpoint_dir_name(step) + ".tmp");
  std::error_code ec;
  fs::create_directories(root, ec);
  KILN_CHECK(!ec, "cannot create checkpoint directory ", out_dir, ": ", ec.message());
  remove_tree(tmp_dir);  // debris from a save that crashed at this very step
  fs::create_directory(tmp_dir, ec);
  KILN_CHECK(!ec, "cannot create ", tmp_dir.string(), ": ", ec.message());

  try {
    const std::map<std::string, std::string> meta{{"format", "pt"}, {"step", std::to_string(step)}};
    save_safetensors((tmp_dir / kModelFile).string(), model, meta);
    save_safetensors((tmp_dir / kOptimizerFile).string(), optimizer, meta);
    write_file_atomic((tmp_dir / kStateFile).string(), state_text);
    fsync_directory(tmp_dir.string());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);  // never leave a half-written checkpoint behind
    throw;
  }

  // Publishing is the one rename below. Re-saving an existing step moves the
  // old directory aside first, since rename cannot replace a non-empty one.
  const fs::path old_dir = root / (checkpoint_dir_name(step) + ".old");
  const bool replacing = fs::exists(final_dir, ec);
  if (replacing) {
    remove_tree(old_dir);
    rename_dir(final_dir, old_dir);
  }
  rename_dir(tmp_dir, final_dir);
  fsync_directory(root.string());
  if (replacing) remove_tree(old_dir);
  if (keep_last > 0) prune_checkpoints(out_dir, keep_last);
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& out_dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    auto step = parse_step_name(entry.path().filename().string());
    if (!step || !entry.is_directory(ec) || !has_all_files(entry.path())) continue;
    out.push_back({*step, entry.path().string()});
  }
  KILN_CHECK(!ec, "cannot list checkpoint directory ", out_dir, ": ", ec.message());
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& out_dir) {
  auto all = list_checkpoints(out_dir);
  if (all.empty()) return std::nullopt;
  return all.back().path;
}

nlohmann::json load_checkpoint_state(const std::string& dir) { return read_state(dir).at("state"); }

Checkpoint load_checkpoint(const std::string& dir) {
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), "checkpoint ", dir, ": no such directory");
  Checkpoint ck;
  nlohmann::json wrapper = read_state(dir);
  ck.step = wrapper["step"].get<int64_t>();
  fs::path name = fs::path(dir).filename().empty() ? fs::path(dir).parent_path().filename() : fs::path(dir).filename();
  auto dir_step = parse_step_name(name.string());
  KILN_CHECK(!dir_step || *dir_step == ck.step, "checkpoint ", dir, ": ", kStateFile, " says step ", ck.step,
             " but the directory is named for step ", dir_step.value_or(0), "; the files were mixed up");
  ck.state = std::move(wrapper["state"]);
  try {
    ck.model = load_safetensors((fs::path(dir) / kModelFile).string()).tensors;
    ck.optimizer = load_safetensors((fs::path(dir) / kOptimizerFile).string()).tensors;
  } catch (const Error& e) {
    KILN_FAIL("cannot load checkpoint ", dir, ": ", e.what(), "; delete it or resume from an older checkpoint");
  }
  return ck;
}

void prune_checkpoints(const std::string& out_dir, int keep_last) {
  KILN_CHECK(keep_last >= 1, "prune_checkpoints: keep_last must be >= 1, got ", keep_last);
  auto all = list_checkpoints(out_dir);
  for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) remove_tree(all[i].path);
  // Leftovers of crashed saves. Safe because only one process writes here.
  std::error_code ec;
  std::vector<fs::path> debris;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (parse_step_name(name, ".tmp") || parse_step_name(name, ".old")) debris.push_back(entry.path());
  }
  for (const auto& p : debris) remove_tree(p);
}

}  // namespace kiln
