#include "apps/serve/tokens.h"

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/version.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

// A token's text may be part of a character: bad UTF-8 is replaced rather than failing the dump.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// What `ask` returns of the model; what the model refuses (no tokenizer, a bad id) is a 400 naming it.
template <typename Ask>
auto of_model(const GenerationTarget& t, Ask ask) {
  try {
    return ask();
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
}

}  // namespace

void answer_tokenize(const GenerationTarget& t, const TokenizeRequest& r, httplib::Response& res) {
  const json tokens = of_model(t, [&] {
    const std::string text =
        r.chat ? t.model.render_chat_json(r.chat->messages, r.chat->tools, r.chat->template_kwargs) : r.text;
    const std::vector<int32_t> ids = t.model.tokenize(text, r.add_special, r.parse_special);
    const std::vector<std::string> pieces = r.with_pieces ? t.model.token_pieces(ids) : std::vector<std::string>{};
    json out = json::array();
    for (size_t i = 0; i < ids.size(); ++i)
      out.push_back(r.with_pieces ? json{{"id", ids[i]}, {"piece", pieces[i]}} : json(ids[i]));
    return out;
  });
  res.set_content(dump({{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", t.model.context_length()}}),
                  "application/json");
}

void answer_detokenize(const GenerationTarget& t, const DetokenizeRequest& r, httplib::Response& res) {
  const std::string text = of_model(t, [&] { return t.model.detokenize(r.tokens); });
  res.set_content(dump({{"content", text}, {"prompt", text}}), "application/json");
}

void answer_tokenizer_info(const GenerationTarget& t, httplib::Response& res) {
  res.set_content(dump(of_model(t, [&] { return t.model.tokenizer_info(); })), "application/json");
}

void answer_props(const GenerationTarget& t, const std::string& path, int64_t slots, httplib::Response& res) {
  const json info = of_model(t, [&] { return t.model.tokenizer_info(); });
  const int64_t context = of_model(t, [&] { return t.model.context_length(); });
  const models::Sampling s = models::resolve_sampling({}, t.model.sampling_defaults(), kLlamaServerSampling);
  const json params = {{"n_predict", -1},
                       {"seed", 4294967295u},  // llama.cpp's LLAMA_DEFAULT_SEED: a new one each request
                       {"temperature", s.temperature},
                       {"top_k", s.top_k},
                       {"top_p", s.top_p},
                       {"min_p", s.min_p},
                       {"repeat_penalty", s.repetition_penalty},
                       {"repeat_last_n", s.repetition_window},
                       {"presence_penalty", s.presence_penalty},
                       {"frequency_penalty", s.frequency_penalty},
                       {"stop", t.model.default_stop()}};
  auto text = [&](const char* key) { return info.value(key, json()).is_string() ? info[key] : json(""); };
  const json props = {{"default_generation_settings", {{"params", params}, {"n_ctx", context}}},
                      {"total_slots", slots},
                      {"model_alias", t.name},
                      {"model_path", path},
                      {"modalities", {{"vision", false}, {"audio", false}}},
                      {"chat_template", text("chat_template")},
                      {"bos_token", text("bos_token")},
                      {"eos_token", text("eos_token")},
                      {"build_info", std::string("kiln ") + KILN_VERSION},
                      {"is_sleeping", false}};
  res.set_content(dump(props), "application/json");
}

}  // namespace kiln::serve
