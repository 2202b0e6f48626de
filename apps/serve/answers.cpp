#include "apps/serve/answers.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "apps/recipes/chat_answer.h"
#include "apps/serve/anthropic_answers.h"
#include "apps/serve/infill_prompt.h"
#include "apps/serve/ollama_answers.h"
#include "apps/serve/responses_answers.h"
#include "kiln/core/error.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

// Token texts are whole characters only where the tokenizer's pieces are:
// a byte of a character could reach a client, so bad UTF-8 is replaced
// rather than failing the dump.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json utf8_bytes(const std::string& s) {
  json bytes = json::array();
  for (unsigned char c : s) bytes.push_back(int(c));
  return bytes;
}

// A token's log-probability as OpenAI's chat logprobs spell it (and llama-server's, with the token's id).
json token_score(const recipes::TokenScore& t, bool with_id) {
  json out = {{"token", t.token}, {"logprob", t.logprob}, {"bytes", utf8_bytes(t.bytes)}};
  if (with_id) out["id"] = t.id;
  return out;
}

// How an answer is spelled: the two endpoints' shapes.
struct Shape {
  bool chat = false;
  bool logprobs = false;  // the request asked for the tokens' log-probabilities
  const text::ToolCallFormat* tools = nullptr;  // a chat whose tool calls are read, in this format
  nlohmann::ordered_json tool_list;             // the request's tools (their parameters' types read XML-style values)
  recipes::ReasoningStart reasoning = {};       // a chat whose reasoning is split off (format: its marks)
  // Whose API answers: OpenAI's; llama-server's /completion ({"content", "stop"} events, a last one with the
  // stats); Ollama's /api/chat and /api/generate (NDJSON lines, ollama_answers.h); Anthropic's /v1/messages and
  // OpenAI's /v1/responses (typed parts, named events: part_stream.h).
  enum class Api { openai, llama, ollama, anthropic, responses };
  Api api = Api::openai;
  // llama-server's response_fields: its answer cut to these ("a/b": a's b, under the name "a/b"); empty: all.
  std::vector<std::string> response_fields;
  json only_asked(const json& answer) const {
    if (response_fields.empty()) return answer;
    json kept = json::object();
    for (const std::string& path : response_fields) {
      const json* at = &answer;
      for (size_t from = 0; at && from <= path.size();) {
        const size_t slash = std::min(path.find('/', from), path.size());
        const std::string key = path.substr(from, slash - from);
        at = at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
        from = slash + 1;
      }
      if (at) kept[path] = *at;
    }
    return kept;
  }
  std::string object() const { return chat ? "chat.completion" : "text_completion"; }
  std::string chunk_object() const { return chat ? "chat.completion.chunk" : "text_completion"; }

  // logprobs of `entries`: chat's content list, or the completions' token
  // columns (text_offset counted from `offset` characters into the answer).
  json logprobs_of(const std::vector<recipes::TokenLogprob>& entries, int64_t offset) const {
    if (!logprobs) return nullptr;
    if (chat) return {{"content", scored_tokens(entries, false)}};
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
    for (const auto& e : entries) {
      tokens.push_back(e.token);
      token_logprobs.push_back(e.logprob);
      json top = json::object();
      for (const auto& t : e.top) top[t.token] = t.logprob;
      top_logprobs.push_back(top);
      offsets.push_back(offset);
      offset += int64_t(e.token.size());
    }
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", offsets}};
  }
  // A whole answer's choice, or a stream event's (`delta`: chat's changes).
  json choice(const std::string& text, const json& finish, const json& logprobs, bool whole, bool first) const {
    if (!chat) return {{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish}};
    json message = json::object();
    if (whole || first) message["role"] = "assistant";
    if (whole || first || !text.empty()) message["content"] = text;
    return {{"index", 0}, {whole ? "message" : "delta", message}, {"logprobs", logprobs}, {"finish_reason", finish}};
  }
  // llama-server's /completion answer (in a stream, the last event: its content then "").
  static json llama_answer(const recipes::Completion& c, const std::string& content, const std::string& model,
                           const std::string& prompt, const JobTimes& times) {
    const char* stop_type = c.finish_reason == "length" ? "limit" : c.stop_string.empty() ? "eos" : "word";
    auto ms = [](auto from, auto to) { return std::chrono::duration<double, std::milli>(to - from).count(); };
    const double prompt_ms = ms(times.prompt_started, times.first_token),
                 predicted_ms = ms(times.first_token, times.finished);
    auto per_second = [](int64_t n, double ms) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
    const int64_t computed = c.prompt_tokens - c.cached_tokens;  // (llama-server's prompt_n: what its cache lacked)
    const json timings = {{"cache_n", c.cached_tokens},
                          {"prompt_n", computed},
                          {"prompt_ms", prompt_ms},
                          {"prompt_per_second", per_second(computed, prompt_ms)},
                          {"predicted_n", c.completion_tokens},
                          {"predicted_ms", predicted_ms},
                          {"predicted_per_second", per_second(c.completion_tokens, predicted_ms)}};
    return {{"index", 0},
            {"content", content},
            {"id_slot", 0},
            {"stop", true},
            {"model", model},
            {"tokens_predicted", c.completion_tokens},
            {"tokens_evaluated", c.prompt_tokens},
            {"prompt", prompt},
            {"truncated", false},
            {"stop_type", stop_type},
            {"stopping_word", c.stop_string},
            // the positions its cache holds: the prompt and every sampled token but the last
            {"tokens_cached", c.prompt_tokens + std::max<int64_t>(c.completion_tokens - 1, 0)},
            {"timings", timings}};
  }
  // Each token's text, bytes and log-probability, and its position's most likely tokens the same way: chat's
  // logprobs content, and with the tokens' ids, llama-server's completion_probabilities (n_probs).
  static json scored_tokens(const std::vector<recipes::TokenLogprob>& entries, bool with_ids) {
    json out = json::array();
    for (const auto& e : entries) {
      json top = json::array();
      for (const auto& t : e.top) top.push_back(token_score(t, with_ids));
      out.push_back(token_score(e, with_ids));
      out.back()["top_logprobs"] = std::move(top);
    }
    return out;
  }
  bool reads() const { return tools || reasoning.format; }
  // The whole answer, read where it is read (thinking, text, calls).
  recipes::ChatAnswer whole_reading(const recipes::Completion& c) const {
    return reads() ? read(c.text, true) : recipes::ChatAnswer{"", {c.text, {}}};
  }
  // Anthropic's whole message: thinking, text, and the calls as tool_use blocks.
  json anthropic_answer(const recipes::Completion& c, const std::string& id, const std::string& model) const {
    const recipes::ChatAnswer r = whole_reading(c);
    json uses = json::array();
    for (size_t i = 0; i < r.answer.calls.size(); ++i)
      uses.push_back(tool_use_block(call_id(r.answer.calls[i], i, id), r.answer.calls[i]));
    return anthropic_message(id, model, r.reasoning, r.answer.content, uses, c);
  }
  // The Responses API's whole response: the answer's reading through the stream's items.
  json responses_answer(const recipes::Completion& c, ResponsesItems items, const std::string& id) const {
    const recipes::ChatAnswer r = whole_reading(c);
    if (!r.reasoning.empty()) items.reasoning(r.reasoning);
    if (!r.answer.content.empty()) items.text(r.answer.content);
    for (size_t i = 0; i < r.answer.calls.size(); ++i)
      items.call(i, call_id(r.answer.calls[i], i, id), r.answer.calls[i].name, r.answer.calls[i].arguments, true);
    items.finish(c, !r.answer.calls.empty());
    return items.response();
  }
  // The APIs that stream typed parts: their stream's state (null: the others).
  std::unique_ptr<PartStream> part_stream(const std::string& id, const std::string& model, int64_t created,
                                          int64_t max_tokens) const {
    if (api == Api::anthropic) return std::make_unique<AnthropicBlocks>(id, model);
    if (api == Api::responses) return std::make_unique<ResponsesItems>(id, model, created, max_tokens);
    return nullptr;
  }
  // Ollama's fields for text: /api/chat's message content, /api/generate's response.
  json ollama_text(const std::string& text) const { return {{chat ? "content" : "response", text}}; }
  // Ollama's fields for a whole answer: its text, and where it is read, the thinking and the tool calls apart.
  json ollama_answer(const std::string& text) const {
    if (!reads()) return ollama_text(text);
    const recipes::ChatAnswer r = read(text, true);
    json fields = ollama_text(r.answer.content);
    if (!r.reasoning.empty()) fields["thinking"] = r.reasoning;
    if (!r.answer.calls.empty()) fields["tool_calls"] = ollama_tool_calls(r.answer.calls);
    return fields;
  }
  recipes::ChatAnswer read(const std::string& text, bool whole) const {
    return recipes::read_chat_answer(text, whole, reasoning, tools, tool_list);
  }
  // A whole chat answer that is read: reasoning_content where it reasoned,
  // content (null when only calls), message.tool_calls, and finish_reason
  // "tool_calls" for an answer that ended by itself after calling.
  json read_choice(const recipes::Completion& c, const json& logprobs, const std::string& id) const {
    const recipes::ChatAnswer r = read(c.text, true);
    json message = {{"role", "assistant"}};
    message["content"] = r.answer.calls.empty() || !r.answer.content.empty() ? json(r.answer.content) : json();
    if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
    if (!r.answer.calls.empty())
      message["tool_calls"] = json::parse(text::tool_calls_json(*tools, r.answer.calls, call_seed(id)).dump());
    return {{"index", 0}, {"message", message}, {"logprobs", logprobs}, {"finish_reason", finish_reason(c, r.answer)}};
  }
  static uint64_t call_seed(const std::string& answer_id) { return std::hash<std::string>()(answer_id); }
  static std::string finish_reason(const recipes::Completion& c, const text::ToolAnswer& answer) {
    return !answer.calls.empty() && c.finish_reason == "stop" ? "tool_calls" : c.finish_reason;
  }
  std::string call_id(const text::ToolCall& call, size_t index, const std::string& answer_id) const {
    return text::tool_call_id(*tools, call, call_seed(answer_id) + index);
  }
  // A call, or its first stream event (`opening`: the id, the type and the name with it).
  json tool_call(const text::ToolCall& call, size_t index, const std::string& answer_id, bool opening) const {
    json out = {{"index", index}};
    if (opening) {
      out["id"] = call_id(call, index, answer_id);
      out["type"] = "function";
      out["function"] = {{"name", call.name}, {"arguments", call.arguments}};
    } else {
      out["function"] = {{"arguments", call.arguments}};
    }
    return out;
  }
};

// What a stream has sent of an answer that is read (reasoning, tool
// calls): each event sends what reading the longer text adds (the readers
// only extend), so the events add up to the whole answer's reading.
struct ReadStream {
  std::string text;     // the answer so far
  recipes::ChatAnswer sent;  // what the events have carried

  // The events for `piece` (`whole`: the answer is over): reasoning, content, new calls and their arguments.
  std::vector<json> deltas(const Shape& shape, const std::string& piece, bool whole, const std::string& answer_id) {
    text += piece;
    recipes::ChatAnswer now = shape.read(text, whole);
    std::vector<json> out;
    if (now.reasoning.size() > sent.reasoning.size())
      out.push_back({{"reasoning_content", now.reasoning.substr(sent.reasoning.size())}});
    if (now.answer.content.size() > sent.answer.content.size())
      out.push_back({{"content", now.answer.content.substr(sent.answer.content.size())}});
    const auto& calls = now.answer.calls;
    for (size_t i = 0; i < calls.size(); ++i) {
      const bool opening = i >= sent.answer.calls.size();
      const size_t had = opening ? 0 : sent.answer.calls[i].arguments.size();
      if (!opening && calls[i].arguments.size() == had) continue;
      text::ToolCall fragment{calls[i].name, calls[i].arguments.substr(had)};
      out.push_back({{"tool_calls", json::array({shape.tool_call(fragment, i, answer_id, opening)})}});
    }
    sent = std::move(now);
    return out;
  }
};

// OpenAI's usage; prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache gave (as OpenAI and vLLM
// count them).
json usage(std::pair<int64_t, int64_t> prompt_and_cached, int64_t completion) {
  const auto [prompt, cached] = prompt_and_cached;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// What a stream has sent of one choice.
struct ChoiceStream {
  bool first = true;           // its first event is still to send
  int64_t text_sent = 0;       // characters (the completions' logprobs count text_offset in them)
  ReadStream read;             // a chat that is read: what its events have carried
  bool done = false;           // its finish event is sent
  recipes::Completion result;  // once done
  std::unique_ptr<PartStream> parts;  // Anthropic's and the Responses API's: the parts its events have opened
};

// What a choice's job holds for its stream at a wake: its next piece of text, the log-probabilities made with it.
struct JobNews {
  std::string piece;
  std::vector<recipes::TokenLogprob> logprobs;
  bool more = false;  // pieces still queued after this one
  bool finished = false;
  recipes::Completion result;  // once finished
  JobTimes times;              // once finished
};

// The key a choice's tool calls draw their ids from: the answer's id for the first choice, as with one.
std::string choice_key(const std::string& answer_id, size_t choice) {
  return choice == 0 ? answer_id : answer_id + "." + std::to_string(choice);
}

// The prompt tokens of an answer's choices, and those of them the prefix cache gave: each prompt's once (its n
// choices share it).
std::pair<int64_t, int64_t> prompt_tokens(const std::vector<recipes::Completion>& choices, int64_t n) {
  int64_t total = 0, cached = 0;
  for (size_t i = 0; i < choices.size(); i += size_t(n))
    total += choices[i].prompt_tokens, cached += choices[i].cached_tokens;
  return {total, cached};
}

// Queues each prompt (its token ids, where `prompt_ids` gives them) as
// fields.n jobs (the j-th seeded options.seed + j, its index i n + j) and answers as `shape` spells it: whole once all
// are finished, or streamed as server-sent events, the choices' events interleaved, each with its index.
void generate(const GenerationTarget& t, const std::vector<std::string>& prompts,
              const recipes::CompletionOptions& options, const GenerationFields& fields, const Shape& shape,
              httplib::Response& res, const std::vector<std::vector<int32_t>>& prompt_ids = {}) {
  const int64_t choices_asked = fields.n * int64_t(prompts.size());
  if (choices_asked > t.scheduler.max_queue())
    throw HttpError(400, std::to_string(choices_asked) + " completions (n times the prompts) are more than model '" +
                             t.name + "' queues (--max-queue " + std::to_string(t.scheduler.max_queue()) + ")");
  // A stream counts as open from its arrival, not its first token: cpp-httplib
  // ends chunked answers once stopped, so a stopping server must wait for
  // streams that are still queued too.
  struct OpenStream {
    std::atomic<int>& count;
    explicit OpenStream(std::atomic<int>& c) : count(c) { ++count; }
    ~OpenStream() { --count; }
  };
  auto open_stream = fields.stream ? std::make_shared<OpenStream>(t.open_streams) : nullptr;
  std::vector<std::shared_ptr<GenerationJob>> jobs;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int64_t j = 0; j < fields.n; ++j) {
      auto job = std::make_shared<GenerationJob>();
      job->prompt = prompts[p];
      job->options = options;
      if (!prompt_ids.empty()) job->options.prompt_ids = prompt_ids[p];
      job->options.seed = options.seed + uint64_t(j);
      job->streamed = fields.stream;
      if (!jobs.empty()) job->signal = jobs[0]->signal;
      jobs.push_back(std::move(job));
    }
  if (!t.scheduler.submit(jobs))
    throw HttpError(503, "model '" + t.name + "' is at its queue limit (--max-queue); retry shortly");
  auto cancel = [jobs] {
    for (const auto& job : jobs) job->cancelled = true;
  };
  JobSignal& signal = *jobs[0]->signal;
  const std::string id = (shape.api == Shape::Api::anthropic   ? "msg_"
                          : shape.api == Shape::Api::responses ? "resp_"
                          : shape.chat                         ? "chatcmpl-"
                                                               : "cmpl-") +
                         std::to_string(t.next_id++);
  const int64_t created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto envelope = [id, created, name = t.name](const std::string& object, json choices) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", name}, {"choices", std::move(choices)}};
  };
  const auto timeout = std::chrono::milliseconds(t.timeout_ms);
  // A plain answer waits for the end; a stream for every choice's first
  // token, so that one which cannot start in time is a 504 rather than a silent 200.
  {
    std::unique_lock<std::mutex> lock(signal.mutex);
    auto failed = [&] { return std::find_if(jobs.begin(), jobs.end(), [](const auto& j) { return bool(j->error); }); };
    if (!signal.changed.wait_for(lock, timeout, [&] {
          return failed() != jobs.end() || std::all_of(jobs.begin(), jobs.end(), [&](const auto& j) {
                   return j->finished || (fields.stream && j->started);
                 });
        })) {
      cancel();
      throw HttpError(504, "the completion was not " + std::string(fields.stream ? "started" : "finished") +
                               " within " + std::to_string(t.timeout_ms) + " ms (--request-timeout-ms)");
    }
    if (const auto it = failed(); it != jobs.end()) try {
        cancel();
        std::rethrow_exception((*it)->error);
      } catch (const Error& e) {  // the prompt could not start: too long, no tokens
        throw HttpError(400, e.what());
      }
  }
  if (!fields.stream && shape.api == Shape::Api::llama) {
    json answer = Shape::llama_answer(jobs[0]->result, jobs[0]->result.text, t.name, prompts[0], jobs[0]->times);
    if (shape.logprobs) answer["completion_probabilities"] = Shape::scored_tokens(jobs[0]->result.logprobs, true);
    return res.set_content(dump(shape.only_asked(answer)), "application/json");
  }
  if (!fields.stream && shape.api == Shape::Api::anthropic)
    return res.set_content(dump(shape.anthropic_answer(jobs[0]->result, id, t.name)), "application/json");
  if (!fields.stream && shape.api == Shape::Api::responses)
    return res.set_content(
        dump(shape.responses_answer(jobs[0]->result, ResponsesItems(id, t.name, created, fields.max_tokens), id)),
        "application/json");
  if (!fields.stream && shape.api == Shape::Api::ollama) {
    const recipes::Completion& c = jobs[0]->result;
    return res.set_content(dump(ollama_done(t.name, shape.chat, shape.ollama_answer(c.text), c, jobs[0]->times)),
                           "application/json");
  }
  if (!fields.stream) {
    json choices = json::array();
    std::vector<recipes::Completion> results;
    int64_t made = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const recipes::Completion& c = results.emplace_back(jobs[i]->result);
      const json logprobs = shape.logprobs_of(c.logprobs, 0);
      json choice = shape.reads() ? shape.read_choice(c, logprobs, choice_key(id, i))
                                  : shape.choice(c.text, c.finish_reason, logprobs, /*whole=*/true, false);
      choice["index"] = i;
      choices.push_back(std::move(choice));
      made += c.completion_tokens;
    }
    json out = envelope(shape.object(), std::move(choices));
    out["usage"] = usage(prompt_tokens(results, fields.n), made);
    res.set_content(dump(out), "application/json");
    return;
  }
  // Server-sent events: a chunk per piece of text (a chat's first names the
  // role), then the finish reason, for each choice; then the usage if asked, then [DONE].
  auto streams = std::make_shared<std::vector<ChoiceStream>>(jobs.size());
  for (ChoiceStream& s : *streams) s.parts = shape.part_stream(id, t.name, created, fields.max_tokens);
  const bool ollama = shape.api == Shape::Api::ollama;
  res.set_chunked_content_provider(
      ollama ? "application/x-ndjson" : "text/event-stream",
      [jobs, cancel, shape, envelope, timeout, streams, id, include_usage = fields.include_usage, model = t.name,
       prompt = prompts[0], n = fields.n](size_t, httplib::DataSink& sink) {
        const bool ollama = shape.api == Shape::Api::ollama, parts = bool((*streams)[0].parts);
        auto send = [&](const json& j) {  // (the typed parts' APIs name each event)
          const std::string line = ollama  ? dump(j) + "\n"
                                   : parts ? "event: " + j.value("type", "") + "\ndata: " + dump(j) + "\n\n"
                                           : "data: " + dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        auto send_all = [&](const std::vector<json>& events) {
          return std::all_of(events.begin(), events.end(), [&](const json& e) { return send(e); });
        };
        auto event = [&](size_t i, const std::string& text, const json& finish,
                         const std::vector<recipes::TokenLogprob>& lps) {
          ChoiceStream& s = (*streams)[i];
          if (shape.api == Shape::Api::llama) {
            json piece = {{"index", i}, {"content", text}, {"stop", false}, {"id_slot", 0}};
            if (shape.logprobs && !lps.empty()) piece["completion_probabilities"] = Shape::scored_tokens(lps, true);
            return send(piece);
          }
          if (ollama) return send(ollama_piece(model, shape.chat, shape.ollama_text(text)));
          if (parts) return send_all(s.parts->text(text));
          json choice = shape.choice(text, finish, shape.logprobs_of(lps, s.text_sent), false, s.first);
          choice["index"] = i;
          s.first = false;
          s.text_sent += int64_t(text.size());
          return send(envelope(shape.chunk_object(), json::array({choice})));
        };
        // OpenAI's chat streams open with the role alone; the typed parts' APIs with their start events.
        auto open = [&](size_t i) {
          ChoiceStream& s = (*streams)[i];
          if (!s.first) return true;
          if (!parts) return !(shape.chat && shape.api == Shape::Api::openai) || event(i, "", nullptr, {});
          s.first = false;
          return send_all(s.parts->start());
        };
        // A chat that is read: what reading the longer text adds.
        auto read_events = [&](size_t i, const std::string& piece, bool whole,
                               const std::vector<recipes::TokenLogprob>& lps) {
          std::vector<json> deltas = (*streams)[i].read.deltas(shape, piece, whole, choice_key(id, i));
          if (parts) {  // each kind in a part of its own; a call's part opens with its id and name
            PartStream& stream = *(*streams)[i].parts;
            for (const json& d : deltas) {
              if (d.contains("reasoning_content") && !send_all(stream.reasoning(d["reasoning_content"]))) return false;
              if (d.contains("content") && !send_all(stream.text(d["content"]))) return false;
              for (const json& call : d.value("tool_calls", json::array())) {
                const bool opening = call.contains("id");
                if (!send_all(stream.call(call["index"], opening ? call["id"] : json(""),
                                          opening ? call["function"]["name"] : json(""), call["function"]["arguments"],
                                          opening)))
                  return false;
              }
            }
            return true;
          }
          if (ollama) {  // thinking and content as they come; tool calls whole, at the end
            for (const json& d : deltas) {
              if (d.contains("reasoning_content") &&
                  !send(ollama_piece(model, shape.chat, {{"thinking", d["reasoning_content"]}})))
                return false;
              if (d.contains("content") && !send(ollama_piece(model, shape.chat, shape.ollama_text(d["content"]))))
                return false;
            }
            return true;
          }
          if (deltas.empty() && !lps.empty()) deltas.push_back(json::object());
          for (size_t d = 0; d < deltas.size(); ++d) {
            const json choice = {{"index", i},
                                 {"delta", deltas[d]},
                                 {"logprobs", d == 0 ? shape.logprobs_of(lps, 0) : json()},
                                 {"finish_reason", nullptr}};
            if (!send(envelope(shape.chunk_object(), json::array({choice})))) return false;
          }
          return true;
        };
        JobSignal& signal = *jobs[0]->signal;
        for (;;) {
          std::unique_lock<std::mutex> lock(signal.mutex);
          auto has_news = [&](size_t i) {
            const GenerationJob& j = *jobs[i];
            return j.error || (!(*streams)[i].done && (!j.pieces.empty() || !j.token_logprobs.empty() || j.finished));
          };
          const bool moved = signal.changed.wait_for(lock, timeout, [&] {
            for (size_t i = 0; i < jobs.size(); ++i)
              if (has_news(i)) return true;
            return false;
          });
          std::vector<JobNews> news(jobs.size());
          std::exception_ptr error;
          for (size_t i = 0; i < jobs.size(); ++i) {
            GenerationJob& j = *jobs[i];
            if (!error) error = j.error;
            if ((*streams)[i].done) continue;
            if (!j.pieces.empty()) {
              news[i].piece = std::move(j.pieces.front());
              j.pieces.pop_front();
            }
            news[i].logprobs.assign(j.token_logprobs.begin(), j.token_logprobs.end());
            j.token_logprobs.clear();
            news[i].more = !j.pieces.empty();
            news[i].finished = j.finished;
            if (j.finished) news[i].result = j.result, news[i].times = j.times;
          }
          lock.unlock();
          for (size_t i = 0; i < jobs.size(); ++i) {
            if ((*streams)[i].done) continue;
            const JobNews& n = news[i];
            const bool opened = open(i);
            const bool last = moved && !error && n.finished && !n.more;
            const bool sent = shape.reads()
                                  ? read_events(i, n.piece, last, n.logprobs)
                                  : (n.piece.empty() && n.logprobs.empty()) || event(i, n.piece, nullptr, n.logprobs);
            if (!opened || !sent) {
              cancel();  // the client is gone
              return false;
            }
          }
          if (!moved || error) {  // stalled or failed after the stream began: say so in the stream
            cancel();
            std::string what = "no progress within the request timeout";
            if (error) try {
                std::rethrow_exception(error);
              } catch (const std::exception& e) {
                what = e.what();
              }
            send(ollama  ? json{{"error", what}}
                 : parts ? (*streams)[0].parts->error(what)
                         : json{{"error", {{"message", what}, {"type", "server_error"}, {"code", 500}}}});
          } else {
            for (size_t i = 0; i < jobs.size(); ++i) {
              ChoiceStream& s = (*streams)[i];
              if (s.done || !news[i].finished || news[i].more) continue;
              const recipes::Completion& c = news[i].result;
              if (shape.api == Shape::Api::llama) {
                send(shape.only_asked(Shape::llama_answer(c, "", model, prompt, news[i].times)));
              } else if (parts) {
                send_all(s.parts->finish(c, shape.reads() && !s.read.sent.answer.calls.empty()));
              } else if (ollama) {
                if (shape.reads() && !s.read.sent.answer.calls.empty())
                  send(ollama_piece(model, shape.chat, {{"tool_calls", ollama_tool_calls(s.read.sent.answer.calls)}}));
                send(ollama_done(model, shape.chat, shape.ollama_text(""), c, news[i].times));
              } else
                event(i, "", shape.reads() ? Shape::finish_reason(c, s.read.sent.answer) : c.finish_reason, {});
              s.done = true;
              s.result = c;
            }
            if (!std::all_of(streams->begin(), streams->end(), [](const ChoiceStream& s) { return s.done; })) continue;
            if (include_usage) {
              std::vector<recipes::Completion> results;
              int64_t made = 0;
              for (const ChoiceStream& s : *streams) made += results.emplace_back(s.result).completion_tokens;
              json last = envelope(shape.chunk_object(), json::array());
              last["usage"] = usage(prompt_tokens(results, n), made);
              send(last);
            }
          }
          const std::string done = "data: [DONE]\n\n";
          // llama-server's own stream and Ollama's end without it
          if (shape.api == Shape::Api::openai) sink.write(done.data(), done.size());
          sink.done();
          return true;
        }
      },
      [cancel, open_stream](bool success) {
        if (!success) cancel();
      });
}

// The request's options; what it leaves out of sampling and stop strings,
// the model's defaults give (its generation_config.json, as vLLM takes
// them; an Ollama Modelfile's), then OpenAI's.
recipes::CompletionOptions options_of(const GenerationTarget& t, const GenerationFields& r,
                                      const models::Sampling& fallback = {}) {
  recipes::CompletionOptions co;
  co.max_tokens = r.max_tokens;
  co.sampling = models::resolve_sampling(r.sampling, t.model.sampling_defaults(), fallback);
  co.logit_bias = r.logit_bias;
  co.seed = r.seed;
  co.stop = r.stop.empty() ? t.model.default_stop() : r.stop;
  co.ignore_eos = r.ignore_eos;
  co.grammar = r.grammar;
  return co;
}

// echo: each prompt's own log-probabilities (scored in one pass), then, for
// max_tokens past 0, its completion's, in OpenAI's completions `logprobs`
// shape: what lm-evaluation-harness's loglikelihood asks (max_tokens 1, and
// it reads the prompt's part). A choice a prompt, in order.
void echo(const GenerationTarget& t, const CompletionRequest& r, httplib::Response& res) {
  const int64_t top = r.logprobs.value_or(0);
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < r.prompt_count(); ++i) {
    const std::string text = r.prompt_ids.empty() ? r.prompts[i] : std::string();
    const std::optional<std::vector<int32_t>> ids =
        r.prompt_ids.empty() ? std::nullopt : std::optional(r.prompt_ids[i]);
    recipes::PromptScores s;
    recipes::Completion c;
    c.finish_reason = "length";
    try {
      s = t.model.score_prompt(text, ids, top);
      if (r.max_tokens > 0) {
        recipes::CompletionOptions co = options_of(t, r);
        co.logprobs = top;
        co.prompt_ids = ids.value_or(std::vector<int32_t>{});
        c = t.model.complete(text, co, nullptr);
      }
    } catch (const Error& e) {
      throw HttpError(400, e.what());
    }
    json logprobs = {{"tokens", s.tokens},
                     {"token_logprobs", json::array()},
                     {"top_logprobs", json::array()},
                     {"text_offset", s.text_offset}};
    for (const auto& lp : s.token_logprobs) logprobs["token_logprobs"].push_back(lp ? json(*lp) : json());
    for (const auto& best : s.top_logprobs) {
      json row = best.empty() ? json() : json::object();
      for (const auto& t : best) row[t.token] = t.logprob;
      logprobs["top_logprobs"].push_back(row);
    }
    // The completion's tokens after the prompt's, as a completion's logprobs spell them.
    Shape completions;
    completions.logprobs = true;
    const json generated = completions.logprobs_of(c.logprobs, int64_t(s.text.size()));
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& v : generated[key]) logprobs[key].push_back(v);
    if (!r.logprobs) logprobs["top_logprobs"] = nullptr;
    choices.push_back(
        {{"text", s.text + c.text}, {"index", i}, {"finish_reason", c.finish_reason}, {"logprobs", logprobs}});
    prompt_tokens += int64_t(s.tokens.size());
    completion_tokens += c.completion_tokens;
  }
  res.set_content(dump(json{{"id", "cmpl-" + std::to_string(t.next_id++)},
                            {"object", "text_completion"},
                            {"model", t.name},
                            {"choices", choices},
                            {"usage", usage({prompt_tokens, 0}, completion_tokens)}}),  // (scored whole)
                  "application/json");
}

// /completion's answer, for a prompt given as text or (prompt_ids) as tokens.
void answer_llama(const GenerationTarget& t, const CompletionRequest& r, httplib::Response& res,
                  const std::vector<std::vector<int32_t>>& prompt_ids) {
  recipes::CompletionOptions co = options_of(t, r, kLlamaServerSampling);
  co.logprobs = r.logprobs.value_or(-1);
  co.min_indent = r.n_indent;
  co.max_predict_ms = r.t_max_predict_ms;
  co.sampler_chain = r.samplers;
  Shape shape;
  shape.api = Shape::Api::llama;
  shape.response_fields = r.response_fields;
  shape.logprobs = r.logprobs.has_value();
  generate(t, r.prompts, co, r, shape, res, prompt_ids);
}

}  // namespace

void answer_llama_completion(const GenerationTarget& t, const CompletionRequest& r, httplib::Response& res) {
  answer_llama(t, r, res, {});
}

void answer_llama_infill(const GenerationTarget& t, const InfillRequest& r, httplib::Response& res) {
  const text::FimTokens fim = t.model.fim_tokens();
  if (!fim.usable())
    throw HttpError(400, "model '" + t.name +
                             "' has no fill-in-the-middle tokens (<|fim_prefix|>, <PRE>, ...): "
                             "/infill needs a code model that has them");
  answer_llama(t, r, res, {infill_prompt(t.model, fim, r)});
}

void answer_completion(const GenerationTarget& t, const CompletionRequest& r, httplib::Response& res) {
  if (r.echo) return echo(t, r, res);
  recipes::CompletionOptions co = options_of(t, r);
  co.logprobs = r.logprobs.value_or(-1);
  const std::vector<std::string> prompts =
      r.prompt_ids.empty() ? r.prompts : std::vector<std::string>(r.prompt_count());
  generate(t, prompts, co, r, Shape{false, r.logprobs.has_value(), nullptr, {}}, res, r.prompt_ids);
}

namespace {
// The conversation as the model's chat template renders it, opened with
// the model's own system message (an Ollama SYSTEM) where it has none, as
// `ollama serve` does; what the template raises is a 400.
std::string rendered_chat(const GenerationTarget& t, const ChatRequest& r) {
  try {
    const std::string system = t.model.default_system();
    if (system.empty() || (!r.messages.empty() && r.messages[0].value("role", "") == "system"))
      return t.model.render_chat_json(r.messages, r.tools, r.template_kwargs);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "system"}, {"content", system}}});
    messages.insert(messages.end(), r.messages.begin(), r.messages.end());
    return t.model.render_chat_json(messages, r.tools, r.template_kwargs);
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
}

// Tool calls: the format the answer's calls are read in (null: none are
// read), and the constraint that makes them valid (recipes::constrain_tool_calls).
const text::ToolCallFormat* tool_calls(const GenerationTarget& t, const ChatRequest& r, recipes::CompletionOptions& co) {
  try {
    return recipes::constrain_tool_calls(t.model, r.tools, r.tool_choice, r.parallel_tool_calls, co);
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
}
}  // namespace

void answer_apply_template(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res) {
  res.set_content(dump(json{{"prompt", rendered_chat(t, r)}}), "application/json");
}

namespace {
// A conversation through the model's template, answered in `api`'s shape (`chat`: as a chat message, else as
// Ollama's /api/generate response).
void answer_conversation(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res, Shape::Api api,
                         bool chat) {
  const std::string prompt = rendered_chat(t, r);
  recipes::CompletionOptions co = options_of(t, r);
  co.chat = true;
  co.logprobs = r.logprobs ? r.top_logprobs : -1;
  const text::ToolCallFormat* format = tool_calls(t, r, co);
  Shape shape{chat, r.logprobs, format ? format : recipes::content_format(t.model),
              format ? r.tools : nlohmann::ordered_json()};
  shape.api = api;
  if (r.split_reasoning) shape.reasoning = recipes::reason_before_answering(t.model, prompt, co);
  generate(t, {prompt}, co, r, shape, res);
}
}  // namespace

void answer_chat(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res) {
  answer_conversation(t, r, res, Shape::Api::openai, true);
}

void answer_ollama_chat(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res) {
  answer_conversation(t, r, res, Shape::Api::ollama, true);
}

void answer_anthropic_messages(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res) {
  answer_conversation(t, r, res, Shape::Api::anthropic, true);
}

void answer_openai_responses(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res) {
  answer_conversation(t, r, res, Shape::Api::responses, true);
}

void answer_anthropic_count_tokens(const GenerationTarget& t, const ChatRequest& r, httplib::Response& res) {
  const std::string prompt = rendered_chat(t, r);
  int64_t tokens = 0;
  try {  // as a chat prompt is read for generation: its template writes the special tokens
    tokens = int64_t(t.model.tokenize(prompt, /*add_special=*/false, /*parse_special=*/true).size());
  } catch (const Error& e) {
    throw HttpError(400, "model '" + t.name + "': " + e.what());
  }
  res.set_content(dump({{"input_tokens", tokens}}), "application/json");
}

void answer_ollama_generate(const GenerationTarget& t, const OllamaGenerateRequest& r, httplib::Response& res) {
  if (!r.raw) return answer_conversation(t, r.chat, res, Shape::Api::ollama, false);
  Shape shape;
  shape.api = Shape::Api::ollama;
  generate(t, {r.prompt}, options_of(t, r.chat), r.chat, shape, res);
}

}  // namespace kiln::serve
