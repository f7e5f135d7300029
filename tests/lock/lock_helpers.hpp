#pragma once
// Helpers shared by the lock tests: server configs for RedisServer fixtures, renewal
// rounds driven by a poll loop as run_command drives them, and waiting for a condition
// with a deadline (never a bare sleep).

#include <chrono>
#include <functional>
#include <poll.h>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "config/config.hpp"
#include "config/server_url.hpp"
#include "lock/lock.hpp"
#include "redis/fanout.hpp"

namespace redlock::test {

inline config::ServerConfig
server_config(const std::string& url,
              std::chrono::milliseconds command_timeout = std::chrono::seconds(2),
              std::chrono::milliseconds connect_timeout = std::chrono::seconds(2)) {
    auto parsed = config::parse_server_url(url);
    REQUIRE_MESSAGE(parsed, url);
    return config::ServerConfig{*parsed, connect_timeout, command_timeout, {}, {}, 0, {}, {}};
}

// One renewal round, driven through add_pollfds/dispatch until it is decided.
inline lock::RenewStatus renew(lock::Lock& l) {
    using namespace std::chrono_literals;
    l.start_renewal(lock::Clock::now());
    auto give_up = lock::Clock::now() + 20s;
    std::vector<pollfd> fds;
    for (;;) {
        auto status = l.poll_renewal(lock::Clock::now());
        if (status != lock::RenewStatus::pending)
            return status;
        REQUIRE_MESSAGE(lock::Clock::now() < give_up, "a renewal round did not end in 20 s");
        fds.clear();
        redis::add_pollfds(l.connections(), fds);
        (void)::poll(fds.data(), fds.size(), 20);
        redis::dispatch(l.connections(), fds, lock::Clock::now());
    }
}

// Polls `condition` until it holds or `timeout` passes; returns its last value.
inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (condition())
            return true;
        if (std::chrono::steady_clock::now() >= deadline)
            return condition();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

inline long long to_ll(const std::string& text) {
    return std::stoll(text);
}

} // namespace redlock::test
