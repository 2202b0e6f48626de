#include "kiln/text/grammar/json_grammar.h"

#include "kiln/text/grammar/json_schema.h"

namespace kiln::text {

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> grammar = json_schema_grammar({{"type", "object"}});
  return grammar;
}

}  // namespace kiln::text
