#include "util/log.hpp"

#include <cerrno>
#include <unistd.h>

namespace redlock::util::log {

namespace {
Level g_level = Level::normal;
}

void set_level(Level level) {
    g_level = level;
}
Level level() {
    return g_level;
}

void write(std::string_view text) {
    std::string line;
    line.reserve(text.size() + 10);
    line.append("redlock: ").append(text).push_back('\n');
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        p += n;
        left -= static_cast<size_t>(n);
    }
}

} // namespace redlock::util::log
