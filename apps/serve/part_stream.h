// A streamed chat answer in an API that sends its content in typed parts, one after another: Anthropic's content
// blocks (anthropic_answers.h), the Responses API's output items (responses_answers.h). The answer's reader gives
// each piece its kind (reasoning, text, a call's arguments); the API's stream opens, fills and closes the parts.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/recipes/inference.h"

namespace kiln::serve {

class PartStream {
 public:
  virtual ~PartStream() = default;
  // Each returns the events to send, in order.
  virtual std::vector<nlohmann::json> start() = 0;
  virtual std::vector<nlohmann::json> reasoning(const std::string& piece) = 0;
  virtual std::vector<nlohmann::json> text(const std::string& piece) = 0;
  // A call's first piece (`opening`: with its id and name), or more of its arguments' JSON text.
  virtual std::vector<nlohmann::json> call(size_t index, const std::string& id, const std::string& name,
                                           const std::string& arguments, bool opening) = 0;
  // The open part closed, and the answer's end (`called`: it called tools).
  virtual std::vector<nlohmann::json> finish(const recipes::Completion& c, bool called) = 0;
  // A failure after the stream began.
  virtual nlohmann::json error(const std::string& message) = 0;
};

}  // namespace kiln::serve
