#include "util/text.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace redlock::util {

namespace {

bool continuation(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

void append_hex(std::string& out, const char* prefix, unsigned value) {
    char buf[12];
    std::snprintf(buf, sizeof buf, "%s%02x", prefix, value);
    out += buf;
}

// Edit distance with adjacent transpositions.
size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i)
        d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j)
        d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    }
    return d[a.size()][b.size()];
}

} // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
    const auto at = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
    const size_t left = text.size() - pos;
    const unsigned char c = at(0);
    if (c < 0x80)
        return 1;
    // The ranges of RFC 3629, section 4: they exclude overlong forms and surrogates.
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && continuation(at(1)) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || !continuation(at(1)) || !continuation(at(2)))
            return 0;
        if ((c == 0xE0 && at(1) < 0xA0) || (c == 0xED && at(1) > 0x9F))
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || !continuation(at(1)) || !continuation(at(2)) || !continuation(at(3)))
            return 0;
        if ((c == 0xF0 && at(1) < 0x90) || (c == 0xF4 && at(1) > 0x8F))
            return 0;
        return 4;
    }
    return 0;
}

bool is_utf8(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
        const size_t n = utf8_sequence_length(text, i);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            append_hex(out, "\\x", c);
        } else if (c < 0x80) {
            out.push_back(static_cast<char>(c));
        } else if (size_t n = utf8_sequence_length(text, i); n == 0) {
            append_hex(out, "\\x", c);
        } else {
            // U+0080-U+009F are C2 80-C2 9F: C1 controls, which some terminals act on.
            const auto second = static_cast<unsigned char>(text[i + 1]);
            if (c == 0xC2 && second <= 0x9F)
                append_hex(out, "\\u00", second);
            else
                out.append(text.substr(i, n));
            i += n;
            continue;
        }
        ++i;
    }
    return out;
}

std::string clip(std::string_view text, size_t width) {
    if (text.size() <= width)
        return std::string(text);
    if (width == 0)
        return {};
    size_t end = 0;
    for (size_t i = 0; i < text.size();) {
        size_t n = utf8_sequence_length(text, i);
        n = n == 0 ? 1 : n;
        if (i + n > width - 1)
            break;
        i += n;
        end = i;
    }
    return std::string(text.substr(0, end)) + "~";
}

size_t skip_blanks(std::string_view text, size_t from) {
    while (from < text.size() && (text[from] == ' ' || text[from] == '\t'))
        ++from;
    return from;
}

std::optional<std::string_view> closest_word(std::string_view word,
                                             std::span<const std::string_view> known) {
    std::optional<std::string_view> best;
    size_t best_distance = 3; // more than two edits away is not a typo
    for (std::string_view candidate : known) {
        const size_t distance = edit_distance(word, candidate);
        if (distance < best_distance && distance < word.size()) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

} // namespace redlock::util
