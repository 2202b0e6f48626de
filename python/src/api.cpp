// The command's work from Python: kiln.train and kiln.plan parse the options
// `kiln train` and `kiln plan` parse (kiln/__init__.py spells keyword
// arguments as those flags), and kiln.load opens what `kiln sample`, `score`
// and `classify` open. Long calls run without the GIL; Ctrl-C ends a
// training run at the next step boundary, with a checkpoint.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "apps/cli/train_command.h"
#include "apps/plan/plan_cli.h"
#include "apps/recipes/chat_answer.h"
#include "apps/recipes/recipe.h"
#include "kiln/io/safetensors.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/grammar/json_grammar.h"
#include "kiln/text/tool_calls.h"
#include "models/hf/hf_chat.h"
#include "kiln/version.h"
#include "python/src/bindings.h"

namespace kiln::python {
namespace {

// Parses `args` (a subcommand and its arguments) with the command's own
// parser, then gives `use` the parsed command's callback while the parser
// (which the callback reads) still lives. CLI11's complaints become ValueError.
template <typename AddOptions, typename Use>
auto with_parsed(AddOptions add_options, const std::vector<std::string>& args, Use use) {
  CLI::App app("kiln");
  auto parsed = add_options(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last to first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw py::value_error(e.what());
  }
  return use(parsed);
}

py::dict train_result(const recipes::TrainResult& r) {
  py::dict d;
  d["steps"] = r.steps_done;
  d["start_step"] = r.start_step;
  d["train_loss"] = r.final_train_loss;
  d["items_per_second"] = r.items_per_second;
  d["seconds"] = r.seconds;
  d["checkpoint"] = r.checkpoint;
  if (r.test_accuracy >= 0) d["test_accuracy"] = r.test_accuracy;
  if (r.val_loss >= 0) d["val_loss"] = r.val_loss;
  if (r.val_bits_per_byte >= 0) d["val_bits_per_byte"] = r.val_bits_per_byte;
  if (!r.samples.empty()) d["samples"] = r.samples;
  if (r.skipped_steps > 0) d["skipped_steps"] = r.skipped_steps;
  return d;
}

py::object train(const std::vector<std::string>& args) {
  std::optional<recipes::TrainOptions> o = with_parsed(cli::add_train_options, args, [](auto& options) { return options(); });
  if (!o) throw py::value_error("train: the arguments name no recipe run");
  std::optional<py::error_already_set> interrupt;  // KeyboardInterrupt, raised once the checkpoint is written
  o->interrupted = [&interrupt] {
    if (interrupt) return true;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    interrupt.emplace();  // takes the pending exception
    return true;
  };
  // A Ctrl-C that lands while a line prints surfaces inside print: keep it
  // for the next step boundary, which checkpoints and stops, as above.
  const recipes::Log log = [&interrupt](const std::string& line) {
    py::gil_scoped_acquire gil;
    try {
      py::print(line, py::arg("flush") = true);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_KeyboardInterrupt)) throw;
      interrupt.emplace(std::move(e));
    }
  };
  recipes::TrainResult result;
  {
    py::gil_scoped_release release;
    result = cli::run_train(std::move(*o), log);
  }
  if (interrupt) {
    py::print("interrupted at step " + std::to_string(result.steps_done) + "; checkpoint " + result.checkpoint +
              " (resume=True continues the run)", py::arg("flush") = true);
    throw *interrupt;
  }
  return train_result(result);
}

std::string plan(const std::vector<std::string>& args) {
  const std::optional<plan::PlanOutcome> out = with_parsed(plan::add_plan_options, args, [](auto& plan_it) {
    py::gil_scoped_release release;
    return plan_it();
  });
  if (!out) throw py::value_error("plan: the arguments name no plan");
  return out->json.dump();
}

// A loaded model: what `kiln sample`, `kiln score` and `kiln classify` use.
struct Model {
  recipes::LoadedModel loaded;

  recipes::InferenceModel& model() {
    if (!loaded.model) throw py::value_error("the model was closed");
    return *loaded.model;
  }

  // The sampling asked for; what is None, the model's own default (as transformers' generate() takes
  // its generation_config.json), then temperature 0.8 and top-k 40.
  models::Sampling sampling(std::optional<double> temperature, std::optional<int64_t> top_k, std::optional<double> top_p,
                            std::optional<double> min_p, std::optional<double> repetition_penalty,
                            std::optional<double> presence_penalty, std::optional<double> frequency_penalty) {
    const models::SamplingFields asked{.temperature = temperature,
                                       .top_p = top_p,
                                       .min_p = min_p,
                                       .repetition_penalty = repetition_penalty,
                                       .presence_penalty = presence_penalty,
                                       .frequency_penalty = frequency_penalty,
                                       .top_k = top_k,
                                       .repetition_window = std::nullopt,  // the model's, as transformers'
                                       .unapplied = {}};
    return models::resolve_sampling(asked, model().sampling_defaults(), {.temperature = 0.8, .top_k = 40});
  }

  std::string generate(const std::string& prompt, int64_t max_tokens, std::optional<double> temperature,
                       std::optional<int64_t> top_k, std::optional<double> top_p, uint64_t seed,
                       const std::vector<std::string>& stop, std::optional<double> min_p,
                       std::optional<double> repetition_penalty, std::optional<double> presence_penalty,
                       std::optional<double> frequency_penalty, const std::map<int32_t, float>& logit_bias) {
    if (loaded.kind != recipes::ModelKind::language_model)
      throw py::value_error(std::string("generate needs a language model; this is a ") + model_kind_name(loaded.kind));
    recipes::CompletionOptions o;
    o.max_tokens = max_tokens, o.seed = seed;
    o.sampling = sampling(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty);
    o.logit_bias.assign(logit_bias.begin(), logit_bias.end());
    o.stop = stop;
    py::gil_scoped_release release;
    return model().complete(prompt, o, nullptr).text;
  }

  // The reply to a conversation: rendered by the model's chat template, generated to its end of turn.
  // Messages and tools as transformers' apply_chat_template takes them; response_format and tool_choice
  // as the chat API's (kiln serve's); a reasoning model thinks before a constrained answer. With tools,
  // the reply is the chat API's message: a dict of content, tool_calls, finish_reason and, where the
  // model reasoned, reasoning_content.
  py::object chat(const py::object& messages, int64_t max_tokens, std::optional<double> temperature,
                  std::optional<int64_t> top_k, std::optional<double> top_p, uint64_t seed, const py::object& tools,
                  const py::object& tool_choice, bool parallel_tool_calls, const py::object& response_format,
                  std::optional<double> min_p, std::optional<double> repetition_penalty,
                  std::optional<double> presence_penalty, std::optional<double> frequency_penalty,
                  const std::map<int32_t, float>& logit_bias) {
    if (loaded.kind != recipes::ModelKind::language_model)
      throw py::value_error(std::string("chat needs a language model; this is a ") + model_kind_name(loaded.kind));
    using ordered_json = nlohmann::ordered_json;
    const py::object dumps = py::module_::import("json").attr("dumps");
    auto to_json = [&](const py::object& o) {
      return o.is_none() ? ordered_json() : ordered_json::parse(dumps(o).cast<std::string>());
    };
    const ordered_json conversation = to_json(messages), tool_list = to_json(tools);
    recipes::CompletionOptions o;
    o.max_tokens = max_tokens, o.seed = seed;
    o.sampling = sampling(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty);
    o.logit_bias.assign(logit_bias.begin(), logit_bias.end());
    o.chat = true;
    if (!response_format.is_none()) o.grammar = text::response_format_grammar(to_json(response_format));
    const text::ToolCallFormat* format = recipes::constrain_tool_calls(
        model(), tool_list, text::tool_choice_from_json(to_json(tool_choice), tool_list), parallel_tool_calls, o);
    const std::string prompt = model().render_chat_json(conversation, tool_list);
    const recipes::ReasoningStart reasoning = recipes::reason_before_answering(model(), prompt, o);
    recipes::Completion reply;
    {
      py::gil_scoped_release release;
      reply = model().complete(prompt, o, nullptr);
    }
    if (!format) {  // the content, less what a recipient's answer spells it with (Functionary 3.2's)
      const text::ToolCallFormat* content = recipes::content_format(model());
      return py::str(content ? text::read_tool_answer(*content, reply.text, true, {}).content : reply.text);
    }
    const recipes::ChatAnswer read = recipes::read_chat_answer(reply.text, true, reasoning, format, tool_list);
    const text::ToolAnswer& answer = read.answer;
    py::dict d;
    d["content"] = answer.calls.empty() || !answer.content.empty() ? py::object(py::str(answer.content)) : py::none();
    if (!read.reasoning.empty()) d["reasoning_content"] = read.reasoning;
    d["tool_calls"] = py::module_::import("json").attr("loads")(text::tool_calls_json(*format, answer.calls, seed).dump());
    d["finish_reason"] = !answer.calls.empty() && reply.finish_reason == "stop" ? "tool_calls" : reply.finish_reason;
    return d;
  }

  // A language model's tokens, as its tokenizer's encode() and decode() give them (special tokens' text kept).
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) {
    language_model_needed("encode");
    return model().tokenize(text, add_special_tokens, true);
  }
  std::string decode(const std::vector<int32_t>& ids) {
    language_model_needed("decode");
    return model().detokenize(ids);
  }
  void language_model_needed(const char* what) const {
    if (loaded.kind != recipes::ModelKind::language_model)
      throw py::value_error(std::string(what) + " needs a language model; this is a " + model_kind_name(loaded.kind));
  }

  py::dict score(const std::string& text) {
    if (loaded.kind != recipes::ModelKind::language_model)
      throw py::value_error(std::string("score needs a language model; this is a ") + model_kind_name(loaded.kind));
    recipes::PromptScores s;
    {
      py::gil_scoped_release release;
      s = model().score_prompt(text, std::nullopt, 0);
    }
    double total = 0;
    int64_t counted = 0;
    py::list logprobs;
    for (const auto& lp : s.token_logprobs) {
      logprobs.append(lp ? py::cast(*lp) : py::none());
      if (lp) total += *lp, ++counted;
    }
    py::dict d;
    d["tokens"] = s.tokens;
    d["logprobs"] = logprobs;
    d["perplexity"] = counted ? std::exp(-total / double(counted)) : std::nan("");
    return d;
  }

  // Sentence embeddings (a sentence-transformers folder), 32 texts a pass: one list of floats per text.
  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts) {
    if (loaded.kind != recipes::ModelKind::text_embedder)
      throw py::value_error(std::string("embed needs a text embedder (a sentence-transformers folder); this is a ") +
                            model_kind_name(loaded.kind));
    std::vector<std::vector<float>> out;
    py::gil_scoped_release release;
    for (size_t first = 0; first < texts.size(); first += 32) {
      const std::vector<std::string> part(texts.begin() + long(first),
                                          texts.begin() + long(std::min(texts.size(), first + 32)));
      const Tensor rows = model().embed_tokens(model().encode_texts(part));
      const std::vector<float> v = rows.to_vector<float>();
      const auto width = long(rows.size(1));
      for (long r = 0; r < long(part.size()); ++r) out.emplace_back(v.begin() + r * width, v.begin() + (r + 1) * width);
    }
    return out;
  }

  py::dict classify(const std::string& text) {
    if (loaded.kind != recipes::ModelKind::text_classifier)
      throw py::value_error(std::string("classify takes text for a text classifier; this is a ") +
                            model_kind_name(loaded.kind) + (loaded.kind == recipes::ModelKind::image_classifier
                                                                ? " (classify_images takes images)" : ""));
    std::vector<float> probs;
    {
      py::gil_scoped_release release;
      probs = model().classify_tokens(model().encode_texts({text})).to_vector<float>();
    }
    return labelled(probs);
  }

  Tensor classify_images(const Tensor& pixels) {
    if (loaded.kind != recipes::ModelKind::image_classifier)
      throw py::value_error(std::string("classify_images needs an image classifier; this is a ") +
                            model_kind_name(loaded.kind));
    py::gil_scoped_release release;
    return model().classify_images(pixels);
  }

  py::dict labelled(const std::vector<float>& probs) {
    const std::vector<std::string> labels = model().labels();
    py::dict d;
    for (size_t i = 0; i < probs.size(); ++i) d[py::str(i < labels.size() ? labels[i] : std::to_string(i))] = probs[i];
    return d;
  }
};

}  // namespace

void bind_api(py::module_& m) {
  // safetensors, as safetensors.torch's save_file and load_file.
  m.def("save_file", [](const std::map<std::string, Tensor>& tensors, const std::string& path,
                        const std::map<std::string, std::string>& metadata) {
    NamedTensors named(tensors.begin(), tensors.end());
    py::gil_scoped_release release;
    save_safetensors(path, named, metadata);
  }, py::arg("tensors"), py::arg("filename"), py::arg("metadata") = std::map<std::string, std::string>{});
  m.def("load_file", [](const std::string& path) {
    py::gil_scoped_release release;
    return load_safetensors(path).tensors;
  }, py::arg("filename"));
  m.def("_train", &train, py::arg("args"));
  m.def("_plan", &plan, py::arg("args"));
  m.attr("__version__") = KILN_VERSION;

  py::class_<Model>(m, "Model")
      .def_property_readonly("recipe", [](const Model& mo) { return mo.loaded.recipe; })
      .def_property_readonly("kind", [](const Model& mo) { return std::string(model_kind_name(mo.loaded.kind)); })
      .def_property_readonly("step", [](const Model& mo) { return mo.loaded.step; })
      .def_property_readonly("labels", [](Model& mo) { return mo.model().labels(); })
      // Sampling left as None is the model's own default (docs/SAMPLING.md), then temperature 0.8 and top-k 40.
      .def("generate", &Model::generate, py::arg("prompt"), py::arg("max_tokens") = 64,
           py::arg("temperature") = py::none(), py::arg("top_k") = py::none(), py::arg("top_p") = py::none(),
           py::arg("seed") = 1, py::arg("stop") = std::vector<std::string>{}, py::kw_only(),
           py::arg("min_p") = py::none(), py::arg("repetition_penalty") = py::none(),
           py::arg("presence_penalty") = py::none(), py::arg("frequency_penalty") = py::none(),
           py::arg("logit_bias") = std::map<int32_t, float>{})
      .def("chat", &Model::chat, py::arg("messages"), py::arg("max_tokens") = 256, py::arg("temperature") = py::none(),
           py::arg("top_k") = py::none(), py::arg("top_p") = py::none(), py::arg("seed") = 1,
           py::arg("tools") = py::none(), py::arg("tool_choice") = py::none(), py::arg("parallel_tool_calls") = true,
           py::arg("response_format") = py::none(), py::kw_only(), py::arg("min_p") = py::none(),
           py::arg("repetition_penalty") = py::none(), py::arg("presence_penalty") = py::none(),
           py::arg("frequency_penalty") = py::none(), py::arg("logit_bias") = std::map<int32_t, float>{})
      .def("score", &Model::score, py::arg("text"))
      .def("encode", &Model::encode, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode", &Model::decode, py::arg("ids"))
      .def("classify", &Model::classify, py::arg("text"))
      .def("embed", &Model::embed, py::arg("texts"))
      .def("classify_images", &Model::classify_images, py::arg("pixels"))
      .def("__repr__", [](const Model& mo) {
        return "kiln.Model(recipe='" + mo.loaded.recipe + "', kind='" + model_kind_name(mo.loaded.kind) + "')";
      });
  // kiln.apply_chat_template's engine: JSON in (what Python's json.dumps wrote), the rendered text out.
  m.def("_apply_chat_template", [](const std::string& messages, const std::string& source, const std::string& model_dir,
                                   const std::string& tools, bool add_generation_prompt,
                                   std::optional<std::string> bos, std::optional<std::string> eos,
                                   const std::string& kwargs) {
    text::ChatTemplate t = source.empty() ? models::load_hf_chat_template(model_dir)
                                          : text::ChatTemplate::from_jinja(source);
    if (bos) t.tokens.bos = *bos;
    if (eos) t.tokens.eos = *eos;
    using ordered_json = nlohmann::ordered_json;
    return t.render_json(ordered_json::parse(messages), ordered_json::parse(tools), add_generation_prompt,
                         ordered_json::parse(kwargs));
  });
  m.def("load", [](const std::string& spec, const Device& device, const std::string& chat_template,
                   const std::string& quantize) {
    recipes::InferenceOptions o;
    o.chat_template = chat_template, o.quantize = quantize;
    py::gil_scoped_release release;
    return Model{recipes::load_for_inference(spec, device, o)};
  }, py::arg("path"), py::arg("device") = Device::cpu(), py::arg("chat_template") = "", py::arg("quantize") = "");
}

}  // namespace kiln::python
