#include "job/will.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "job/wire.hpp"
#include "process/watchdog.hpp"
#include "util/format.hpp"
#include "util/log.hpp"

namespace redlock::job {

namespace {

constexpr char k_state_magic[] = "rlwill1";
constexpr off_t k_body_offset = 512;
constexpr size_t k_max_body = size_t{1} << 20;

// The state as it lies in the file: fixed sizes, written whole.
struct RawState {
    char magic[8];
    std::int32_t phase;
    std::int32_t permit;
    char token[64];
    std::int64_t ticket; // -1: none
    std::int64_t fence;
    std::int64_t acquired_ns; // -1: not acquired
    std::int32_t listed;
    std::int32_t outcome; // -1: not ended
    std::int32_t status;  // -1: none
    std::int32_t unused;
    std::int64_t ended_ns; // -1: not ended
};
static_assert(sizeof(RawState) <= static_cast<size_t>(process::k_tree_report_offset));
static_assert(process::k_tree_report_offset + sizeof(process::TreeReport) <= k_body_offset);

long long boot_ns(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string encode_body(const WillBody& b) {
    WireWriter w;
    w.put_config(b.config);
    w.put(b.name);
    w.put(b.ttl);
    w.put(static_cast<long long>(b.limit));
    w.put(b.waiter);
    w.put(b.once_per.value_or(Millis(0)));
    w.put(b.min_hold.value_or(Millis(0)));
    w.put(b.cron_slot_ms.value_or(-1));
    w.put(b.cron_keep_until_ms.value_or(-1));
    w.put(b.run);
    w.put(b.host);
    w.put(static_cast<long long>(b.pid));
    w.put(b.user);
    w.put(b.command);
    w.put(boot_ns(b.started));
    w.put(static_cast<long long>(
        std::chrono::duration_cast<Millis>(b.started_wall.time_since_epoch()).count()));
    w.put(b.metrics_file);
    w.put(b.events_file);
    return w.bytes();
}

std::optional<WillBody> decode_body(std::string_view bytes) {
    WireReader r(bytes);
    WillBody b;
    if (!r.config(b.config))
        return std::nullopt;
    b.name = r.text();
    b.ttl = r.millis();
    b.limit = static_cast<size_t>(r.integer());
    b.waiter = r.text();
    if (auto d = r.millis(); d.count() > 0)
        b.once_per = d;
    if (auto d = r.millis(); d.count() > 0)
        b.min_hold = d;
    if (auto slot = r.integer(); slot >= 0)
        b.cron_slot_ms = slot;
    if (auto until = r.integer(); until >= 0)
        b.cron_keep_until_ms = until;
    b.run = r.text();
    b.host = r.text();
    b.pid = static_cast<long>(r.integer());
    b.user = r.text();
    b.command = r.text();
    b.started = Clock::time_point(std::chrono::nanoseconds(r.integer()));
    b.started_wall = std::chrono::system_clock::time_point(Millis(r.integer()));
    b.metrics_file = r.text();
    b.events_file = r.text();
    if (!r.ok())
        return std::nullopt;
    return b;
}

bool pwrite_all(int fd, const void* data, size_t size, off_t at) {
    return ::pwrite(fd, data, size, at) == static_cast<ssize_t>(size);
}

bool pread_all(int fd, void* data, size_t size, off_t at) {
    auto* out = static_cast<char*>(data);
    while (size > 0) {
        const ssize_t n = ::pread(fd, out, size, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        out += n;
        size -= static_cast<size_t>(n);
        at += n;
    }
    return true;
}

// A will holds the servers' passwords, and so does this process's memory: neither may be
// read by PROGRAM, which runs as the same user, through /proc/PID/fd (the memfd), /proc/
// PID/mem or ptrace. A process that is not dumpable is reachable there only by root (or
// CAP_SYS_PTRACE); PROGRAM is dumpable again after its execve, and the watchdog, which
// shares this memory, is covered with it. The cost: a redlock that crashes leaves no core.
void keep_out_of_reach() {
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        util::log::verbose("cannot keep this run's passwords from its user's other processes "
                           "(prctl: {})",
                           std::strerror(errno));
}

util::Error not_a_will(std::string_view why) {
    return {util::ErrorKind::usage,
            util::format("{} is redlock's own, for a watchdog's use: its input is not a will "
                         "({})",
                         process::k_release_command, why)};
}

} // namespace

std::optional<Will> Will::create(const WillBody& body, const lock::Lock& lock) {
    keep_out_of_reach();
    Will will;
    will.m_fd.reset(::memfd_create("redlock-will", MFD_CLOEXEC));
    if (!will.m_fd) {
        util::log::verbose("no will for this run (memfd_create: {}): if redlock is killed, its "
                           "lock waits for its ttl",
                           std::strerror(errno));
        return std::nullopt;
    }
    const std::string bytes = encode_body(body);
    const long long length = static_cast<long long>(bytes.size());
    if (!pwrite_all(will.fd(), &length, sizeof length, k_body_offset) ||
        !pwrite_all(will.fd(), bytes.data(), bytes.size(),
                    k_body_offset + static_cast<off_t>(sizeof length))) {
        util::log::verbose("no will for this run (write: {})", std::strerror(errno));
        return std::nullopt;
    }
    will.attempt(lock);
    return will;
}

void Will::attempt(const lock::Lock& lock) {
    m_state.phase = Phase::acquiring;
    m_state.token = lock.token();
    m_state.permit = lock.permit();
    m_state.ticket = lock.ticket();
    m_state.listed = lock.in_line();
    write_state();
}

void Will::acquired(const lock::Lock& lock, Clock::time_point at) {
    m_state.phase = Phase::holding;
    m_state.token = lock.token();
    m_state.permit = lock.permit();
    m_state.fence = lock.fence();
    m_state.acquired = at;
    write_state();
}

void Will::ended(Outcome outcome, std::optional<int> status, Clock::time_point at) {
    m_state.phase = Phase::ended;
    m_state.outcome = outcome;
    m_state.status = status;
    m_state.ended = at;
    write_state();
}

void Will::write_state() {
    RawState raw{};
    std::memcpy(raw.magic, k_state_magic, sizeof raw.magic);
    raw.phase = static_cast<std::int32_t>(m_state.phase);
    raw.permit = static_cast<std::int32_t>(m_state.permit);
    m_state.token.copy(raw.token, sizeof raw.token - 1);
    raw.ticket = m_state.ticket.value_or(-1);
    raw.fence = m_state.fence;
    raw.acquired_ns = m_state.acquired ? boot_ns(*m_state.acquired) : -1;
    raw.listed = m_state.listed ? 1 : 0;
    raw.outcome = m_state.outcome ? static_cast<std::int32_t>(*m_state.outcome) : -1;
    raw.status = m_state.status.value_or(-1);
    raw.ended_ns = m_state.ended ? boot_ns(*m_state.ended) : -1;
    // A will that cannot be written is one the releaser finds stale: it then releases
    // with an older token (nothing of ours there) and the lock waits for its TTL.
    (void)pwrite_all(fd(), &raw, sizeof raw, 0);
}

util::Expected<WillContents> read_will(int fd) {
    // The releaser, exec'd afresh and so dumpable again, is about to hold the passwords.
    keep_out_of_reach();
    RawState raw{};
    if (!pread_all(fd, &raw, sizeof raw, 0) ||
        std::memcmp(raw.magic, k_state_magic, sizeof raw.magic) != 0)
        return std::unexpected(not_a_will("no state"));
    long long length = 0;
    if (!pread_all(fd, &length, sizeof length, k_body_offset) || length < 0 ||
        static_cast<size_t>(length) > k_max_body)
        return std::unexpected(not_a_will("no body"));
    std::string bytes(static_cast<size_t>(length), '\0');
    if (!pread_all(fd, bytes.data(), bytes.size(),
                   k_body_offset + static_cast<off_t>(sizeof length)))
        return std::unexpected(not_a_will("a short body"));
    auto body = decode_body(bytes);
    if (!body)
        return std::unexpected(not_a_will("a malformed body"));
    WillContents will;
    will.body = std::move(*body);
    auto& st = will.state;
    if (raw.phase < static_cast<std::int32_t>(Phase::acquiring) ||
        raw.phase > static_cast<std::int32_t>(Phase::ended))
        return std::unexpected(not_a_will("an unknown phase"));
    st.phase = static_cast<Phase>(raw.phase);
    raw.token[sizeof raw.token - 1] = '\0';
    st.token = raw.token;
    st.permit = raw.permit > 0 ? static_cast<size_t>(raw.permit) : 0;
    if (raw.ticket >= 0)
        st.ticket = raw.ticket;
    st.listed = raw.listed != 0;
    st.fence = raw.fence;
    if (raw.acquired_ns >= 0)
        st.acquired = Clock::time_point(std::chrono::nanoseconds(raw.acquired_ns));
    if (raw.outcome >= 0 && raw.outcome <= static_cast<std::int32_t>(Outcome::missed))
        st.outcome = static_cast<Outcome>(raw.outcome);
    if (raw.status >= 0)
        st.status = raw.status;
    if (raw.ended_ns >= 0)
        st.ended = Clock::time_point(std::chrono::nanoseconds(raw.ended_ns));
    if (st.token.empty())
        return std::unexpected(not_a_will("no token"));
    process::TreeReport report{};
    if (pread_all(fd, &report, sizeof report, process::k_tree_report_offset) &&
        std::memcmp(report.magic, process::k_tree_report_magic, sizeof report.magic) == 0) {
        report.why[sizeof report.why - 1] = '\0';
        will.tree = TreeVerdict{report.proven == 1, report.why};
    }
    return will;
}

} // namespace redlock::job
