// Tool calls (kiln/text/tool_calls): the format found by rendering a call
// through each real template of the corpus; answers read the same whole
// and a character at a time; arguments in the form each template takes.
// The grammars that force a call: test_tool_call_grammars.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/text/python_literal.h"
#include "kiln/text/tool_calls.h"
#include "tests/hf_test_util.h"
#include "tests/tool_calls_test_util.h"

namespace kiln::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using tool_calls_test::format_named;
using tool_calls_test::kTools;

std::string read_file(const fs::path& p) {
  std::stringstream ss;
  ss << std::ifstream(p, std::ios::binary).rdbuf();
  return ss.str();
}

// The corpus's templates whose tool calls Kiln reads, by the format their rendering shows.
TEST(ToolCalls, FormatIsFoundByRenderingACallThroughTheTemplate) {
  const std::map<std::string, std::string> expected = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"},
      {"Qwen-Qwen3-0.6B.jinja", "hermes"},
      {"Qwen-QwQ-32B.jinja", "hermes"},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"},
      {"ibm-granite-granite-4.0.jinja", "hermes"},
      // Renders no calls; its tools prompt asks for <|tool_call|> and a JSON list.
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", "granite-3.3"},
      {"MiMo-VL.jinja", "hermes"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-v11"},
      {"unsloth-mistral-Devstral-Small-2507.jinja", "mistral-v11"},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral-v11"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3-json"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3-json"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3-json"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1"},
      {"unsloth-Apriel-1.5.jinja", "apriel"},
      {"NVIDIA-Nemotron-Nano-v2.jinja", "nemotron-v2"},
      {"GigaChat3.1-10B-A1.8B.jinja", "gigachat3.1"},
      {"GigaChat3-10B-A1.8B.jinja", "gigachat3"},
      {"meetkai-functionary-medium-v3.1.jinja", "functionary-v3.1"},
      // Renders a call only with its arguments as the API's JSON text (transformers fails on an object there too).
      {"meetkai-functionary-medium-v3.2.jinja", "functionary-v3.2"},
      {"muse-glimmer.jinja", "muse-glimmer"},
      // Renders only with the `functions` and `datetime` variables its model card passes.
      {"fireworks-ai-llama-3-firefunction-v2.jinja", "firefunction-v2"},
      {"Qwen3-Coder.jinja", "qwen3-coder"},
      {"Qwen3.5-4B.jinja", "qwen3-coder"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "qwen3-coder"},
      {"StepFun3.5-Flash.jinja", "qwen3-coder"},
      {"ByteDance-Seed-OSS.jinja", "seed-oss"},
      {"GLM-4.6.jinja", "glm-4.6"},
      {"GLM-4.7-Flash.jinja", "glm-4.7"},
      {"MiniMax-M2.jinja", "minimax-m2"},
      {"deepseek-ai-DeepSeek-V3.2.jinja", "deepseek-v3.2"},
      {"deepseek-ai-DeepSeek-V4.jinja", "deepseek-v4"},
      {"deepseek-ai-DeepSeek-V4-Flash-0731.jinja", "deepseek-v4"},
      {"moonshotai-Kimi-K2.jinja", "kimi-k2"},
      // A call's id appended to a list: transformers' sandbox refuses it (SecurityError), and so does Kiln's.
      {"Kimi-K2-Instruct.jinja", ""},
      {"Kimi-K2-Thinking.jinja", ""},
      {"upstage-Solar-Open-100B.jinja", "solar-open"},
      {"Apertus-8B-Instruct.jinja", "apertus"},
      {"MiniMax-M3.jinja", "minimax-m3"},
      {"Kimi-K3.jinja", "kimi-k3"},
      {"openbmb-MiniCPM5-1B.jinja", "minicpm5"},
      {"LFM2.5-8B-A1B.jinja", "lfm2"},
      // LFM2's and LFM2.5-Instruct's render no calls; their prompts list the tools as LFM2.5's does.
      {"LFM2-8B-A1B.jinja", "lfm2"},
      {"LFM2.5-Instruct.jinja", "lfm2"},
      {"openai-gpt-oss-120b.jinja", "harmony"},
      {"MiniMax-M1.jinja", "minimax-m1"},
      {"tencent-Hy3.jinja", "hunyuan"},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command-r7b"},
      {"Cohere2MoE.jinja", "command-r7b"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1"},
      // Its tools prompt is `map(...) | tojson` of a generator, which transformers refuses (TypeError), and Kiln too.
      {"llama-cpp-deepseek-r1.jinja", ""},
      {"HuggingFaceTB-SmolLM3-3B.jinja", ""},  // takes no tools
      {"google-gemma-4-31B-it.jinja", "gemma-4"},
      {"google-gemma-4-31B-it-interleaved.jinja", "gemma-4"},
      {"google-gemma-2-2b-it.jinja", ""},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ""},
  };
  const fs::path dir = fs::path(hf_test::fixture("chat_templates")) / "templates";
  int found = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    ChatTemplate chat = ChatTemplate::from_jinja(read_file(entry.path()));
    chat.tokens = {"<s>", "</s>"};
    chat.now_unix_seconds = 1783168200;
    const ToolCallFormat* f = detect_tool_call_format(chat);
    found += f != nullptr;
    if (const auto it = expected.find(name); it != expected.end()) {
      EXPECT_EQ(f ? f->name : "", it->second) << name;
    }
  }
  EXPECT_GE(found, 61) << "templates of the corpus whose tool calls are read";
  EXPECT_EQ(detect_tool_call_format(chat_template_named("chatml")), nullptr) << "a built-in renderer takes no tools";
}

struct Example {
  const char* format;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;
};

// Answers as models write them (whitespace where the literals have it, or
// more), in every format.
std::vector<Example> examples() {
  const std::string ds_calls = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
  const std::string ds_call = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
  const std::string ds_sep = "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>";
  const std::string ds_end = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
  const std::string ds_calls_end = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
  const std::string mm = "]<]minimax[>[";
  return {
      {"hermes", "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\", \"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>",
       "Let me check.\n", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", R"({"zone": "CET", "x": [1, {"y": "}"}]})"}}},
      {"hermes", "No tools needed: 2 < 3.", "No tools needed: 2 < 3.", {}},
      {"hermes", "<tool_call>\nnot a call", "<tool_call>\nnot a call", {}},
      {"mistral", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}, "
                  "{\"arguments\": {}, \"name\": \"late_name\"}]",
       "", {{"get_weather", R"({"city": "Paris"})"}, {"late_name", "{}"}}},
      // Granite 3.3 writes the arguments first: the call is read once its name is.
      {"granite-3.3", "<|tool_call|>[{\"arguments\": {\"city\": \"Paris\"}, \"name\": \"get_weather\"}, "
                      "{\"name\": \"get_time\", \"arguments\": {}}]",
       "", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"granite-3.3", "<|tool_call|>[{\"arguments\": {\"city\": \"Paris\"}}]",
       "<|tool_call|>[{\"arguments\": {\"city\": \"Paris\"}}]", {}},
      {"mistral-v11", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]abcDEF123[ARGS]{}",
       "", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"llama3-json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
       {{"get_weather", R"({"city": "Paris"})"}}},
      {"llama3-json", "{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       "{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", {}},
      {"deepseek-v3.1", "Sure." + ds_calls + ds_call + "get_weather" + ds_sep + "{\"city\": \"Paris\"}" + ds_end + ds_calls_end,
       "Sure.", {{"get_weather", R"({"city": "Paris"})"}}},
      {"functionary-v3.1", "<function=get_weather>{\"city\": \"Paris\"}</function>", "",
       {{"get_weather", R"({"city": "Paris"})"}}},
      {"apriel", "<tool_calls>[{\"name\": \"f\", \"arguments\": {\"a\": \"\\\"]\"}}]</tool_calls>", "", {{"f", R"({"a": "\"]"})"}}},
      // XML-style parameters: text values exactly (less the line break on each side), others as JSON by their type.
      {"qwen3-coder", "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew \"York\"\n</parameter>\n"
                      "<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=note>\n"
                      "  <b>x</b> 2 < 3\n\n</parameter>\n<parameter=extra>\n{\"k\": [1]}\n</parameter>\n</function>\n"
                      "</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
       "I'll check.\n",
       {{"get_weather", R"({"city": "New \"York\"", "days": 3, "metric": true, "note": "  <b>x</b> 2 < 3\n", "extra": {"k": [1]}})"},
        {"get_time", "{}"}}},
      {"qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=other>\n42"
                      "\n</parameter>\n</function>\n</tool_call>",
       "", {{"get_weather", R"({"days": "three", "other": "42"})"}}},
      {"seed-oss", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>\nParis</parameter>\n<parameter=days>2"
                   "</parameter>\n</function>\n</seed:tool_call>",
       "", {{"get_weather", R"({"city": "\nParis", "days": 2})"}}},
      // Llama 3.1's <|python_tag|>: a JSON call, a built-in tool's NAME.call(...), or code_interpreter's code.
      {"llama3-json", "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
       {{"get_weather", R"({"city": "Paris"})"}}},
      {"llama3-json", "Searching.<|python_tag|>brave_search.call(query=\"weather \\ Paris\", n=3)", "Searching.",
       {{"brave_search", R"({"query": "weather \\ Paris", "n": 3})"}}},
      {"llama3-json", "<|python_tag|>import math\nprint(math.pi)", "",
       {{"code_interpreter", R"j({"code": "import math\nprint(math.pi)"})j"}}},
      {"llama3-json", "<|python_tag|>unknown.call(x=\"1\")", "",  // not an offered tool's call: code
       {{"code_interpreter", R"j({"code": "unknown.call(x=\"1\")"})j"}}},
      {"glm-4.6", "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>"
                  "\n<arg_value>2</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>",
       "Sure.\n", {{"get_weather", R"({"city": "Paris", "days": 2})"}, {"get_time", "{}"}}},
      {"glm-4.7", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par<is</arg_value></tool_call>", "",
       {{"get_weather", R"({"city": "Par<is"})"}}},
      // DSML: each parameter marked text (string="true") or JSON, whatever the schema says.
      {"deepseek-v4", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
                      "string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">2"
                      "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"note\" string=\"false\">[1]</｜DSML｜parameter>\n"
                      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
       "", {{"get_weather", R"({"city": "Paris", "days": 2, "note": [1]})"}}},
      {"minimax-m2", "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
                     "<parameter name=\"extra\">{\"a\": null}</parameter>\n</invoke>\n<invoke name=\"get_time\">\n</invoke>\n"
                     "</minimax:tool_call>",
       "", {{"get_weather", R"({"city": "Paris", "extra": {"a": null}})"}, {"get_time", "{}"}}},
      // Solar Open: each call's id before its name.
      {"solar-open", "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>"
                     "{\"city\": \"Paris\"}<|tool_call:end|><|tool_call:begin|>0123456789<|tool_call:name|>get_time"
                     "<|tool_call:args|>{}<|tool_call:end|><|calls|>",
       "", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      // Kimi K2: each call's index after its name (the conversation's count, 11 and 12 here).
      {"kimi-k2", "I'll check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:11"
                  "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
                  "functions.get_time:12<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
       "I'll check.", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"apertus", "Sure.<|tools_prefix|>[{\"get_weather\": {\"city\": \"Paris\"}}, {\"get_time\": {}}]<|tools_suffix|>",
       "Sure.", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      // MiniCPM5: a value in <![CDATA[...]]> runs to its first "]]>"; others as its template's {{ value }} writes them.
      {"minicpm5", "I'll check.\n<function name=\"get_weather\"><param name=\"city\"><![CDATA[New\n<York> ]]]></param>"
                   "<param name=\"note\">a & b</param><param name=\"days\">3</param><param name=\"extra\">{'k': [1, True,"
                   " None]}</param></function>\n<function name=\"get_time\"></function>",
       "I'll check.\n",
       {{"get_weather", R"({"city": "New\n<York> ]", "note": "a & b", "days": 3, "extra": {"k": [1, true, null]}})"},
        {"get_time", "{}"}}},
      // Kimi K3: each call's index, each parameter's type ("string": text, else JSON).
      {"kimi-k3", "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" "
                  "type=\"string\"<|sep|>Paris <3<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>"
                  "2<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"get_time\" index=\"2\"<|sep|>"
                  "<|close|>call<|sep|><|close|>tools<|sep|>",
       "", {{"get_weather", R"({"city": "Paris <3", "days": 2})"}, {"get_time", "{}"}}},
      // gpt-oss (harmony): the recipient in the channel (as the model writes it) or in the role (as its template
      // does), the arguments after the content type; <|call|> ends the turn (a stop token: it may be gone).
      {"harmony", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
       "", {{"get_weather", R"({"city": "Paris"})"}}},
      {"harmony", " to=functions.get_time<|channel|>commentary json<|message|>{}", "", {{"get_time", "{}"}}},
      // MiniMax M3: nested elements, an object's members and an array's items (text by the schema's types).
      {"minimax-m3", "Sure." + mm + "<tool_call>\n" + mm + "<invoke name=\"get_weather\">" + mm + "<city>Paris" + mm +
                         "</city>" + mm + "<extra>" + mm + "<k>" + mm + "<item>1" + mm + "</item>" + mm + "<item>true" + mm +
                         "</item>" + mm + "</k>" + mm + "</extra>" + mm + "<days>3" + mm + "</days>" + mm + "</invoke>\n" + mm +
                         "<invoke name=\"get_time\">" + mm + "</invoke>\n" + mm + "</tool_call>",
       "Sure.", {{"get_weather", R"({"city": "Paris", "extra": {"k": [1, true]}, "days": 3})"}, {"get_time", "{}"}}},
      // DeepSeek R1: each call's type, then its arguments in a JSON code block.
      {"deepseek-r1", "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                      "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
                      "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "Sure.", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"minimax-m1", "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                     "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_calls>",
       "", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"hunyuan", "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>"
                  "city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n<arg_key:opensource>days"
                  "</arg_key:opensource>\n<arg_value:opensource>2</arg_value:opensource>\n</tool_call:opensource>\n"
                  "<tool_call:opensource>get_time<tool_sep:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
       "", {{"get_weather", R"({"city": "Paris", "days": 2})"}, {"get_time", "{}"}}},
      // GigaChat 3: one call, in a message of its own after the assistant's content.
      {"gigachat3", "Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\": \"Paris\"}}",
       "Checking.", {{"get_weather", R"({"city": "Paris"})"}}},
      // Command R7B: each object's index (read and dropped), name and parameters.
      {"command-r7b", "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": "
                      "{\"city\": \"Paris\"}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", "
                      "\"parameters\": {}}\n]<|END_ACTION|>",
       "", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      // Gemma 4: its notation (strings raw between <|"|> marks, keys bare), read as JSON.
      {"gemma-4", "Let me check.<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:3,extra:{k:[1,true,null]},"
                  "metric:false}<tool_call|><|tool_call>call:get_time{}<tool_call|>",
       "Let me check.", {{"get_weather", R"({"city": "Paris, \"FR\"", "days": 3, "extra": {"k": [1, true, null]}, "metric": false})"},
                         {"get_time", "{}"}}},
      // Functionary 3.2: the prompt wrote the first ">>>"; content is the "all" recipient's, up to the next one.
      {"functionary-v3.2", "all\nLet me check >> now.>>>get_weather\n{\"city\": \"Paris\"}>>>get_time\n{}",
       "Let me check >> now.", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"functionary-v3.2", "get_weather\n{\"city\": \"Paris\"}", "", {{"get_weather", R"({"city": "Paris"})"}}},
      {"functionary-v3.2", "all\nNo call: a>>>b.", "No call: a>>>b.", {}},
      {"functionary-v3.2", "al", "al", {}},
      {"firefunction-v2", " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                          "{\"name\": \"get_time\", \"arguments\": {}}]",
       " ", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      // muse-glimmer: a message to each tool, the call's name again in its invoke, after the content's message
      // (here trimmed, as a reasoning model's content is).
      {"muse-glimmer", "to=user<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|>"
                       "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:parameter name=\"city\">"
                       "New <York></atem:parameter>\n<atem:parameter name=\"days\">3</atem:parameter>\n</atem:invoke>\n"
                       "</atem:function_calls><|eom|><|start|>assistant to=get_time<|message|><atem:function_calls>\n"
                       "<atem:invoke name=\"get_time\">\n</atem:invoke>\n</atem:function_calls>",
       "to=user<|message|>Checking.<|eom|><|start|>assistant",
       {{"get_weather", R"({"city": "New <York>", "days": 3})"}, {"get_time", "{}"}}},
      {"muse-glimmer", "to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_weather\">\n"
                       "</atem:invoke>\n</atem:function_calls>", "", {{"get_weather", "{}"}}},
      {"muse-glimmer", " to=user<|message|>No call.", " to=user<|message|>No call.", {}},
      // A call whose invoke names another function than its message: not a call.
      {"muse-glimmer", " to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_time\">\n",
       " to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_time\">\n", {}},
      // LFM2: Python calls, strings in either quotes.
      {"lfm2", "<|tool_call_start|>[get_weather(city='Paris', days=3, metric=True, note=\"say \\\"hi\\\"\", "
               "extra={'k': [1, None]}), get_time()]<|tool_call_end|>",
       "", {{"get_weather", R"({"city": "Paris", "days": 3, "metric": true, "note": "say \"hi\"", "extra": {"k": [1, null]}})"},
            {"get_time", "{}"}}},
      {"lfm2", "Done: [x]<|tool_call_start|>[get_weather(city = \"it's\" ,days=-1.5e1)]<|tool_call_end|>", "Done: [x]",
       {{"get_weather", R"({"city": "it's", "days": -1.5e1})"}}},
  };
}

// The types XML-style values are read by.
const json kExampleTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
    "metric": {"type": "boolean"}, "note": {"type": "string"}, "extra": {"type": "object", "properties": {"k": {
    "type": "array", "items": {}}}}}}}},
    {"type": "function", "function": {"name": "brave_search"}},
    {"type": "function", "function": {"name": "code_interpreter"}}])");

TEST(ToolCalls, AnswersReadTheSameWholeAndACharacterAtATime) {
  for (const Example& e : examples()) {
    const ToolCallFormat& f = format_named(e.format);
    const ToolAnswer whole = read_tool_answer(f, e.text, true, kExampleTools);
    EXPECT_EQ(whole.content, e.content) << e.text;
    ASSERT_EQ(whole.calls.size(), e.calls.size()) << e.text;
    for (size_t i = 0; i < e.calls.size(); ++i) {
      EXPECT_EQ(whole.calls[i].name, e.calls[i].name) << e.text;
      EXPECT_EQ(whole.calls[i].arguments, e.calls[i].arguments) << e.text;
    }
    // Each longer prefix only extends the reading: what a stream sends adds up to the whole answer's.
    ToolAnswer before;
    for (size_t n = 0; n <= e.text.size(); ++n) {
      const ToolAnswer now =
          read_tool_answer(f, std::string_view(e.text).substr(0, n), n == e.text.size(), kExampleTools);
      ASSERT_EQ(now.content.compare(0, before.content.size(), before.content), 0) << e.text << " at " << n;
      ASSERT_GE(now.calls.size(), before.calls.size()) << e.text << " at " << n;
      for (size_t i = 0; i < before.calls.size(); ++i) {
        ASSERT_EQ(now.calls[i].name, before.calls[i].name);
        ASSERT_EQ(now.calls[i].arguments.compare(0, before.calls[i].arguments.size(), before.calls[i].arguments), 0)
            << e.text << " at " << n;
      }
      // Text that may still open a section is held back, never sent as content.
      if (n < e.text.size() && !e.calls.empty()) {
        EXPECT_LE(now.content.size(), e.content.size()) << e.text;
      }
      before = now;
    }
  }
}

// A call's arguments reach each template in the form it takes: Functionary
// 3.2's as the API's JSON text, which it writes as sent; the others' as
// the object (parsed from that text). Firefunction v2's variables are
// given, as its model card and llama-server give them.
TEST(ToolCalls, ArgumentsReachTheTemplateInTheFormItTakes) {
  const fs::path dir = fs::path(hf_test::fixture("chat_templates")) / "templates";
  auto load = [&](const std::string& name) {
    ChatTemplate chat = ChatTemplate::from_jinja(read_file(dir / name));
    chat.tokens = {"<s>", "</s>"};
    chat.now_unix_seconds = 1783168200;
    return chat;
  };
  const json sent = json::parse(R"([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "id": "call_1", "function": {"name": "get_weather",
      "arguments": "{\"city\":  \"Paris\"}"}}, {"type": "function", "id": "call_2", "function": {"name": "get_time",
      "arguments": {"zone": "CET"}}}]}])");
  const ChatTemplate functionary = load("meetkai-functionary-medium-v3.2.jinja");
  ASSERT_TRUE(takes_text_arguments(functionary));
  const std::string text_rendered = functionary.render_json(arguments_as_taken(sent, true), kTools, false);
  EXPECT_NE(text_rendered.find(">>>get_weather\n{\"city\":  \"Paris\"}>>>get_time\n{\"zone\": \"CET\"}"),
            std::string::npos) << "the text as sent, an object as json.dumps writes it: " << text_rendered;
  const ChatTemplate qwen = load("Qwen-Qwen2.5-7B-Instruct.jinja");
  ASSERT_FALSE(takes_text_arguments(qwen));
  const json as_objects = arguments_as_taken(sent, false);
  EXPECT_EQ(as_objects[1]["tool_calls"][0]["function"]["arguments"], json({{"city", "Paris"}}));
  EXPECT_EQ(arguments_as_taken(json::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f",
      "arguments": "not json"}}]}])"), false)[0]["tool_calls"][0]["function"]["arguments"], "not json")
      << "text that is not an object's stays as sent";
  const ChatTemplate firefunction = load("fireworks-ai-llama-3-firefunction-v2.jinja");
  EXPECT_THROW(firefunction.render_json(as_objects, kTools, true), Error) << "transformers fails without them too";
  const std::string prompt = firefunction.render_json(as_objects, kTools, true, serving_variables(firefunction, kTools));
  EXPECT_NE(prompt.find("Available functions as JSON spec:\n[\n    {\n        \"type\": \"function\","), std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("Today is Jul "), std::string::npos) << prompt;
  EXPECT_NE(prompt.find(" functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
            std::string::npos) << prompt;
}


TEST(ToolCalls, PythonLiteralsReadAsJson) {
  const std::pair<const char*, const char*> cases[] = {
      {"'Paris'", "\"Paris\""},
      {"\"a 'b' \\\"c\\\"\"", R"("a 'b' \"c\"")"},
      {"'it\\'s \\x41\\n\\q'", R"("it's \u0041\n\\q")"},  // \q is not an escape: the backslash stays
      {" -3 ", "-3"},
      {"1.5e3", "1.5e3"},
      {"+2", "2.0"},
      {"True", "true"},
      {"None", "null"},
      {"[1, (2, 3), {'k': False},]", R"([1, [2, 3], {"k": false}])"},
      {"{\"k\": null}", R"({"k": null})"},
  };
  for (const auto& [python, json_text] : cases) EXPECT_EQ(python_literal_json(python), json_text) << python;
  for (const char* bad : {"Paris", "{1: 2}", "'open", "[1, 2", "nan", "'\\u12'", "1 2", ""})
    EXPECT_EQ(python_literal_json(bad), "") << bad;
  EXPECT_EQ(python_literal_json(std::string(100, '[') + std::string(100, ']')), "") << "nested too deep";
  EXPECT_EQ(read_python_literal("[1, 'a", 0).scan, PythonLiteral::Scan::kPartial);
  EXPECT_EQ(read_python_literal("12", 0).scan, PythonLiteral::Scan::kPartial) << "a number may go on";
  // Gemma 4's notation: raw strings between <|"|> marks, bare (or quoted) keys.
  const std::string gemma = "{k:<|\"|>a \"b\" \\<|\"|>,<|\"|>q<|\"|>:[1,None,true]} ";
  const PythonLiteral read = read_python_literal(gemma, 0, "<|\"|>");
  ASSERT_EQ(read.scan, PythonLiteral::Scan::kDone);
  EXPECT_EQ(read.json, R"({"k": "a \"b\" \\", "q": [1, null, true]})");
  EXPECT_EQ(read_python_literal("<|\"|>open", 0, "<|\"|>").scan, PythonLiteral::Scan::kPartial);
  EXPECT_EQ(read_python_literal("{k:<|", 0, "<|\"|>").scan, PythonLiteral::Scan::kPartial);
  EXPECT_EQ(read_python_literal("{k:'x'}", 0, "<|\"|>").scan, PythonLiteral::Scan::kDone) << "Python's quotes too";
}


TEST(ToolCalls, IdsAreWhatTheTemplateTakesBack) {
  const std::string openai = tool_call_id(format_named("hermes"), {}, 7);
  EXPECT_EQ(openai.rfind("call_", 0), 0u);
  EXPECT_EQ(openai.size(), 29u);
  const std::string mistral = tool_call_id(format_named("mistral"), {}, 7);
  EXPECT_EQ(mistral.size(), 9u) << "Mistral's templates refuse other lengths";
  EXPECT_NE(tool_call_id(format_named("mistral"), {}, 8), mistral);
  // Kimi K2: the id the model wrote, which its template writes for the call and its result.
  const ToolAnswer kimi = read_tool_answer(format_named("kimi-k2"),
                                           "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:3"
                                           "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
                                           true, json::array());
  ASSERT_EQ(kimi.calls.size(), 1u);
  EXPECT_EQ(tool_call_id(format_named("kimi-k2"), kimi.calls[0], 7), "functions.get_time:3");
  EXPECT_EQ(tool_calls_json(format_named("kimi-k2"), kimi.calls, 7)[0]["id"], "functions.get_time:3");
  EXPECT_EQ(read_tool_answer(format_named("mistral-v11"), "[TOOL_CALLS]get_time[CALL_ID]abcDEF123[ARGS]{}", true,
                             json::array()).calls.at(0).id, "") << "Mistral's ids are the server's to pick";
  // Solar Open: the id the model wrote before the name, which its template writes for the call's result.
  const ToolAnswer solar = read_tool_answer(format_named("solar-open"),
                                            "<|tool_calls|><|tool_call:begin|>k3j9x0a2b7<|tool_call:name|>get_time"
                                            "<|tool_call:args|>{}<|tool_call:end|><|calls|>",
                                            true, json::array());
  ASSERT_EQ(solar.calls.size(), 1u);
  EXPECT_EQ(tool_calls_json(format_named("solar-open"), solar.calls, 7)[0]["id"], "k3j9x0a2b7");
  const std::string picked = tool_call_id(format_named("solar-open"), {}, 7);
  EXPECT_EQ(picked.size(), 10u);
  EXPECT_EQ(picked.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789"), std::string::npos) << picked;
}

}  // namespace
}  // namespace kiln::text
