// The grammars that force a tool call (kiln/text/tool_calls): they accept
// exactly calls to the tools with valid arguments, spelled as each format
// spells them, which read back; XML-style, element, keyword and Gemma
// arguments follow each parameter's schema; Llama's built-in tools.
#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/grammar/matcher.h"
#include "kiln/text/tool_calls.h"
#include "tests/tool_calls_test_util.h"

namespace kiln::text {
namespace {

using json = nlohmann::ordered_json;
using tool_calls_test::format_named;
using tool_calls_test::kTools;

bool grammar_takes(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(std::make_shared<const Grammar>(parse_gbnf(gbnf)));
  return m.accept(text) && m.can_end();
}

// A grammar that cannot honour the tools' schemas is refused, its error
// naming why.
void expect_refused(const std::string& format, const json& tools, bool parallel, const std::string& why,
                    const std::string& if_not) {
  try {
    tool_call_gbnf(format_named(format), tools, "", parallel);
    ADD_FAILURE() << if_not;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

// The grammar of tool_choice required / a named function: only calls to
// the tools, arguments valid under their parameters, spelled as the format
// spells them, which the reader reads back.
TEST(ToolCalls, ForcedCallGrammarsTakeOnlyValidCallsWhichReadBack) {
  struct Case {
    const char* format;
    std::string call, call2, bad_arguments;
  };
  const Case cases[] = {
      {"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"any\": [1]}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}\n</tool_call>"},
      {"mistral", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
       "{\"name\": \"get_time\", \"arguments\": {}}",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"kelvin\", \"city\": \"Paris\"}}]"},
      {"granite-3.3", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
       "{\"name\": \"get_time\", \"arguments\": {}}",
       "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}]"},
      {"mistral-v11", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "[TOOL_CALLS]get_time[ARGS]{}",
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Llanfairpwllgwyngyll\"}"},
      {"llama3-json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       "{\"name\": \"get_time\", \"parameters\": {}}", "{\"name\": \"get_weather\", \"parameters\": {}}"},
      {"qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nkelvin\n"
       "</parameter>\n</function>\n</tool_call>"},
      {"seed-oss", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=unit>celsius"
                   "</parameter>\n</function>\n</seed:tool_call>",
       "<seed:tool_call>\n<function=get_time>\n</function>\n</seed:tool_call>",
       "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Llanfairpwllgwyngyll</parameter>\n</function>\n"
       "</seed:tool_call>"},
      {"glm-4.7", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
       "<tool_call>get_time</tool_call>",
       "<tool_call>get_weather<arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call>"},
      {"deepseek-v3.2", "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
                        "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n",
       "<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n",
       "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"false\">\"Paris\"</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
      {"minimax-m2", "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
                     "</invoke>\n", "<invoke name=\"get_time\">\n</invoke>\n",
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter "
       "name=\"unit\">kelvin</parameter>\n</invoke>\n</minimax:tool_call>"},
      {"kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                  "{\"city\": \"Paris\"}<|tool_call_end|>",
       "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather<|tool_call_argument_begin|>"
       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>"},  // (no index)
      {"solar-open", "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>"
                     "{\"city\": \"Paris\"}<|tool_call:end|>",
       "<|tool_call:begin|>zz99yy88xx<|tool_call:name|>get_time<|tool_call:args|>{}<|tool_call:end|>",
       "<|tool_calls|><|tool_call:begin|>ABC<|tool_call:name|>get_weather<|tool_call:args|>{\"city\": \"Paris\"}"
       "<|tool_call:end|><|calls|>"},  // (an id Solar's template does not ask for)
      {"apertus", "<|tools_prefix|>[{\"get_weather\": {\"city\": \"Paris\"}}", "{\"get_time\": {}}",
       "<|tools_prefix|>[{\"get_weather\": {\"town\": \"Paris\"}}]<|tools_suffix|>"},
      {"minicpm5", "<function name=\"get_weather\"><param name=\"city\">Paris</param></function>",
       "<function name=\"get_time\"></function>",
       "<function name=\"get_weather\"><param name=\"city\">Par<is</param></function>"},  // '<' only in CDATA
      {"minimax-m3", "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">]<]minimax[>[<city>Paris"
                     "]<]minimax[>[</city>]<]minimax[>[</invoke>\n",
       "]<]minimax[>[<invoke name=\"get_time\">]<]minimax[>[</invoke>\n",
       "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">]<]minimax[>[<unit>celsius]<]minimax[>[</unit>"
       "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"},  // city is required
      {"kimi-k3", "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" "
                  "type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>",
       "<|open|>call tool=\"get_time\" index=\"2\"<|sep|><|close|>call<|sep|>",
       "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" "
       "type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"},  // city is text
      {"harmony", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
       "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>",
       "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"town\": \"Paris\"}<|call|>"},
      {"deepseek-r1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
                      "\"Paris\"}\n```<｜tool▁call▁end｜>",
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"town\": \"Paris\"}\n"
       "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"minimax-m1", "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
       "{\"name\": \"get_time\", \"arguments\": {}}",
       "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n"
       "</tool_calls>"},
      {"hunyuan", "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>city"
                  "</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n</tool_call:opensource>\n",
       "<tool_call:opensource>get_time<tool_sep:opensource>\n</tool_call:opensource>\n",
       "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n</tool_call:opensource>\n"
       "</tool_calls:opensource>"},  // city is required
      {"command-r7b", "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": "
                      "{\"city\": \"Paris\"}}",
       "{\"tool_call_id\": \"12\", \"tool_name\": \"get_time\", \"parameters\": {}}",
       "<|START_ACTION|>[\n    {\"tool_call_id\": \"x\", \"tool_name\": \"get_weather\", \"parameters\": "
       "{\"city\": \"Paris\"}}\n]<|END_ACTION|>"},  // the index is digits
      {"gemma-4", "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>",
       "<|tool_call>call:get_time{}<tool_call|>",
       "<|tool_call>call:get_weather{city:\"Paris\"}<tool_call|>"},  // a JSON string is not the notation's
      {"lfm2", "<|tool_call_start|>[get_weather(city=\"Paris\", unit=\"celsius\")", "get_time()",
       "<|tool_call_start|>[get_weather(unit=\"celsius\")]<|tool_call_end|>"},  // city is required
      {"muse-glimmer", " to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_weather\">\n"
                       "<atem:parameter name=\"city\">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
       " to=get_time<|message|><atem:function_calls>\n<atem:invoke name=\"get_time\">\n"
       "</atem:invoke>\n</atem:function_calls>",
       " to=get_weather<|message|><atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:parameter "
       "name=\"unit\">kelvin</atem:parameter>\n</atem:invoke>\n</atem:function_calls>"},
      // Functionary 3.2: the prompt wrote the first call's ">>>".
      {"functionary-v3.2", "get_weather\n{\"city\": \"Paris\"}", ">>>get_time\n{}", "get_weather\n{\"town\": \"Paris\"}"},
      {"firefunction-v2", "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
       "{\"name\": \"get_time\", \"arguments\": {}}",
       "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}]"},
  };
  for (const Case& c : cases) {
    const ToolCallFormat& f = format_named(c.format);
    const std::string end = f.section_end;
    const std::string one = c.call + end, two = c.call + f.between + c.call2 + end;
    const std::string any = tool_call_gbnf(f, kTools, "", true);
    EXPECT_TRUE(grammar_takes(any, one)) << c.format;
    EXPECT_TRUE(grammar_takes(any, two)) << c.format;
    EXPECT_FALSE(grammar_takes(any, c.bad_arguments)) << c.format;
    EXPECT_FALSE(grammar_takes(tool_call_gbnf(f, kTools, "", false), two)) << c.format << ": one call unless parallel";
    EXPECT_FALSE(grammar_takes(tool_call_gbnf(f, kTools, "get_time", false), one)) << c.format << ": the named one only";
    EXPECT_TRUE(grammar_takes(tool_call_gbnf(f, kTools, "get_weather", false), one)) << c.format;
    const ToolAnswer read = read_tool_answer(f, two, true, kTools);
    ASSERT_EQ(read.calls.size(), 2u) << c.format;
    EXPECT_EQ(read.calls[0].name, "get_weather");
    EXPECT_EQ(read.calls[1].name, "get_time");
    EXPECT_TRUE(json::parse(read.calls[0].arguments).contains("city")) << c.format;
    EXPECT_EQ(read.content, "");
  }
  // gpt-oss (harmony): a call spelled with its recipient in the role (as its template writes calls) is constrained
  // too. Under auto either spelling's opening triggers the grammar, from the first one the text holds (the
  // channel spelling holds the role spelling's opening: it starts first).
  const ToolCallFormat& harmony = format_named("harmony");
  const ToolConstraint auto_calls = tool_call_constraint(harmony, kTools, {ToolChoice::Mode::kAuto, ""}, false);
  ASSERT_EQ(auto_calls.triggers, (std::vector<std::string>{"<|channel|>commentary to=functions.", " to=functions."}));
  for (const std::string answer :
       {"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
        "\"Paris\"}<|call|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"}) {
    size_t first = std::string::npos;
    for (const std::string& trigger : auto_calls.triggers) first = std::min(first, answer.find(trigger));
    ASSERT_NE(first, std::string::npos) << answer;
    GrammarMatcher m(auto_calls.grammar);
    EXPECT_TRUE(m.accept(answer.substr(first)) && m.can_end()) << answer;
    const ToolAnswer read = read_tool_answer(harmony, answer.substr(first), true, kTools);
    ASSERT_EQ(read.calls.size(), 1u) << answer;
    EXPECT_EQ(read.calls[0].arguments, R"({"city": "Paris"})");
  }
  EXPECT_FALSE(grammar_takes(tool_call_gbnf(harmony, kTools, "", false),
                             " to=functions.get_weather<|channel|>commentary json<|message|>{\"town\": \"Paris\"}<|call|>"));
  EXPECT_FALSE(grammar_takes(tool_call_gbnf(harmony, kTools, "get_time", false),
                             " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"));
  // Functionary 3.2 under auto: the grammar starts at a later ">>>" (after the content), and spells it.
  const ToolCallFormat& functionary = format_named("functionary-v3.2");
  const ToolConstraint after_content = tool_call_constraint(functionary, kTools, {ToolChoice::Mode::kAuto, ""}, true);
  ASSERT_EQ(after_content.triggers, std::vector<std::string>{">>>"});
  GrammarMatcher triggered(after_content.grammar);
  EXPECT_TRUE(triggered.accept(">>>get_weather\n{\"city\": \"Paris\"}>>>get_time\n{}") && triggered.can_end());
  EXPECT_FALSE(grammar_takes(tool_call_gbnf(functionary, kTools, "", true, true), ">>>all\nHello"));
  // A constrained answer names the content's recipient first (the answer's own rules keep their names).
  const Grammar recipient_first =
      grammar_after_content_recipient(functionary, parse_gbnf("root ::= recipient\nrecipient ::= \"{}\""));
  GrammarMatcher content_answer(std::make_shared<const Grammar>(recipient_first));
  EXPECT_TRUE(content_answer.accept("all\n{}") && content_answer.can_end());
  GrammarMatcher unnamed(std::make_shared<const Grammar>(recipient_first));
  EXPECT_FALSE(unnamed.accept("{}") && unnamed.can_end()) << "the recipient comes first";
  // Offered no tools, its answer is content, less the recipient that marks it.
  EXPECT_EQ(read_tool_answer(functionary, "all\nHi>>>get_time\n{}", true, json()).content, "Hi>>>get_time\n{}");
  EXPECT_EQ(read_tool_answer(functionary, "get_time\n{}", true, json()).content, "get_time\n{}");
  EXPECT_EQ(read_tool_answer(functionary, "al", false, json()).content, "") << "may still be the recipient";
  // muse-glimmer under auto: its content's and reasoning's messages open as a call's does (" to="), so a call's
  // trigger names the tool.
  const ToolCallFormat& muse = format_named("muse-glimmer");
  const ToolConstraint muse_auto = tool_call_constraint(muse, kTools, {ToolChoice::Mode::kAuto, ""}, true);
  ASSERT_EQ(muse_auto.triggers.size(), 2u);
  EXPECT_EQ(muse_auto.triggers[1], " to=get_time<|message|><atem:function_calls>\n<atem:invoke name=\"");
  GrammarMatcher muse_call(muse_auto.grammar);
  EXPECT_TRUE(muse_call.accept(" to=get_time<|message|><atem:function_calls>\n<atem:invoke name=\"get_time\">\n"
                               "</atem:invoke>\n</atem:function_calls>") && muse_call.can_end());
  // GigaChat 3 spells one call a turn: parallel or not, its grammar takes one.
  const ToolCallFormat& giga = format_named("gigachat3");
  const std::string giga_call = "<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"get_time\", \"arguments\": {}}";
  EXPECT_TRUE(grammar_takes(tool_call_gbnf(giga, kTools, "", true), giga_call));
  EXPECT_FALSE(grammar_takes(tool_call_gbnf(giga, kTools, "", true), giga_call + "{\"name\": \"get_time\", \"arguments\": {}}"));
  EXPECT_THROW(tool_call_gbnf(format_named("hermes"), kTools, "nope", false), Error);
  const json bad = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"n": {"type": "array", "uniqueItems": true}}}}}])");
  expect_refused("hermes", bad, true, "uniqueItems", "uniqueItems cannot be honoured");
}

// XML-style values: raw text that cannot close its tag early, or what the
// string's schema says (pattern translated for raw text, format, length),
// and JSON for other types; each accepted call reads back valid.
TEST(ToolCalls, XmlParameterGrammarsFollowEachParametersSchema) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}, "day": {"type": "string",
      "format": "date"}, "short": {"type": "string", "maxLength": 3}, "note": {"type": "string"},
      "n": {"type": "integer", "minimum": 1, "maximum": 9}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["code", "n"]}}}])");
  const std::string gbnf = tool_call_gbnf(format_named("qwen3-coder"), tools, "", false);
  auto call = [](const std::string& parameters) {
    return "<tool_call>\n<function=f>\n" + parameters + "</function>\n</tool_call>";
  };
  auto parameter = [](const std::string& key, const std::string& value) {
    return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
  };
  const std::string code = parameter("code", "AB-123"), n = parameter("n", "7");
  const std::vector<std::string> valid = {
      call(code + n),
      call(code + parameter("day", "2024-02-28") + parameter("short", "a&b") + parameter("note", "x < y\n  <b>z\n") + n +
           parameter("tags", "[\"a\", \"b\"]")),
  };
  const std::vector<std::string> invalid = {
      call(n),                                                      // code is required
      call(parameter("code", "ab-123") + n),                        // the pattern
      call(code + parameter("day", "2024-02-30") + n),              // the format
      call(code + parameter("short", "abcd") + n),                  // maxLength
      call(code + parameter("note", "a</parameter>b") + n),         // a value cannot close its tag
      call(code + parameter("n", "10")),                            // maximum
      call(code + n + parameter("tags", "[1]")),                    // items
      call(code + n + parameter("other", "x")),                     // not a parameter
  };
  for (const std::string& text : valid) {
    EXPECT_TRUE(grammar_takes(gbnf, text)) << text;
    const ToolAnswer read = read_tool_answer(format_named("qwen3-coder"), text, true, tools);
    ASSERT_EQ(read.calls.size(), 1u) << text;
    const json arguments = json::parse(read.calls[0].arguments);
    EXPECT_EQ(arguments["code"], "AB-123");
    EXPECT_EQ(arguments["n"], 7);
  }
  for (const std::string& text : invalid) EXPECT_FALSE(grammar_takes(gbnf, text)) << text;
  // MiniCPM5's: text holding '<' only inside <![CDATA[...]]>, which reads back without it.
  const ToolCallFormat& minicpm = format_named("minicpm5");
  const std::string cdata_gbnf = tool_call_gbnf(minicpm, tools, "", false);
  auto minicpm_call = [](const std::string& note) {
    return "<function name=\"f\"><param name=\"code\">AB-123</param><param name=\"note\">" + note +
           "</param><param name=\"n\">7</param></function>";
  };
  EXPECT_TRUE(grammar_takes(cdata_gbnf, minicpm_call("<![CDATA[x < y]] z]]>")));
  EXPECT_FALSE(grammar_takes(cdata_gbnf, minicpm_call("x < y")));
  EXPECT_FALSE(grammar_takes(cdata_gbnf, minicpm_call("<![CDATA[a]]>b]]>"))) << "the first ]]> ends it";
  const ToolAnswer cdata = read_tool_answer(minicpm, minicpm_call("<![CDATA[x < y]] z]]>"), true, tools);
  ASSERT_EQ(cdata.calls.size(), 1u);
  EXPECT_EQ(json::parse(cdata.calls[0].arguments)["note"], "x < y]] z");
  const json angle = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"tag": {"type": "string", "pattern": "^<[a-z]+>$"}}}}}])");
  expect_refused("qwen3-coder", angle, false, "cannot hold", "a pattern asking for '<' compiled for raw text");
}

// MiniMax M3's nested elements: an object's members, an array's items
// within its bounds, text that cannot close its tag early, and JSON for
// other types; each accepted call reads back as the object it stands for.
TEST(ToolCalls, ElementGrammarsFollowTheNestedSchema) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"place": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
      "required": ["city"]}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
      "ok": {"type": "boolean"}}, "required": ["place"]}}}])");
  const ToolCallFormat& m3 = format_named("minimax-m3");
  const std::string gbnf = tool_call_gbnf(m3, tools, "", false);
  const std::string mm = "]<]minimax[>[";
  auto call = [&](const std::string& members) {
    return mm + "<tool_call>\n" + mm + "<invoke name=\"f\">" + members + mm + "</invoke>\n" + mm + "</tool_call>";
  };
  auto element = [&](const std::string& tag, const std::string& value) {
    return mm + "<" + tag + ">" + value + mm + "</" + tag + ">";
  };
  const std::string place = element("place", element("city", "New ]<York") + element("zip", "75001"));
  const std::string valid = call(place + element("tags", element("item", "a") + element("item", "b")) +
                                 element("ok", "false"));
  EXPECT_TRUE(grammar_takes(gbnf, valid));
  const ToolAnswer read = read_tool_answer(m3, valid, true, tools);
  ASSERT_EQ(read.calls.size(), 1u);
  EXPECT_EQ(json::parse(read.calls[0].arguments),
            json::parse(R"({"place": {"city": "New ]<York", "zip": 75001}, "tags": ["a", "b"], "ok": false})"));
  for (const std::string& invalid : {
           call(element("tags", element("item", "a"))),                                        // place is required
           call(element("place", element("zip", "1"))),                                        // city is required
           call(place + element("tags", element("item", "c"))),                                // not an item's enum
           call(place + element("tags", element("item", "a") + element("item", "a") + element("item", "b"))),  // maxItems
           call(place + element("ok", "yes")),                                                 // not a boolean
       })
    EXPECT_FALSE(grammar_takes(gbnf, invalid)) << invalid;
}

// Python keyword arguments (LFM2): the schema's order, the required ones
// always and the optional ones at most once, with a comma between two.
TEST(ToolCalls, KeywordArgumentGrammarsKeepTheSchemasOrder) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "array"}}, "required": ["b"]}}},
      {"type": "function", "function": {"name": "g", "parameters": {"type": "object",
      "properties": {"a": {"type": "boolean"}, "c": {"type": "null"}}}}}])");
  const ToolCallFormat& lfm2 = format_named("lfm2");
  const std::string gbnf = tool_call_gbnf(lfm2, tools, "", false);
  auto call = [](const std::string& body) { return "<|tool_call_start|>[" + body + "]<|tool_call_end|>"; };
  for (const char* body : {"f(b=\"x\")", "f(a=1, b=\"x\")", "f(b=\"x\", c=[])", "f(a=1, b=\"x\", c=[1, \"y\"])", "g()",
                           "g(c=null)", "g(a=true, c=null)"}) {
    EXPECT_TRUE(grammar_takes(gbnf, call(body))) << body;
    const ToolAnswer read = read_tool_answer(lfm2, call(body), true, tools);
    ASSERT_EQ(read.calls.size(), 1u) << body;
    EXPECT_TRUE(json::accept(read.calls[0].arguments)) << read.calls[0].arguments;
  }
  for (const char* body : {"f()", "f(a=1)", "f(b=\"x\", a=1)", "f(, b=\"x\")", "f(b=\"x\",)", "f(b=1)", "g(a=1)",
                           "g(c=null, a=true)"})
    EXPECT_FALSE(grammar_takes(gbnf, call(body))) << body;
}

// Gemma 4's notation all the way down: nested objects' keys bare, strings
// between <|"|> marks (raw: a quote or a backslash is itself), enums,
// lengths and patterns so spelled, and no whitespace.
TEST(ToolCalls, GemmaGrammarsWriteItsNotation) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"type": "object", "properties": {"x": {"enum": ["p", "q"]}, "y": {"type": "array",
      "items": {"type": "string", "maxLength": 3}}}, "required": ["x"]}, "b": {"type": "string"},
      "c": {"type": "string", "pattern": "^[0-9]{2}$"}, "d": {}}, "required": ["a"]}}}])");
  const ToolCallFormat& gemma = format_named("gemma-4");
  const std::string gbnf = tool_call_gbnf(gemma, tools, "", false);
  const std::string q = "<|\"|>";
  auto call = [](const std::string& body) { return "<|tool_call>call:f{" + body + "}<tool_call|>"; };
  for (const std::string& body :
       {"a:{x:" + q + "p" + q + "}", "a:{x:" + q + "q" + q + ",y:[" + q + "ab" + q + "," + q + q + "]}",
        "a:{x:" + q + "p" + q + "},b:" + q + "say \"hi\" \\ <b>" + q + ",c:" + q + "42" + q,
        "a:{x:" + q + "p" + q + "},d:{k:[1,true,null," + q + "s" + q + "]}"}) {
    EXPECT_TRUE(grammar_takes(gbnf, call(body))) << body;
    const ToolAnswer read = read_tool_answer(gemma, call(body), true, tools);
    ASSERT_EQ(read.calls.size(), 1u) << body;
    EXPECT_TRUE(json::accept(read.calls[0].arguments)) << read.calls[0].arguments;
  }
  EXPECT_EQ(read_tool_answer(gemma, call("a:{x:" + q + "p" + q + "},b:" + q + "say \"hi\"" + q), true, tools)
                .calls[0].arguments, R"({"a": {"x": "p"}, "b": "say \"hi\""})");
  for (const std::string& body :
       {std::string(""), std::string("a:{x:\"p\"}"), "a:{x:" + q + "r" + q + "}", "a: {x:" + q + "p" + q + "}",
        "a:{x:" + q + "p" + q + ",y:[" + q + "abcd" + q + "]}", "a:{x:" + q + "p" + q + "},c:" + q + "4" + q,
        "b:" + q + "x" + q + ",a:{x:" + q + "p" + q + "}"})
    EXPECT_FALSE(grammar_takes(gbnf, call(body))) << body;
  // Keys in the order its template's dictsort writes them (by the lowercased key), at every level.
  const json unsorted = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zone": {"type": "integer"}, "City": {"type": "object", "properties": {"y": {"type": "integer"},
      "x": {"type": "integer"}}, "required": ["y"]}}, "required": ["zone", "City"]}}}])");
  const std::string sorted_gbnf = tool_call_gbnf(gemma, unsorted, "", false);
  EXPECT_TRUE(grammar_takes(sorted_gbnf, call("City:{x:1,y:2},zone:3")));
  EXPECT_TRUE(grammar_takes(sorted_gbnf, call("City:{y:2},zone:3")));
  EXPECT_FALSE(grammar_takes(sorted_gbnf, call("zone:3,City:{x:1,y:2}")));
  EXPECT_FALSE(grammar_takes(sorted_gbnf, call("City:{y:2,x:1},zone:3")));
  const json spaced = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a b": {"type": "string"}}}}}])");
  EXPECT_THROW(tool_call_gbnf(gemma, spaced, "", false), Error) << "a key its notation cannot write bare";
}

// Llama 3.1's built-in tools: named to the template (builtin_tools), and
// forced calls spelled NAME.call(KEY="VALUE") after <|python_tag|>.
TEST(ToolCalls, LlamaBuiltInToolsAreCalledAfterThePythonTag) {
  const ToolCallFormat& llama = format_named("llama3-json");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "brave_search", "parameters": {
      "type": "object", "properties": {"query": {"type": "string", "maxLength": 20}}, "required": ["query"]}}},
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  EXPECT_EQ(builtin_tools(llama, tools), json::parse(R"(["brave_search"])"));
  EXPECT_EQ(builtin_tools(format_named("hermes"), tools), json::array()) << "other formats name none";
  const std::string gbnf = tool_call_gbnf(llama, tools, "", false);
  EXPECT_TRUE(grammar_takes(gbnf, "<|python_tag|>brave_search.call(query=\"Paris weather\")"));
  EXPECT_TRUE(grammar_takes(gbnf, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"));
  EXPECT_FALSE(grammar_takes(gbnf, "<|python_tag|>brave_search.call(query=\"a query longer than twenty\")"));
  EXPECT_FALSE(grammar_takes(gbnf, "<|python_tag|>get_weather.call(city=\"Paris\")")) << "not a built-in tool";
  const ToolAnswer read = read_tool_answer(llama, "<|python_tag|>brave_search.call(query=\"Paris weather\")", true, tools);
  ASSERT_EQ(read.calls.size(), 1u);
  EXPECT_EQ(json::parse(read.calls[0].arguments), json::parse(R"({"query": "Paris weather"})"));
  const json typed = json::parse(R"([{"type": "function", "function": {"name": "wolfram_alpha", "parameters": {
      "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}])");
  EXPECT_THROW(tool_call_gbnf(llama, typed, "", false), Error) << "NAME.call(...) holds strings only";
}

}  // namespace
}  // namespace kiln::text
