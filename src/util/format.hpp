#pragma once
// A small stand-in for std::format, which g++ 12's libstdc++ lacks: "{}" placeholders,
// "{{"/"}}" escapes, printf-style specs for numbers ("{:.1f}", "{:02x}", "{:+.1f}") and
// alignment for strings ("{:<20}", "{:>8}").
// Strings, characters, integers, floating point and bools are accepted.

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace redlock::util {

namespace detail {

inline std::string printf_number(std::string_view spec, char default_conv, const char* length,
                                 auto value) {
    std::string fmt = "%";
    char conv = default_conv;
    if (!spec.empty() && std::string_view("dxXfgeo").find(spec.back()) != std::string_view::npos) {
        conv = spec.back();
        spec.remove_suffix(1);
    }
    // std::format's alignment in printf terms: '<' is the '-' flag, '>' the default.
    if (!spec.empty() && (spec.front() == '<' || spec.front() == '>')) {
        if (spec.front() == '<')
            fmt.push_back('-');
        spec.remove_prefix(1);
    }
    fmt.append(spec);
    const bool floating = conv == 'f' || conv == 'g' || conv == 'e';
    if (!floating)
        fmt.append(length);
    fmt.push_back(conv);
    char buf[64];
    int n = 0;
    // The value's type must match the conversion: an integer printed with "{:.1f}" goes as
    // a double, a double printed with "{:x}" as an integer.
    if constexpr (std::is_floating_point_v<decltype(value)>) {
        if (floating)
            n = std::snprintf(buf, sizeof buf, fmt.c_str(), value);
        else
            n = std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<long long>(value));
    } else {
        if (floating)
            n = std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<double>(value));
        else
            n = std::snprintf(buf, sizeof buf, fmt.c_str(), value);
    }
    return std::string(buf, n > 0 ? static_cast<size_t>(std::min(n, 63)) : 0);
}

// Strings take an alignment and width: "{:<20}" pads on the right, "{:>8}" on the left.
inline void append(std::string& out, std::string_view spec, std::string_view value) {
    char align = '<';
    if (!spec.empty() && (spec.front() == '<' || spec.front() == '>')) {
        align = spec.front();
        spec.remove_prefix(1);
    }
    size_t width = 0;
    for (char c : spec)
        if (c >= '0' && c <= '9')
            width = width * 10 + static_cast<size_t>(c - '0');
    size_t pad = width > value.size() ? width - value.size() : 0;
    if (align == '>')
        out.append(pad, ' ');
    out.append(value);
    if (align == '<')
        out.append(pad, ' ');
}
inline void append(std::string& out, std::string_view spec, const std::string& value) {
    append(out, spec, std::string_view(value));
}
inline void append(std::string& out, std::string_view spec, const char* value) {
    append(out, spec, std::string_view(value));
}
inline void append(std::string& out, std::string_view, char value) {
    out.push_back(value);
}
inline void append(std::string& out, std::string_view, bool value) {
    out.append(value ? "true" : "false");
}
template <std::signed_integral T>
void append(std::string& out, std::string_view spec, T value) {
    if (spec.empty())
        out.append(std::to_string(value));
    else
        out.append(printf_number(spec, 'd', "ll", static_cast<long long>(value)));
}
template <std::unsigned_integral T>
requires(!std::same_as<T, bool>) void append(std::string& out, std::string_view spec, T value) {
    if (spec.empty())
        out.append(std::to_string(value));
    else
        out.append(printf_number(spec, 'u', "ll", static_cast<unsigned long long>(value)));
}
template <std::floating_point T>
void append(std::string& out, std::string_view spec, T value) {
    out.append(printf_number(spec, 'g', "ll", static_cast<double>(value)));
}

// Copies literal text up to the next placeholder, returning its spec (after ':'), or false
// when the format string has no placeholder left.
inline bool next_placeholder(std::string& out, std::string_view& fmt, std::string_view& spec) {
    while (!fmt.empty()) {
        char c = fmt.front();
        if ((c == '{' || c == '}') && fmt.size() > 1 && fmt[1] == c) {
            out.push_back(c);
            fmt.remove_prefix(2);
            continue;
        }
        if (c == '{') {
            auto close = fmt.find('}');
            if (close == std::string_view::npos)
                break;
            auto inside = fmt.substr(1, close - 1);
            spec = inside.starts_with(':') ? inside.substr(1) : std::string_view();
            fmt.remove_prefix(close + 1);
            return true;
        }
        out.push_back(c);
        fmt.remove_prefix(1);
    }
    out.append(fmt);
    fmt = {};
    return false;
}

} // namespace detail

template <typename... Args>
[[nodiscard]] std::string format(std::string_view fmt, const Args&... args) {
    std::string out;
    out.reserve(fmt.size() + 16 * sizeof...(args));
    std::string_view spec;
    (
        [&] {
            if (detail::next_placeholder(out, fmt, spec))
                detail::append(out, spec, args);
        }(),
        ...);
    while (detail::next_placeholder(out, fmt, spec)) {
    }
    return out;
}

} // namespace redlock::util
