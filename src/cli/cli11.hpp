#pragma once

// CLI11 without the start-up cost of <iostream>.
//
// With libstdc++ before GCC 13, every translation unit that includes <iostream> gets a
// static std::ios_base::Init, whose constructor builds cin, cout, cerr and the classic
// locale at start-up: 51 k instructions, an eighth of a plain `redlock run`, which
// never parses with CLI11 and never writes to std::cout. CLI11's headers include
// <iostream> only to name std::cout and std::cerr as default arguments of functions
// redlock does not call (App::exit). So this header declares those streams itself and
// keeps <iostream> out; parse_with_cli11() constructs an ios_base::Init before CLI11 runs
// ([ios.init]: the standard streams are usable once an Init object has been built), so
// the streams are there if CLI11 ever writes to them.
//
// Include this instead of <CLI/CLI.hpp>, and <iostream> nowhere in the binary: one
// translation unit with it brings the initialiser back (a test checks the binary).

#include <istream>
#include <ostream>

#if defined(__GLIBCXX__) && !defined(_GLIBCXX_IOSTREAM)
#define _GLIBCXX_IOSTREAM 1 // <iostream>'s own guard: its static Init is left out
namespace std {
extern istream cin;
extern ostream cout;
extern ostream cerr;
extern ostream clog;
} // namespace std
#endif

#include <CLI/CLI.hpp>
