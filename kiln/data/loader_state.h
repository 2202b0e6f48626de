// Where a data loader stands, so a run can save it in a checkpoint and resume
// with bitwise the same batches. For epoch-based loaders (images) `position`
// counts the examples already served in `epoch`; for the token-window stream
// `epoch` stays 0 and `position` counts the batches drawn so far.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>

namespace kiln::data {

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t position = 0;
  bool operator==(const LoaderState&) const = default;
};

// {"epoch": e, "position": p}; from_json throws kiln::Error naming a missing
// or malformed field. Found by ADL: json j = state; j.get<LoaderState>().
void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);

}  // namespace kiln::data
