#include "kiln/text/grammar/json_grammar.h"

#include "kiln/core/error.h"
#include "kiln/text/grammar/json_schema.h"

namespace kiln::text {

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> grammar = json_schema_grammar({{"type", "object"}});
  return grammar;
}

std::shared_ptr<const Grammar> response_format_grammar(const nlohmann::ordered_json& format) {
  KILN_CHECK(format.is_object() && format.contains("type") && format["type"].is_string(),
             "'response_format' must be an object with a string 'type'");
  const std::string type = format["type"];
  if (type == "text") return nullptr;
  if (type == "json_object") return json_object_grammar();
  KILN_CHECK(type == "json_schema", "response_format.type must be \"text\", \"json_object\" or \"json_schema\", got \"",
             type, "\"");
  KILN_CHECK(format.contains("json_schema") && format["json_schema"].is_object() &&
                 format["json_schema"].contains("schema"),
             "response_format.json_schema.schema is missing");
  try {
    return json_schema_grammar(format["json_schema"]["schema"]);
  } catch (const Error& e) {
    KILN_FAIL("response_format.json_schema.schema: ", e.what());
  }
}

}  // namespace kiln::text
