#include "apps/serve/tokens.h"

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

// A token's text may be part of a character: bad UTF-8 is replaced rather than failing the dump.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

void answer_tokenize(const GenerationTarget& t, const TokenizeRequest& r, httplib::Response& res) {
  json tokens = json::array();
  int64_t count = 0;
  try {
    const std::string text =
        r.chat ? t.model.render_chat_json(r.chat->messages, r.chat->tools, r.chat->template_kwargs) : r.text;
    const std::vector<int32_t> ids = t.model.tokenize(text, r.add_special);
    count = int64_t(ids.size());
    const std::vector<std::string> pieces = r.with_pieces ? t.model.token_pieces(ids) : std::vector<std::string>{};
    for (size_t i = 0; i < ids.size(); ++i)
      tokens.push_back(r.with_pieces ? json{{"id", ids[i]}, {"piece", pieces[i]}} : json(ids[i]));
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
  res.set_content(dump({{"tokens", tokens}, {"count", count}, {"max_model_len", t.model.context_length()}}),
                  "application/json");
}

void answer_detokenize(const GenerationTarget& t, const DetokenizeRequest& r, httplib::Response& res) {
  std::string text;
  try {
    text = t.model.detokenize(r.tokens);
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
  res.set_content(dump({{"content", text}, {"prompt", text}}), "application/json");
}

void answer_tokenizer_info(const GenerationTarget& t, httplib::Response& res) {
  json info;
  try {
    info = t.model.tokenizer_info();
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
  res.set_content(dump(info), "application/json");
}

}  // namespace kiln::serve
