#include "monitor/metrics_file.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "job/events.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"
#include "util/file.hpp"
#include "util/format.hpp"

namespace redlock::monitor {

namespace {

// A metrics file is a few kB per name; a larger one is not ours.
constexpr size_t k_max_file = size_t{16} << 20;

util::Error io_error(const std::filesystem::path& file, std::string_view what, int error) {
    return {util::ErrorKind::internal,
            util::format("cannot write metrics to {}: {}{}", file.string(), what,
                         error ? util::format(": {}", std::strerror(error)) : std::string())};
}

bool write_all(int fd, std::string_view text) {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        text.remove_prefix(static_cast<size_t>(n));
    }
    return true;
}

std::vector<std::string> all_outcomes() {
    std::vector<std::string> words;
    for (auto outcome : job::k_outcomes)
        words.emplace_back(job::outcome_name(outcome));
    return words;
}

} // namespace

std::filesystem::path metrics_file_in(const std::filesystem::path& dir, std::string_view name) {
    std::string file = "redlock_";
    for (char c : name) {
        const auto u = static_cast<unsigned char>(c);
        if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') ||
            c == '.' || c == '_' || c == '-')
            file += c;
        else
            file += util::format("%{:02X}", static_cast<unsigned>(u));
    }
    return dir / (file + ".prom");
}

util::Expected<void> update_metrics_file(const std::filesystem::path& file,
                                         const std::function<void(MetricsFile&)>& change,
                                         std::chrono::milliseconds lock_wait) {
    const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
    const std::string base = file.filename().string();
    const auto lock_path = dir / ("." + base + ".lock");
    // Only this user's runs take it (0600): another user could hold it to stop our writes.
    util::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!lock)
        return std::unexpected(
            io_error(file, util::format("lock file {}", lock_path.string()), errno));
    // Bounded: a run stopped (SIGSTOP) while it holds the lock must not hang every other
    // run of this host. The lock is held for a read and a write of a few kB.
    const auto give_up = util::SteadyClock::now() + lock_wait;
    auto pause = std::chrono::microseconds(200);
    while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR)
            return std::unexpected(io_error(file, "flock", errno));
        if (util::SteadyClock::now() >= give_up)
            return std::unexpected(
                io_error(file,
                         util::format("{} stayed locked by another process for {}ms",
                                      lock_path.string(), lock_wait.count()),
                         0));
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
    }

    MetricsFile metrics;
    mode_t mode = 0644;
    int error = 0;
    if (auto content = util::read_file(file, k_max_file, error)) {
        metrics = parse_metrics(content->text);
        mode = content->mode & 07777;
    } else if (error != ENOENT) {
        return std::unexpected(error == util::k_not_regular_file
                                   ? io_error(file, "not a regular file", 0)
                                   : io_error(file, "reading it", error));
    }
    change(metrics);
    const std::string text = render_metrics(metrics, all_outcomes());

    // ".<name>.XXXXXX": hidden, and not "*.prom", so a collector never reads it.
    std::string temp = (dir / ("." + base + ".XXXXXX")).string();
    util::UniqueFd out(::mkostemp(temp.data(), O_CLOEXEC));
    if (!out)
        return std::unexpected(io_error(file, "creating a temporary file", errno));
    auto fail = [&](std::string_view what) {
        const int e = errno;
        ::unlink(temp.c_str());
        return std::unexpected(io_error(file, what, e));
    };
    // node_exporter runs as a user of its own: the file must stay readable to it.
    if (::fchmod(out.get(), mode) != 0)
        return fail("fchmod");
    if (!write_all(out.get(), text))
        return fail("writing it");
    if (::close(out.release()) != 0) // NFS reports a full disk here
        return fail("writing it");
    if (::rename(temp.c_str(), file.c_str()) != 0)
        return fail("renaming it into place");
    return {};
}

} // namespace redlock::monitor
