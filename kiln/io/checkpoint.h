// Training checkpoints: one directory per step under a run's out_dir.
//
//   <out_dir>/step_00000500/model.safetensors      weights
//                          /optimizer.safetensors  optimizer moments etc.
//                          /state.json             {"format": "kiln-checkpoint", "version": 1,
//                                                   "step": 500, "state": <caller's JSON>}
//
// A checkpoint is written into step_00000500.tmp/, every file fsynced, and
// only then is the directory renamed to step_00000500/. So a directory named
// step_<digits> is complete by construction, and a crash mid-save leaves only
// a .tmp directory that resume ignores. Only one process (rank 0) may write
// to an out_dir. See docs/CHECKPOINTS.md.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/safetensors.h"

namespace kiln {

// Saves the checkpoint for `step` (replacing an existing one for the same
// step). With keep_last > 0, afterwards deletes all but the newest keep_last
// complete checkpoints, and any leftover .tmp directories.
void save_checkpoint(const std::string& out_dir, int64_t step, const NamedTensors& model,
                     const NamedTensors& optimizer, const nlohmann::json& state, int keep_last = 0);

// The directory name for a step: "step_00000500".
std::string checkpoint_dir_name(int64_t step);

struct CheckpointInfo {
  int64_t step;
  std::string path;  // <out_dir>/step_...
};
// Complete checkpoints in out_dir, oldest first (empty if out_dir is absent).
std::vector<CheckpointInfo> list_checkpoints(const std::string& out_dir);
// The newest complete checkpoint's directory, if any. Incomplete (.tmp)
// directories and directories lacking any of the three files are skipped.
std::optional<std::string> latest_checkpoint(const std::string& out_dir);

struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, Tensor> model, optimizer;
  nlohmann::json state;  // exactly what was passed to save_checkpoint
};
// Loads and validates every file; a missing, corrupt or truncated file throws
// kiln::Error naming the file and the defect.
Checkpoint load_checkpoint(const std::string& dir);
// Only the caller's state JSON of a checkpoint (no tensors are read).
nlohmann::json load_checkpoint_state(const std::string& dir);

// Deletes all but the newest keep_last complete checkpoints (keep_last >= 1)
// and any leftover .tmp directories from crashed saves.
void prune_checkpoints(const std::string& out_dir, int keep_last);

}  // namespace kiln
