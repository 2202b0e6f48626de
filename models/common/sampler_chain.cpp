#include "models/common/sampler_chain.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kiln/core/error.h"

namespace kiln::models {

namespace {

constexpr float kGone = -std::numeric_limits<float>::infinity();

struct Candidate {
  int32_t id;
  float logit;
  float p = 0;
};
using Candidates = std::vector<Candidate>;

void sort_by_logit(Candidates& c) {
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
}

// Sorted, with each one's softmax probability among them (llama.cpp's softmax_impl).
void softmax(Candidates& c) {
  sort_by_logit(c);
  double sum = 0;
  for (Candidate& x : c) sum += x.p = std::exp(x.logit - c.front().logit);
  for (Candidate& x : c) x.p = float(x.p / sum);
}

void top_k(Candidates& c, int64_t k) {
  if (k <= 0 || size_t(k) >= c.size()) return;
  std::partial_sort(c.begin(), c.begin() + k, c.end(),
                    [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
  c.resize(size_t(k));
}

void top_p(Candidates& c, double p) {
  if (p >= 1) return;
  softmax(c);
  double sum = 0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i)
    if ((sum += c[i].p) >= p) {
      keep = i + 1;
      break;
    }
  c.resize(keep);
}

void min_p(Candidates& c, double p) {
  if (p <= 0) return;
  float most = kGone;
  for (const Candidate& x : c) most = std::max(most, x.logit);
  const float floor = most + std::log(float(p));
  std::erase_if(c, [floor](const Candidate& x) { return x.logit < floor; });
}

void temperature(Candidates& c, double t) {
  if (t > 0) {
    for (Candidate& x : c) x.logit = float(x.logit / t);
    return;
  }
  const auto most = std::max_element(c.begin(), c.end(), [](auto& a, auto& b) { return a.logit < b.logit; });
  for (auto it = c.begin(); it != c.end(); ++it)
    if (it != most) it->logit = kGone;
}

// llama.cpp's infill sampler (llama_sampler_infill): the end of the text
// where its probability is high against the text's, else the text's likely
// tokens, one whose bytes start another's merged into the likelier of the
// two, those under 0.2 dropped, then those under 1 / (tokens left + 1).
void infill(Candidates& c, const InfillVocabulary& v) {
  auto ends = [&](int32_t id) { return std::find(v.ends.begin(), v.ends.end(), id) != v.ends.end(); };
  softmax(c);
  float text_p = 0, end_p = 0;
  for (const Candidate& x : c) (ends(x.id) ? end_p : text_p) += x.p;
  if (3 * end_p * float(c.size()) > text_p) {
    std::erase_if(c, [&](const Candidate& x) { return !ends(x.id); });
    return;
  }
  std::vector<std::string> bytes(c.size());
  for (size_t i = 0; i < c.size(); ++i) bytes[i] = v.bytes(c[i].id);
  for (size_t i0 = 0; i0 < c.size(); ++i0)
    for (size_t i1 = 0; i1 < c.size(); ++i1) {
      if (c[i0].logit == kGone) break;
      if (i0 == i1 || c[i1].logit == kGone) continue;
      if (!bytes[i0].empty() && bytes[i1].starts_with(bytes[i0])) {
        const size_t into = c[i1].p > c[i0].p ? i1 : i0, from = into == i0 ? i1 : i0;
        c[into].p += c[from].p;
        c[from].logit = kGone, c[from].p = 0;
      }
    }
  auto keep_above = [&](float threshold) {
    size_t text = 0;
    std::erase_if(c, [&](const Candidate& x) { return x.p < threshold && !ends(x.id); });
    float sum = 0;
    for (const Candidate& x : c) sum += x.p, text += !ends(x.id);
    for (Candidate& x : c) x.p /= sum;
    return text;
  };
  const size_t text = keep_above(0.2f);
  if (text == 0) {  // no text is likely enough: the end
    KILN_CHECK(!v.ends.empty(), "the infill sampler needs the model's end-of-text token");
    c.assign(1, Candidate{v.ends.front(), 1.0f});
    return;
  }
  keep_above(1.0f / float(text + 1));
}

int32_t draw(Candidates& c, Generator& gen) {
  KILN_CHECK(!c.empty(), "sampling: no token is left to draw");
  float most = kGone;
  for (const Candidate& x : c) most = std::max(most, x.logit);
  double total = 0;
  for (Candidate& x : c) total += x.p = std::exp(x.logit - most);
  double u = gen.uniform() * total;
  for (const Candidate& x : c)
    if ((u -= x.p) < 0) return x.id;
  return c.back().id;
}

}  // namespace

int32_t sample_chain(std::span<const float> logits, std::span<const std::string> chain, const Sampling& s,
                     const InfillVocabulary& vocabulary, Generator& gen) {
  thread_local Candidates c;
  c.clear();
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i]});
  for (const std::string& name : chain) {
    if (name == "top_k")
      top_k(c, s.top_k);
    else if (name == "top_p")
      top_p(c, s.top_p);
    else if (name == "min_p")
      min_p(c, s.min_p);
    else if (name == "temperature")
      temperature(c, s.temperature);
    else if (name == "infill")
      infill(c, vocabulary);
    else
      KILN_CHECK(is_chain_sampler(name), "sampling: '", name, "' is not a sampler Kiln runs");
  }
  return draw(c, gen);
}

}  // namespace kiln::models
