// The tokenizer endpoints of llama-server and vLLM: POST /tokenize (text or
// a conversation as the model's token ids), POST /detokenize (ids back to
// text) and GET /tokenizer_info. Clients count tokens with them before they
// send a prompt; lm-evaluation-harness tokenizes through them. And
// llama-server's GET /props, which its web UI and clients read first.
#pragma once
#include <httplib.h>

#include "apps/serve/answers.h"
#include "apps/serve/requests.h"

namespace kiln::serve {

// {"tokens": [ids], "count", "max_model_len"}: llama-server's answer and vLLM's. with_pieces, as llama-server:
// [{"id", "piece"}], the pieces joining to the text.
void answer_tokenize(const GenerationTarget& target, const TokenizeRequest& request, httplib::Response& res);
// {"content": text, "prompt": text}: llama-server's name for it and vLLM's.
void answer_detokenize(const GenerationTarget& target, const DetokenizeRequest& request, httplib::Response& res);
// GET /tokenizer_info, vLLM's: {"eos_token", "bos_token", "pad_token", "chat_template", "model_max_length"}, what
// lm-evaluation-harness's remote tokenizer reads (with /tokenize and /detokenize) to tokenize as the server does.
void answer_tokenizer_info(const GenerationTarget& target, httplib::Response& res);
// GET /props, llama-server's: what /completion samples with where a request leaves it out
// (default_generation_settings: its params and n_ctx), the chat template, bos and eos, the model's name and
// path (`path`), `slots` completions decoded together, no image or audio input.
void answer_props(const GenerationTarget& target, const std::string& path, int64_t slots, httplib::Response& res);

}  // namespace kiln::serve
