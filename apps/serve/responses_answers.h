// OpenAI's Responses API answers (responses_requests.h): the response
// object, whole or as its stream's events, output item by output item.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/serve/part_stream.h"

namespace kiln::serve {

// A response's output items as its answer is read: a reasoning item ({"content": [reasoning_text]}), a message
// ({"content": [output_text]}) and function_call items ({"call_id", "name", "arguments"}), each opened where the
// answer turns to its kind and closed before the next; the stream's events say so (response.created and
// in_progress first, each item's added, part, delta, done events, then response.completed, or response.incomplete
// with incomplete_details max_output_tokens), each with its sequence_number. A whole answer is the same reading:
// response() after finish().
class ResponsesItems final : public PartStream {
 public:
  ResponsesItems(std::string id, std::string model, int64_t created_at, int64_t max_output_tokens);
  std::vector<nlohmann::json> start() override;
  std::vector<nlohmann::json> reasoning(const std::string& piece) override { return add("reasoning", piece, "", ""); }
  std::vector<nlohmann::json> text(const std::string& piece) override { return add("message", piece, "", ""); }
  std::vector<nlohmann::json> call(size_t index, const std::string& id, const std::string& name,
                                   const std::string& arguments, bool opening) override;
  std::vector<nlohmann::json> finish(const recipes::Completion& c, bool called) override;
  nlohmann::json error(const std::string& message) override;
  // The response object: in progress until finish(), then completed or incomplete, with its usage.
  const nlohmann::json& response() const { return response_; }

 private:
  std::vector<nlohmann::json> add(const std::string& kind, const std::string& piece, const std::string& call_id,
                                  const std::string& name);
  void close(std::vector<nlohmann::json>& events);
  nlohmann::json event(const std::string& type, nlohmann::json fields);
  nlohmann::json response_;
  std::string open_kind_;  // "": none open
  size_t open_call_ = 0;
  int64_t sequence_ = 0;
};

}  // namespace kiln::serve
