#include "apps/recipes/run_record.h"

#include <filesystem>
#include <fstream>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/distributed/world.h"
#include "kiln/io/atomic_file.h"

namespace kiln::recipes {

namespace {

// Keeps the lines whose step is at most `step` (a resumed run rewrites what
// came after its checkpoint). Unreadable lines are dropped, not fatal: the
// record is a log, and the checkpoint is the run's source of truth.
void truncate_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
      kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

nlohmann::json by_category(const std::array<size_t, size_t(MemoryCategory::count)>& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t c = 0; c < bytes.size(); ++c) j[memory_category_name(MemoryCategory(c))] = bytes[c];
  return j;
}

}  // namespace

RunRecord::RunRecord(const std::string& out_dir, int64_t start_step, std::vector<Device> devices)
    : path_((std::filesystem::path(out_dir) / "metrics.jsonl").string()), devices_(std::move(devices)) {
  if (!distributed::is_rank0()) return;  // one record per run: rank 0 writes it
  std::filesystem::create_directories(out_dir);
  if (start_step > 0) truncate_after(path_, start_step);
  else std::filesystem::remove(path_);
  file_ = std::fopen(path_.c_str(), "a");
  KILN_CHECK(file_, "cannot open the run record ", path_, " for writing; check the permissions of ", out_dir);
}

RunRecord::~RunRecord() {
  if (file_) std::fclose(file_);
}

nlohmann::json RunRecord::memory_snapshot(const std::vector<Device>& devices) {
  nlohmann::json j = nlohmann::json::object();
  for (const Device& d : devices) {
    MemoryStats s = allocator_for(d).stats();
    j[d.str()] = {{"current", by_category(s.current_by_category)},
                  {"peak", by_category(s.peak_by_category)},
                  {"current_total", s.current},
                  {"peak_total", s.peak}};
  }
  return j;
}

void RunRecord::train_step(int64_t step, double loss, double lr, double items_per_second, double elapsed_seconds,
                           double step_seconds) {
  train_seconds_ += step_seconds;
  write({{"kind", "train"},
         {"step", step},
         {"loss", loss},
         {"lr", lr},
         {"items_per_s", items_per_second},
         {"elapsed_s", elapsed_seconds},
         {"train_s", train_seconds_},
         {"memory", memory_snapshot(devices_)}});
}

void RunRecord::eval(int64_t step, const nlohmann::json& fields) {
  nlohmann::json line{{"kind", "eval"}, {"step", step}};
  line.update(fields);
  write(line);
}

void RunRecord::write(const nlohmann::json& line) {
  if (!file_) return;
  // A NaN loss is written as null (JSON has no NaN); the run stops on it anyway.
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace kiln::recipes
