#pragma once
// A minimal streaming JSON writer for --json output: one document, keys in the order
// written, strings escaped per RFC 8259 and always valid UTF-8 (a byte that is not part of
// valid UTF-8 is written as U+FFFD). No reader: redlock never parses JSON.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::util {

class JsonWriter {
  public:
    JsonWriter& begin_object();
    JsonWriter& end_object();
    JsonWriter& begin_array();
    JsonWriter& end_array();
    JsonWriter& key(std::string_view name);
    JsonWriter& value(std::string_view text);
    JsonWriter& value(const char* text) { return value(std::string_view(text)); }
    JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
    JsonWriter& value(long long number);
    JsonWriter& value(int number) { return value(static_cast<long long>(number)); }
    JsonWriter& value(long number) { return value(static_cast<long long>(number)); }
    JsonWriter& value(size_t number) { return value(static_cast<long long>(number)); }
    JsonWriter& value(double number);
    JsonWriter& value(bool flag);
    JsonWriter& null();
    // An optional string or number: the value, or null.
    template <typename T>
    JsonWriter& value(const std::optional<T>& v) {
        return v ? value(*v) : null();
    }
    template <typename T>
    JsonWriter& field(std::string_view name, const T& v) {
        key(name);
        return value(v);
    }

    // The document, with a trailing newline.
    [[nodiscard]] std::string str() const { return m_out + "\n"; }

  private:
    void separate();
    std::string m_out;
    std::vector<bool> m_first; // per open container: no element written yet
    bool m_after_key = false;
};

// The JSON string literal for `text`, quotes included.
[[nodiscard]] std::string json_quote(std::string_view text);

} // namespace redlock::util
