#include "apps/serve/responses_answers.h"

namespace kiln::serve {

using nlohmann::json;

namespace {

// Where an item's text goes: a message's output_text, a reasoning item's reasoning_text; a call's arguments.
const char* part_type(const std::string& kind) { return kind == "message" ? "output_text" : "reasoning_text"; }
const char* delta_event(const std::string& kind) {
  return kind == "message" ? "response.output_text.delta" : "response.reasoning_text.delta";
}
const char* done_event(const std::string& kind) {
  return kind == "message" ? "response.output_text.done" : "response.reasoning_text.done";
}

json usage_of(const recipes::Completion& c) {
  return {{"input_tokens", c.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", c.cached_tokens}}},
          {"output_tokens", c.completion_tokens},
          {"total_tokens", c.prompt_tokens + c.completion_tokens}};
}

}  // namespace

ResponsesItems::ResponsesItems(std::string id, std::string model, int64_t created_at, int64_t max_output_tokens)
    : response_({{"id", std::move(id)},
                 {"object", "response"},
                 {"created_at", created_at},
                 {"status", "in_progress"},
                 {"model", std::move(model)},
                 {"output", json::array()},
                 {"usage", nullptr},
                 {"error", nullptr},
                 {"incomplete_details", nullptr},
                 {"max_output_tokens", max_output_tokens},
                 {"previous_response_id", nullptr},
                 {"store", false},
                 {"text", {{"format", {{"type", "text"}}}}}}) {}

json ResponsesItems::event(const std::string& type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return fields;
}

std::vector<json> ResponsesItems::start() {
  return {event("response.created", {{"response", response_}}),
          event("response.in_progress", {{"response", response_}})};
}

void ResponsesItems::close(std::vector<json>& events) {
  if (open_kind_.empty()) return;
  const size_t index = response_["output"].size() - 1;
  json& item = response_["output"][index];
  const std::string item_id = item["id"];
  if (open_kind_ == "function_call") {
    events.push_back(event("response.function_call_arguments.done",
                           {{"item_id", item_id}, {"output_index", index}, {"arguments", item["arguments"]}}));
  } else {
    const json& part = item["content"][0];
    events.push_back(
        event(done_event(open_kind_),
              {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"text", part["text"]}}));
    events.push_back(event("response.content_part.done",
                           {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
  }
  item["status"] = "completed";
  // The reasoning's text as it is (Kiln has no key to hide it): what a client storing nothing gives back.
  if (open_kind_ == "reasoning") item["encrypted_content"] = item["content"][0]["text"];
  events.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
  open_kind_.clear();
}

std::vector<json> ResponsesItems::add(const std::string& kind, const std::string& piece, const std::string& call_id,
                                      const std::string& name) {
  std::vector<json> events;
  const bool opening = kind != open_kind_ || !call_id.empty();  // (a new call opens an item even after another call)
  if (opening) {
    close(events);
    open_kind_ = kind;
    const size_t index = response_["output"].size();
    const std::string prefix = kind == "message" ? "msg_" : kind == "reasoning" ? "rs_" : "fc_";
    json item = {{"id", prefix + response_["id"].get<std::string>().substr(5) + "_" + std::to_string(index)},
                 {"type", kind},
                 {"status", "in_progress"}};
    if (kind == "function_call") {
      item.update({{"call_id", call_id}, {"name", name}, {"arguments", ""}});
    } else {
      item["content"] = json::array();
      if (kind == "message") item.update({{"role", "assistant"}});
      if (kind == "reasoning") item["summary"] = json::array();
    }
    events.push_back(event("response.output_item.added", {{"output_index", index}, {"item", item}}));
    if (kind != "function_call") {
      json part = {{"type", part_type(kind)}, {"text", ""}};
      if (kind == "message") part["annotations"] = json::array();
      events.push_back(event("response.content_part.added",
                             {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
      item["content"].push_back(std::move(part));
    }
    response_["output"].push_back(std::move(item));
  }
  if (piece.empty()) return events;
  const size_t index = response_["output"].size() - 1;
  json& item = response_["output"][index];
  if (kind == "function_call") {
    item["arguments"] = item["arguments"].get<std::string>() + piece;
    events.push_back(event("response.function_call_arguments.delta",
                           {{"item_id", item["id"]}, {"output_index", index}, {"delta", piece}}));
  } else {
    json& part = item["content"][0];
    part["text"] = part["text"].get<std::string>() + piece;
    json delta = {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"delta", piece}};
    if (kind == "message") delta["logprobs"] = json::array();
    events.push_back(event(delta_event(kind), std::move(delta)));
  }
  return events;
}

std::vector<json> ResponsesItems::call(size_t index, const std::string& id, const std::string& name,
                                       const std::string& arguments, bool opening) {
  if (!opening && !(open_kind_ == "function_call" && open_call_ == index)) return {};  // (a closed call's: none come)
  open_call_ = index;
  return add("function_call", arguments, opening ? id : "", name);
}

std::vector<json> ResponsesItems::finish(const recipes::Completion& c, bool) {
  std::vector<json> events;
  if (response_["output"].empty()) events = add("message", "", "", "");  // an empty answer is an empty message
  close(events);
  const bool cut = c.finish_reason == "length";
  response_["status"] = cut ? "incomplete" : "completed";
  if (cut) response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  response_["usage"] = usage_of(c);
  events.push_back(event(cut ? "response.incomplete" : "response.completed", {{"response", response_}}));
  return events;
}

json ResponsesItems::error(const std::string& message) {
  return event("error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}});
}

}  // namespace kiln::serve
