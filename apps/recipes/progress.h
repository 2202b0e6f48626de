// A one-line progress bar: step, loss, throughput and ETA. On a terminal it
// redraws in place; in a log (CI, pipes) it prints a line every 10%.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace kiln::recipes {

class ProgressBar {
 public:
  ProgressBar(int64_t total_steps, int64_t first_step, std::string unit, bool enabled);
  // items: images or tokens processed in this step.
  void update(int64_t step, double loss, int64_t items);
  void finish();
  double items_per_second() const;
  double elapsed_seconds() const;

 private:
  int64_t total_, first_, last_printed_decile_ = -1;
  std::string unit_;
  bool enabled_, tty_;
  int64_t items_ = 0;
  std::chrono::steady_clock::time_point start_;
};

std::string format_duration(double seconds);
std::string format_rate(double per_second);

}  // namespace kiln::recipes
