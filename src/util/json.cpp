#include "util/json.hpp"

#include <cmath>
#include <cstdio>

#include "util/text.hpp"

namespace redlock::util {

std::string json_quote(std::string_view text) {
    std::string out;
    out.reserve(text.size() + 2);
    out.push_back('"');
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (static_cast<unsigned char>(c) >= 0x80) {
            // JSON is UTF-8 (RFC 8259): one odd byte from a server or another client must
            // not make the whole document unreadable. Each byte that is not part of valid
            // UTF-8 becomes U+FFFD, as decoders do.
            const size_t n = utf8_sequence_length(text, i);
            if (n == 0) {
                out += "\xEF\xBF\xBD";
            } else {
                out.append(text.substr(i, n));
                i += n - 1;
            }
            continue;
        }
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                out += buf;
            } else {
                out.push_back(c);
            }
        }
    }
    out.push_back('"');
    return out;
}

void JsonWriter::separate() {
    if (m_after_key) {
        m_after_key = false;
        return;
    }
    if (!m_first.empty()) {
        if (!m_first.back())
            m_out.push_back(',');
        m_first.back() = false;
    }
}

JsonWriter& JsonWriter::begin_object() {
    separate();
    m_out.push_back('{');
    m_first.push_back(true);
    return *this;
}

JsonWriter& JsonWriter::end_object() {
    m_out.push_back('}');
    m_first.pop_back();
    return *this;
}

JsonWriter& JsonWriter::begin_array() {
    separate();
    m_out.push_back('[');
    m_first.push_back(true);
    return *this;
}

JsonWriter& JsonWriter::end_array() {
    m_out.push_back(']');
    m_first.pop_back();
    return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
    separate();
    m_out += json_quote(name);
    m_out.push_back(':');
    m_after_key = true;
    return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
    separate();
    m_out += json_quote(text);
    return *this;
}

JsonWriter& JsonWriter::value(long long number) {
    separate();
    m_out += std::to_string(number);
    return *this;
}

JsonWriter& JsonWriter::value(double number) {
    separate();
    if (!std::isfinite(number)) {
        m_out += "null";
        return *this;
    }
    char buf[32];
    (void)std::snprintf(buf, sizeof buf, "%.3f", number);
    m_out += buf;
    return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
    separate();
    m_out += flag ? "true" : "false";
    return *this;
}

JsonWriter& JsonWriter::null() {
    separate();
    m_out += "null";
    return *this;
}

} // namespace redlock::util
