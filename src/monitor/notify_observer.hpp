#pragma once
// systemd's view of a run (Type=notify services), through $NOTIFY_SOCKET: STATUS= while
// waiting (who holds the lock, for how long), READY=1 once PROGRAM runs under the lock,
// WATCHDOG=1 while the lease is held (every third of $WATCHDOG_USEC, from the engine's
// wake-ups), never after it is lost, and STOPPING=1 when PROGRAM is being stopped or has
// ended. Every message is one non-blocking datagram; a socket that cannot take it is a
// -v note, once.

#include <chrono>
#include <optional>
#include <string>

#include "job/events.hpp"
#include "job/run.hpp"
#include "monitor/sd_notify.hpp"

namespace redlock::monitor {

class NotifyObserver final : public job::Observer {
  public:
    // `passthrough`: PROGRAM gets $NOTIFY_SOCKET and says READY=1 itself (a daemon that
    // knows when it is ready); redlock says everything else.
    NotifyObserver(std::string name, NotifySocket socket,
                   std::optional<std::chrono::microseconds> watchdog, bool passthrough);

    void wait_started(std::string_view name, std::string_view held_by,
                      const std::vector<lock::ServerResult>& round) override;
    [[nodiscard]] bool wants_holder() const override { return true; }
    void waiting(const job::Waiting& state) override;
    job::Clock::time_point tick(job::Clock::time_point now) override;
    void wait_ended() override { m_waiting.reset(); }
    void acquired(const job::Acquired& what) override;
    void not_acquired(const job::NotAcquired& what) override;
    void slot_taken(std::string_view name, job::Millis slot,
                    const std::optional<lock::LastRun>& last) override;
    void program_started(long pid) override;
    void stopping(job::StopReason reason, std::string_view why) override;
    void program_exited(int wait_status) override;

    // The run is over: its status, for `systemctl status`.
    void finish(const job::RunResult& result, int exit_status);

  private:
    void send(const std::string& message);
    [[nodiscard]] std::string waiting_status(job::Clock::time_point now) const;

    std::string m_name;
    NotifySocket m_socket;
    std::optional<job::Clock::duration> m_ping_every; // a third of WATCHDOG_USEC
    bool m_passthrough = false;
    bool m_failed = false; // said once with -v; later failures are not

    struct WaitState {
        std::string held_by; // "host-b (pid 42)", or the engine's words
        std::optional<std::chrono::sys_time<std::chrono::milliseconds>> since;
        std::optional<long long> queue_position;
    };
    std::optional<WaitState> m_waiting;
    job::Clock::time_point m_next_status{};

    long long m_fence = 0;
    bool m_running = false;  // PROGRAM started and not yet stopping: WATCHDOG=1 is due
    bool m_stopping = false; // STOPPING=1 said
    job::Clock::time_point m_next_ping{};
};

} // namespace redlock::monitor
