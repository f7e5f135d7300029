#include "util/file.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "util/fd.hpp"

namespace redlock::util {

namespace {

// /dev/null reads as an empty file: `-c /dev/null` means "no config, the defaults", as
// `ssh -F /dev/null` does.
bool is_null_device(const struct stat& st) {
    return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

} // namespace

std::optional<FileContent> read_file(const char* path, size_t limit, int& error) {
    util::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) {
        error = errno;
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        error = errno;
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode) && !is_null_device(st)) {
        error = k_not_regular_file;
        return std::nullopt;
    }
    FileContent content;
    content.mode = st.st_mode;
    if (st.st_size > 0)
        content.text.reserve(std::min(static_cast<size_t>(st.st_size), limit) + 1);
    std::array<char, 4096> buffer; // not zeroed: read() fills what is used
    for (;;) {
        const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            error = errno;
            return std::nullopt;
        }
        if (n == 0)
            break;
        content.text.append(buffer.data(), static_cast<size_t>(n));
        if (content.text.size() > limit) {
            error = EFBIG;
            return std::nullopt;
        }
    }
    return content;
}

std::string read_error_text(int error) {
    if (error == k_not_regular_file)
        return "not a regular file";
    return std::strerror(error);
}

} // namespace redlock::util
