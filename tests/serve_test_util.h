// What the serving parsers' tests share.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "apps/serve/requests.h"

namespace kiln::serve {

// The 400's message for `body`, or "" when it is accepted.
template <typename Parse>
std::string refused_by(Parse parse, const std::string& body) {
  try {
    parse(body);
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.what();
  }
  return "";
}

}  // namespace kiln::serve
