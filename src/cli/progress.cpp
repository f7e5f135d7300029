#include "cli/progress.hpp"

#include <cstdlib>
#include <cstring>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/common.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace redlock::cli {

namespace {

using Millis = std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr auto k_terminal_interval = 1s;
constexpr auto k_log_interval = 60s;
constexpr size_t k_command_width = 60;

void write_stderr(const std::string& text) {
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored; // a closed stderr is no reason to stop waiting
}

bool is_terminal() {
    const char* term = std::getenv("TERM");
    return ::isatty(STDERR_FILENO) && !(term && std::strcmp(term, "dumb") == 0);
}

size_t terminal_width() {
    winsize ws{};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

// Cuts a line of printable text to `width` columns, counting UTF-8 code points.
std::string fit(const std::string& text, size_t width) {
    size_t columns = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80)
            continue;
        if (++columns == width)
            return text.substr(0, i);
    }
    return text;
}

} // namespace

WaitProgress::WaitProgress(std::string name, Clock::time_point started,
                           std::optional<Clock::time_point> give_up)
    : m_name(std::move(name)), m_started(started), m_give_up(give_up) {
    m_enabled = util::log::level() != util::log::Level::quiet;
    m_terminal = m_enabled && !util::log::verbose_enabled() && is_terminal();
}

WaitProgress::~WaitProgress() {
    if (m_shown)
        write_stderr("\r\033[K");
}

void WaitProgress::set_holder(std::optional<lock::Holder> holder, size_t others) {
    m_holder = std::move(holder);
    m_others = others;
    m_holder_read = true;
}

void WaitProgress::holder_unknown() {
    m_holder.reset();
    m_others = 0;
    m_holder_read = false;
}

std::string WaitProgress::text(Clock::time_point now) const {
    auto waited = std::chrono::floor<Millis>(now - m_started);
    std::string out = waited >= 1s
                          ? util::format("waiting {} for '{}'", human_duration(waited), m_name)
                          : util::format("waiting for '{}'", m_name);
    out += ", held by " + (m_holder_read ? holder_text(m_holder) : std::string("another owner"));
    if (m_holder) {
        if (auto age = age_of(m_holder->acquired_at); age && age->count() >= 0)
            out += " for " + human_duration(*age);
        std::string command = util::printable(m_holder->command);
        if (command.size() > k_command_width)
            command = fit(command, k_command_width - 3) + "...";
        out += ", running " + command;
    }
    if (m_others > 0)
        out += util::format(", and by {} other{}", m_others, m_others == 1 ? "" : "s");
    if (m_position)
        out +=
            *m_position == 0 ? "; next in line" : util::format("; {} ahead in line", *m_position);
    if (m_give_up)
        out += util::format(
            "; {} left of the wait",
            human_duration(std::max(std::chrono::ceil<Millis>(*m_give_up - now), Millis(0))));
    return out;
}

WaitProgress::Clock::time_point WaitProgress::update(Clock::time_point now) {
    if (!m_enabled)
        return Clock::time_point::max();
    if (m_terminal) {
        std::string line = "redlock: " + text(now);
        write_stderr("\r\033[K" + fit(line, terminal_width() - 1));
        m_shown = true;
        return now + k_terminal_interval;
    }
    if (!m_last_line || now - *m_last_line >= k_log_interval) {
        util::log::write(text(now));
        m_last_line = now;
    }
    return *m_last_line + k_log_interval;
}

} // namespace redlock::cli
