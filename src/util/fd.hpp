#pragma once
// An owned file descriptor, closed on destruction; and the standard descriptors kept
// occupied, so that nothing redlock opens can become stdin, stdout or stderr.

#include <unistd.h>
#include <utility>

namespace redlock::util {

class UniqueFd {
  public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : m_fd(fd) {}
    UniqueFd(UniqueFd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept {
        if (this != &other)
            reset(std::exchange(other.m_fd, -1));
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    [[nodiscard]] int get() const { return m_fd; }
    [[nodiscard]] explicit operator bool() const { return m_fd >= 0; }
    // Gives the descriptor up without closing it.
    [[nodiscard]] int release() { return std::exchange(m_fd, -1); }
    void reset(int fd = -1) {
        if (m_fd >= 0)
            ::close(m_fd);
        m_fd = fd;
    }

  private:
    int m_fd = -1;
};

// Opens /dev/null on each of fds 0-2 that is closed (`redlock ... >&- 2>&-`). Without it the
// first socket redlock opens would become stderr and its messages would go to a Redis
// server. Call it first thing in main, before anything opens a descriptor. Returns false
// when a closed one could not be filled (no /dev/null): there is then nowhere safe to write.
[[nodiscard]] bool occupy_standard_fds();

// Whether `fd` (0, 1 or 2) was closed when occupy_standard_fds() ran: output meant for it
// now goes to /dev/null, which a command whose output matters must treat as a failure.
[[nodiscard]] bool was_closed_at_start(int fd);

} // namespace redlock::util
