// Kiln's version, as `kiln info` and kiln serve's KServe v2 server metadata report it.
#pragma once
#ifndef KILN_VERSION
#define KILN_VERSION "0.1.0"
#endif
