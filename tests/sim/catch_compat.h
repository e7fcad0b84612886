// Catch2 v3 where available, else v2 (Debian 12 ships 2.13): the tests use
// only what both provide, plus CONTAINS_TEXT for a substring matcher.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define CONTAINS_TEXT(text) Catch::Matchers::ContainsSubstring(text)
#else
#include <catch2/catch.hpp>
#define CONTAINS_TEXT(text) Catch::Matchers::Contains(text)
#endif
