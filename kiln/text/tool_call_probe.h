// What a chat template takes around tool calls, found by rendering a probe
// conversation through it (a user's question and an assistant's call to
// get_weather): the format detection's probe, and the form it takes a
// call's arguments in. tool_calls.h declares the public side
// (takes_text_arguments, arguments_as_taken, serving_variables), which
// tool_call_probe.cpp defines with these.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kiln/text/chat_template.h"

namespace kiln::text {

// The probe's messages, the call's arguments an object or (`text`) their JSON text.
nlohmann::ordered_json tool_call_probe_messages(bool text);
// The probe's one tool, get_weather(city).
const nlohmann::ordered_json& tool_call_probe_tools();
// `messages` rendered through `chat` with the probe's tools and the serving
// variables, or nothing where the template refuses them.
std::optional<std::string> rendered_tool_call_probe(const ChatTemplate& chat, const nlohmann::ordered_json& messages,
                                                    bool add_generation_prompt);

}  // namespace kiln::text
