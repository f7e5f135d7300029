#pragma once
// A Lua script as redlock sends it (lock/scripts.hpp has them all): its source, composed
// by the compiler from fragments that each name the Redis commands they call; its SHA1
// for EVALSHA, computed by the compiler from that source, so the two cannot disagree;
// and the commands it calls, the union of its fragments' (doctor's ACL check names them
// where a refusal inside a script does not say which command it was).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "util/sha1.hpp"

namespace redlock::lock {

// The Redis commands the scripts call. Their names in place, not pointers: a table of
// pointers would be relocated at every start of the binary.
inline constexpr char k_script_commands[][17] = {
    // clang-format off
    "get", "set", "del", "incr", "hset", "pexpire", "pttl", "time", "zadd", "zrange", "zscore",
    "zrem", "exists", "hgetall", "hget", "pexpireat", "type", "zcard", "zremrangebyscore",
    "publish", "pubsub", "xadd", "xtrim", "hmget", "zrank", "zrangebyscore", "xrevrange",
    "hincrby", "decr", "hdel",
    // clang-format on
};

// Some of k_script_commands, each once, in the order first added (so, for a script, first
// called); written as their names: {"get", "set"}. A name not in the table does not compile.
class Commands {
  public:
    constexpr Commands() = default;
    consteval Commands(std::initializer_list<std::string_view> names) {
        for (auto name : names) {
            auto at = std::ranges::find_if(k_script_commands,
                                           [&](const char* known) { return name == known; });
            if (at == std::end(k_script_commands))
                throw std::invalid_argument("not in k_script_commands");
            add(static_cast<std::uint8_t>(at - std::begin(k_script_commands)));
        }
    }

    constexpr void add(const Commands& more) {
        for (size_t i = 0; i < more.m_size; ++i)
            add(more.m_ids[i]);
    }
    [[nodiscard]] constexpr bool empty() const { return m_size == 0; }

    [[nodiscard]] std::vector<std::string_view> names() const {
        std::vector<std::string_view> out;
        for (size_t i = 0; i < m_size; ++i)
            out.emplace_back(k_script_commands[m_ids[i]]);
        return out;
    }

  private:
    constexpr void add(std::uint8_t id) {
        if (std::find(m_ids.begin(), m_ids.begin() + m_size, id) == m_ids.begin() + m_size)
            m_ids[m_size++] = id;
    }

    std::array<std::uint8_t, std::size(k_script_commands)> m_ids{};
    std::uint8_t m_size = 0;
};

struct Script {
    std::string_view source;
    std::string_view sha1; // of source, for EVALSHA
    // Called with redis.call: an ACL refusal of any of them fails the script.
    Commands calls;
    // Called with redis.pcall: a refusal is only that call's error reply, and the script
    // goes on (a notice on the release channel must not cost the release).
    Commands pcalls;
    // Called with redis.call only by the --fair parts, which run only when given --fair's
    // six KEYS; doctor asks for them apart, as --fair's.
    Commands fair_calls;
};

// A piece of a script's source and the commands it calls (see Script).
template <size_t N>
struct Fragment {
    std::array<char, N> text{};
    Commands calls;
    Commands pcalls;
    Commands fair_calls;

    [[nodiscard]] constexpr std::string_view view() const { return {text.data(), N}; }
};

// What a fragment written as a literal calls: fragment(R"lua(...)lua", {.calls = {"get"}}).
struct Calls {
    Commands calls{};
    Commands pcalls{};
};

template <size_t N>
[[nodiscard]] consteval Fragment<N - 1> fragment(const char (&text)[N], Calls calls = {}) {
    Fragment<N - 1> out{};
    std::copy_n(text, N - 1, out.text.begin());
    out.calls = calls.calls;
    out.pcalls = calls.pcalls;
    return out;
}

// Fragments one after the other; each list is the union of theirs, in their order.
template <size_t... N>
[[nodiscard]] consteval Fragment<(N + ...)> join(const Fragment<N>&... parts) {
    Fragment<(N + ...)> out{};
    auto at = out.text.begin();
    auto append = [&](const auto& part) {
        at = std::copy(part.text.begin(), part.text.end(), at);
        out.calls.add(part.calls);
        out.pcalls.add(part.pcalls);
        out.fair_calls.add(part.fair_calls);
    };
    (append(parts), ...);
    return out;
}

// A fragment that runs only with --fair's six KEYS: what it calls becomes fair_calls.
template <size_t N>
[[nodiscard]] consteval Fragment<N> fair_only(Fragment<N> part) {
    part.fair_calls.add(part.calls);
    part.calls = {};
    return part;
}

namespace detail {
// Whether a line that is not empty starts at text[i].
constexpr bool starts_line(std::string_view text, size_t i) {
    return (i == 0 || text[i - 1] == '\n') && text[i] != '\n';
}
constexpr size_t count_lines(std::string_view text) {
    size_t n = 0;
    for (size_t i = 0; i < text.size(); ++i)
        n += starts_line(text, i) ? 1 : 0;
    return n;
}
} // namespace detail

// `part` with each of its lines (but empty ones) indented by `by` spaces, for a fragment used in a
// block: Lua does not care, but whoever reads the script on the server (SCRIPT, MONITOR) does.
template <const auto& part, size_t by>
inline constexpr auto indented = [] {
    constexpr size_t n = part.text.size();
    Fragment<n + by * detail::count_lines(part.view())> out{};
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
        if (detail::starts_line(part.view(), i))
            for (size_t j = 0; j < by; ++j)
                out.text[at++] = ' ';
        out.text[at++] = part.text[i];
    }
    out.calls = part.calls;
    out.pcalls = part.pcalls;
    out.fair_calls = part.fair_calls;
    return out;
}();

// A whole script's text and its SHA1, kept in a constexpr variable that the Script views:
//   inline constexpr auto k_x_text = compose(fragment(...), ...);
//   inline constexpr Script k_x_script = script(k_x_text);
template <size_t N>
struct Composed {
    Fragment<N> whole;
    util::Sha1Hex sha1;
};

template <size_t... N>
[[nodiscard]] consteval Composed<(N + ...)> compose(const Fragment<N>&... parts) {
    const auto whole = join(parts...);
    return {whole, util::sha1_hex(whole.view())};
}

template <size_t N>
[[nodiscard]] consteval Script script(const Composed<N>& composed) {
    return {composed.whole.view(),
            {composed.sha1.data(), composed.sha1.size()},
            composed.whole.calls,
            composed.whole.pcalls,
            composed.whole.fair_calls};
}

} // namespace redlock::lock
