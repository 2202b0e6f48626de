// The run record: <run dir>/metrics.jsonl, one JSON object per line, written
// as training goes (each line flushed, so a page can plot a live run).
// The format is documented in docs/RUN_RECORD.md; keep it stable.
//
//   {"kind":"train","step":12,"loss":1.93,"lr":0.001,"items_per_s":5120.4,
//    "elapsed_s":3.2,"memory":{"cpu":{"current":{"weights":..,...},"peak":{..}}}}
//   {"kind":"eval","step":429,"val_accuracy":0.861}
//
// A resumed run appends, after dropping lines past the step it resumed
// from (written after that checkpoint by the run that stopped), so the
// record reads as one uninterrupted run.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/device.h"

namespace kiln::recipes {

class RunRecord {
 public:
  // Opens <out_dir>/metrics.jsonl; devices: whose allocators to report.
  RunRecord(const std::string& out_dir, int64_t start_step, std::vector<Device> devices);
  ~RunRecord();
  RunRecord(const RunRecord&) = delete;
  RunRecord& operator=(const RunRecord&) = delete;

  // `step_seconds`: this step's own time (data, forward, backward, update);
  // their sum is the line's train_s.
  void train_step(int64_t step, double loss, double lr, double items_per_second, double elapsed_seconds,
                  double step_seconds);
  // Seconds spent in this invocation's training steps so far: evaluation and
  // checkpoints excluded (what time-to-accuracy counts).
  double train_seconds() const { return train_seconds_; }
  // An evaluation at `step`: fields such as {"val_loss": 2.1}.
  void eval(int64_t step, const nlohmann::json& fields);
  const std::string& path() const { return path_; }

  // The allocators' current and peak bytes by category, per device.
  static nlohmann::json memory_snapshot(const std::vector<Device>& devices);

 private:
  void write(const nlohmann::json& line);
  std::string path_;
  std::vector<Device> devices_;
  std::FILE* file_ = nullptr;
  double train_seconds_ = 0;
};

}  // namespace kiln::recipes
