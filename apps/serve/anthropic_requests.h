// Anthropic's Messages API requests (POST /v1/messages and
// /v1/messages/count_tokens), read into the OpenAI chat request Kiln
// answers, so that clients written for it (the anthropic SDKs, Claude Code)
// run on kiln serve, as llama-server, vLLM and Ollama serve them. The body
// is translated into the OpenAI body that asks the same and read by
// /v1/chat/completions' parser.
#pragma once
#include <string>

#include "apps/serve/requests.h"

namespace kiln::serve {

// {"model", "max_tokens" (required; above 4,096 an answer still ends at
// 4,096 tokens, Kiln's bound on one), "messages" (user and assistant turns:
// a string, or blocks of text, tool_use, tool_result and thinking; images and
// documents refused: Kiln serves text models), "system" (a string or text
// blocks), "stop_sequences", "stream", "temperature", "top_p", "top_k",
// "tools" ({"name", "description", "input_schema"}; Anthropic's server tools
// refused), "tool_choice" ({"type": auto, any, tool with "name", or none;
// "disable_parallel_tool_use"}), "thinking" ({"type": "enabled"} or
// "disabled": the template's enable_thinking; "adaptive": its default),
// "output_config" ({"format": {"type": "json_schema", "schema"}}: the answer
// constrained to it; "effort"), and "metadata", "service_tier", "speed",
// "inference_geo", which change no answer here. cache_control marks are
// taken and change nothing (the prefix cache reuses whatever prompt it
// holds). `counting`: count_tokens' body, without max_tokens and stream.
ChatRequest parse_anthropic_messages(const std::string& body, bool counting = false);

}  // namespace kiln::serve
