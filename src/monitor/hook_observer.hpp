#pragma once
// `run --on-lost CMD`: an alert when a run loses what it held: a lost lease, a force
// release (a lost lease that names who released it), or a --max-hold stop. CMD runs once,
// through /bin/sh -c, as a process of redlock's own (process/hook.hpp), with
// REDLOCK_EVENT (lost, max-hold, force-released), REDLOCK_KEY, REDLOCK_FENCE,
// REDLOCK_HELD_MS and REDLOCK_REASON in its environment. It is started once PROGRAM has
// been signalled, so it never delays the stop or the release; redlock waits for it before
// exiting, at most until its deadline (`hook_timeout`, 10 s by default), when its whole
// tree is killed.

#include <chrono>
#include <optional>
#include <string>

#include "job/events.hpp"
#include "job/run.hpp"
#include "process/hook.hpp"

namespace redlock::monitor {

inline constexpr std::chrono::milliseconds k_default_hook_timeout{10000};

class HookObserver final : public job::Observer {
  public:
    HookObserver(std::string name, std::string command, std::chrono::milliseconds timeout,
                 std::vector<std::string> secrets);

    void acquired(const job::Acquired& what) override;
    void stopping(job::StopReason reason, std::string_view why) override;
    void catch_up() override;
    job::Clock::time_point tick(job::Clock::time_point now) override;

    // The run is over: waits for the hook (if one runs) until its deadline, or until a
    // signal that would end redlock arrives, and says how it ended when it failed.
    void finish();

  private:
    void start(std::string_view event, std::string_view why);

    std::string m_name;
    std::string m_command;
    std::chrono::milliseconds m_timeout;
    std::vector<std::string> m_secrets;
    long long m_fence = 0;
    std::optional<job::Clock::time_point> m_acquired;
    bool m_started = false;                 // once per run
    std::optional<std::string> m_due_event; // a lost lease's hook, started in catch_up()
    std::string m_due_why;
    std::optional<process::Hook> m_hook;
};

} // namespace redlock::monitor
