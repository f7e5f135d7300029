#include "util/redact.hpp"

#include <array>
#include <vector>

namespace redlock::util {

namespace {

// Where a word of a command line ends: whitespace, a quote, or a shell operator.
bool is_boundary(char c) {
    return std::string_view(" \t\r\n'\"`;|&<>()").find(c) != std::string_view::npos;
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

// Whether an option or variable name says that its value is a secret. Compared without
// case and without '-', '_' and '.', so that --auth-token, AUTH_TOKEN and authToken match.
bool names_a_secret(std::string_view name) {
    std::string folded;
    for (char c : name) {
        if (c == '-' || c == '_' || c == '.')
            continue;
        folded.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    }
    static constexpr std::array<std::string_view, 10> k_words{
        "pass",   "pwd",       "secret",     "token",      "auth",
        "apikey", "accesskey", "privatekey", "credential", "cookie"};
    for (auto word : k_words)
        if (folded.find(word) != std::string::npos)
            return true;
    return false;
}

// Ranges [begin, end) of `text` to replace with k_redacted; may overlap.
using Ranges = std::vector<std::pair<size_t, size_t>>;

// The end of a value starting at `pos`: a quoted value runs to its closing quote (which
// is kept), anything else to the next boundary.
std::pair<size_t, size_t> value_at(std::string_view text, size_t pos, char enclosing_quote) {
    if (pos < text.size() && (text[pos] == '\'' || text[pos] == '"')) {
        char q = text[pos];
        auto close = text.find(q, pos + 1);
        return {pos + 1, close == std::string_view::npos ? text.size() : close};
    }
    size_t end = pos;
    if (enclosing_quote) // 'Authorization: Bearer X': the rest of the quoted word
        while (end < text.size() && text[end] != enclosing_quote)
            ++end;
    else
        while (end < text.size() && !is_boundary(text[end]))
            ++end;
    return {pos, end};
}

void find_url_passwords(std::string_view text, Ranges& out) {
    for (auto scheme = text.find("://"); scheme != std::string_view::npos;
         scheme = text.find("://", scheme + 3)) {
        size_t start = scheme + 3;
        size_t end = start;
        while (end < text.size() && !is_boundary(text[end]) &&
               std::string_view("/?#").find(text[end]) == std::string_view::npos)
            ++end;
        auto authority = text.substr(start, end - start);
        auto at = authority.rfind('@');
        if (at == std::string_view::npos)
            continue;
        auto colon = authority.find(':');
        // No ':' in the user info: a user name only, nothing secret (RFC 3986).
        if (colon != std::string_view::npos && colon < at && colon + 1 < at)
            out.emplace_back(start + colon + 1, start + at);
    }
}

void find_named_values(std::string_view text, Ranges& out) {
    const bool redis_cli = text.find("redis-cli") != std::string_view::npos;
    size_t i = 0;
    while (i < text.size()) {
        if (i > 0 && !is_boundary(text[i - 1])) {
            ++i;
            continue;
        }
        char quote = i > 0 && (text[i - 1] == '\'' || text[i - 1] == '"') ? text[i - 1] : 0;
        size_t name_end = i;
        while (name_end < text.size() && is_name_char(text[name_end]))
            ++name_end;
        if (name_end == i) {
            ++i;
            continue;
        }
        auto name = text.substr(i, name_end - i);
        bool option = name.starts_with('-');
        bool secret = names_a_secret(name) || (redis_cli && name == "-a");
        if (secret && name_end < text.size()) {
            char sep = text[name_end];
            if (sep == '=') {
                auto [b, e] = value_at(text, name_end + 1, 0);
                if (e > b)
                    out.emplace_back(b, e);
            } else if (sep == ':' && !option) {
                size_t v = name_end + 1;
                while (v < text.size() && text[v] == ' ')
                    ++v;
                auto [b, e] = value_at(text, v, quote);
                if (e > b)
                    out.emplace_back(b, e);
            } else if ((sep == ' ' || sep == '\t') && option) {
                size_t v = name_end;
                while (v < text.size() && (text[v] == ' ' || text[v] == '\t'))
                    ++v;
                if (v < text.size() && text[v] != '-') {
                    auto [b, e] = value_at(text, v, 0);
                    if (e > b)
                        out.emplace_back(b, e);
                }
            }
        }
        i = name_end;
    }
}

} // namespace

std::string redact_secrets(std::string_view text, std::span<const std::string> known) {
    Ranges ranges;
    for (const auto& secret : known) {
        if (secret.empty())
            continue;
        for (auto pos = text.find(secret); pos != std::string_view::npos;
             pos = text.find(secret, pos + 1))
            ranges.emplace_back(pos, pos + secret.size());
    }
    find_url_passwords(text, ranges);
    find_named_values(text, ranges);
    if (ranges.empty())
        return std::string(text);

    // Mark, then copy: overlapping ranges become one mask.
    std::vector<bool> masked(text.size(), false);
    for (auto [b, e] : ranges)
        for (size_t k = b; k < e && k < text.size(); ++k)
            masked[k] = true;
    std::string out;
    out.reserve(text.size());
    for (size_t k = 0; k < text.size();) {
        if (!masked[k]) {
            out.push_back(text[k++]);
            continue;
        }
        out += k_redacted;
        while (k < text.size() && masked[k])
            ++k;
    }
    return out;
}

} // namespace redlock::util
