#pragma once
// A small file read whole: config files, password files, /etc/passwd.

#include <filesystem>
#include <optional>
#include <string>
#include <sys/types.h>

namespace redlock::util {

// read_file's error for a path that is not a regular file (not an errno value).
constexpr int k_not_regular_file = -1;

struct FileContent {
    std::string text;
    mode_t mode = 0;
};

// One open, one fstat and the reads: the whole cost of a config or password file. Only a
// regular file (or /dev/null) is read: opening a FIFO would block until a writer came (for
// ever, for a mistaken -c), and another device or a directory is never a config.
// O_NONBLOCK makes the open itself return at once; it changes nothing for the reads of a
// regular file. More than `limit` bytes fail with EFBIG; `error` is an errno value or
// k_not_regular_file. A file name given as text is not made a std::filesystem::path
// (splitting it into components allocates): /proc files are read on every run.
[[nodiscard]] std::optional<FileContent> read_file(const char* path, size_t limit, int& error);
// read_file's error as a message says it: strerror's text, or "not a regular file".
[[nodiscard]] std::string read_error_text(int error);

[[nodiscard]] inline std::optional<FileContent> read_file(const std::filesystem::path& path,
                                                          size_t limit, int& error) {
    return read_file(path.c_str(), limit, error);
}

} // namespace redlock::util
