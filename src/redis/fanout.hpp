#pragma once
// Driving several connections at once from one poll() loop. The caller starts a request on
// each connection, then either integrates them into its own loop (add_pollfds + dispatch)
// or blocks in wait() until its own decision rule says the round is decided.

#include <functional>
#include <optional>
#include <poll.h>
#include <span>
#include <vector>

#include "redis/connection.hpp"

namespace redlock::redis {

// Appends a pollfd for each busy connection, in order.
void add_pollfds(std::span<Connection> conns, std::vector<pollfd>& fds);

// Hands poll() results back to the busy connections (the same ones, in the same order, as
// add_pollfds saw) and expires those whose deadline has passed.
void dispatch(std::span<Connection> conns, std::span<const pollfd> fds, Clock::time_point now);

// The earliest deadline among busy connections.
[[nodiscard]] std::optional<Clock::time_point> earliest_deadline(std::span<const Connection> conns);

[[nodiscard]] bool any_busy(std::span<const Connection> conns);

enum class WaitResult { decided, interrupted };

// Runs the round until `decided()` returns true or no connection is busy any more.
// Returns `interrupted` as soon as `interrupt_fd` (if >= 0) becomes readable, leaving the
// requests in flight. Connections still busy after a decision are abandoned. When
// `recheck_at` points at a time (which `decided` may set or move), poll() wakes by then
// too, so that a rule that depends on time ("a majority, then a short grace") is judged
// on time even when no reply arrives.
WaitResult wait(std::span<Connection> conns, const std::function<bool()>& decided,
                int interrupt_fd = -1,
                const std::optional<Clock::time_point>* recheck_at = nullptr);

} // namespace redlock::redis

namespace redlock::redis {

// Requests not yet written, on connections still connecting to a server slow to accept (a
// full backlog, a host dropping packets), are finished by a detached process, so that the
// caller need not sit on the connect timeout and the request is still not given up. The
// caller's copies of those connections are abandoned. Used for releases, whose outcome on a
// straggler the caller no longer waits for. Returns how many requests were handed over.
size_t finish_unsent_in_background(std::span<Connection> conns);

// Sends `command` to every connection at once and waits until each has answered, failed
// or timed out. Outcomes are read from each connection afterwards.
void request_all(std::span<Connection> conns, const std::string& command,
                 const std::string& noscript_fallback = {});

// Makes one connection per server.
[[nodiscard]] std::vector<Connection> connect_all(const std::vector<config::ServerConfig>& servers);

} // namespace redlock::redis
