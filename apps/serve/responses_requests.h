// OpenAI's Responses API request (POST /v1/responses), read into the chat
// request Kiln answers, so that clients written for it (the openai SDKs'
// responses.create, Codex, agent frameworks) run on kiln serve, as
// llama-server, vLLM and Ollama serve it. Kiln keeps no responses: a
// request carries its whole conversation (previous_response_id is refused).
#pragma once
#include <string>

#include "apps/serve/requests.h"

namespace kiln::serve {

// {"model", "input" (a string, or items: messages {"role", "content": a string or input_text/output_text parts},
// function_call {"call_id", "name", "arguments"}, function_call_output {"call_id", "output"}, reasoning
// {"content": reasoning_text parts}; images, files and audio refused: Kiln serves text models), "instructions" (the
// system turn), "max_output_tokens" (up to 4,096), "temperature", "top_p", "stream", "tools" (functions:
// {"type": "function", "name", "description", "parameters"}; the built-in tools refused), "tool_choice",
// "parallel_tool_calls", "text": {"format": text, json_object or json_schema}, and "reasoning", "store",
// "metadata", "user", "safety_identifier", "prompt_cache_key", "truncation" ("disabled"), which change no answer
// here. include takes "reasoning.encrypted_content" alone: a reasoning item's encrypted_content is its text as it
// is, and an input reasoning item without reasoning_text parts is read from it (Codex, storing nothing, sends it
// back so).
ChatRequest parse_openai_responses(const std::string& body);

}  // namespace kiln::serve
