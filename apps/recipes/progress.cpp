#include "apps/recipes/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace kiln::recipes {

ProgressBar::ProgressBar(int64_t total, int64_t first, std::string unit, bool enabled)
    : total_(total), first_(first), unit_(std::move(unit)), enabled_(enabled), tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double ProgressBar::items_per_second() const {
  double s = elapsed_seconds();
  return s > 0 ? double(items_) / s : 0.0;
}

std::string format_duration(double s) {
  char buf[32];
  int total = int(std::lround(s));
  if (total >= 3600) std::snprintf(buf, sizeof buf, "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
  else std::snprintf(buf, sizeof buf, "%d:%02d", total / 60, total % 60);
  return buf;
}

std::string format_rate(double r) {
  char buf[32];
  if (r >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", r / 1e6);
  else if (r >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", r / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", r);
  return buf;
}

void ProgressBar::update(int64_t step, double loss, int64_t items) {
  items_ += items;
  if (!enabled_) return;
  const int64_t done = step - first_ + 1, todo = total_ - first_;
  const double frac = todo > 0 ? double(done) / double(todo) : 1.0;
  const double eta = frac > 0 ? elapsed_seconds() * (1.0 - frac) / frac : 0.0;
  const int64_t decile = int64_t(frac * 10);
  if (!tty_ && decile == last_printed_decile_ && step + 1 != total_) return;
  last_printed_decile_ = decile;
  const int width = 30;
  std::string bar(size_t(width * frac), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "%s[%s] step %lld/%lld  loss %.4f  %s %s/s  ETA %s%s", tty_ ? "\r" : "", bar.c_str(),
               (long long)(step + 1), (long long)total_, loss, format_rate(items_per_second()).c_str(),
               unit_.c_str(), format_duration(eta).c_str(), tty_ ? "   " : "\n");
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && tty_) std::fprintf(stderr, "\n");
}

}  // namespace kiln::recipes
