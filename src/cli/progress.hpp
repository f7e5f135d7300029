#pragma once
// What a waiter says while it waits, on stderr: who holds the lock, for how long, its place
// in the queue (--fair), and what is left of --wait. On a terminal, one line rewritten every
// second and cleared when the wait ends; elsewhere (CI logs, cron mail, and with -v) a line
// when the wait starts and then at most one a minute. Nothing with -q.

#include <chrono>
#include <optional>
#include <string>

#include "lock/holder.hpp"
#include "util/clock.hpp"

namespace redlock::cli {

class WaitProgress {
  public:
    using Clock = util::BootClock;

    WaitProgress(std::string name, Clock::time_point started,
                 std::optional<Clock::time_point> give_up);
    ~WaitProgress(); // clears the terminal line
    WaitProgress(const WaitProgress&) = delete;
    WaitProgress& operator=(const WaitProgress&) = delete;

    // The holder as the servers describe it (nullopt: a holder without redlock metadata).
    // With `others`, the holders of a semaphore's other permits (--limit), counted only.
    void set_holder(std::optional<lock::Holder> holder, size_t others = 0);
    // The lock could not be read as held by anyone (it changed hands meanwhile, or the
    // servers were not read yet): the line says "another owner", claiming nothing.
    void holder_unknown();
    // --fair: our place in the queue, 0 at its head (nullopt: not known).
    void set_queue_position(std::optional<long long> position) { m_position = position; }
    // Shows the state if it is due; returns when to call again.
    Clock::time_point update(Clock::time_point now);

    // The line itself, without prefix (for tests and for the log).
    [[nodiscard]] std::string text(Clock::time_point now) const;

  private:
    std::string m_name;
    Clock::time_point m_started;
    std::optional<Clock::time_point> m_give_up;
    std::optional<lock::Holder> m_holder;
    bool m_holder_read = false; // set_holder was the last word: m_holder is what was read
    size_t m_others = 0;
    std::optional<long long> m_position;
    bool m_enabled = false;
    bool m_terminal = false;
    bool m_shown = false; // a terminal line is on screen
    std::optional<Clock::time_point> m_last_line;
};

} // namespace redlock::cli
