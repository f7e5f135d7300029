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

// CLI11's ready-made validators (CLI/Validators.hpp: CLI::ExistingFile, CLI::Number...) are
// namespace-scope constants with std::function and std::string members, built before
// main by every run and destroyed at exit: 9.5 k instructions and 20 mallocs, a fortieth
// of a `run -- true`, for objects redlock never uses. Each of their definitions becomes
// the declaration of a function that is never defined (`const T ExistingFile();`), so
// nothing is built; naming one in redlock's code fails to compile. The headers that
// CLI11 needs are included first, so that the macros touch nothing but those lines. A
// test checks the binary (tests/CMakeLists.txt).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iterator>
#include <limits>
#include <locale>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define ExistingFile redlock_unused_ExistingFile()
#define ExistingDirectory redlock_unused_ExistingDirectory()
#define ExistingPath redlock_unused_ExistingPath()
#define NonexistentPath redlock_unused_NonexistentPath()
#define ValidIPV4 redlock_unused_ValidIPV4()
#define Number(...) redlock_unused_Number()
#define NonNegativeNumber(...) redlock_unused_NonNegativeNumber()
#define PositiveNumber(...) redlock_unused_PositiveNumber()
#include <CLI/CLI.hpp>
#undef ExistingFile
#undef ExistingDirectory
#undef ExistingPath
#undef NonexistentPath
#undef ValidIPV4
#undef Number
#undef NonNegativeNumber
#undef PositiveNumber
