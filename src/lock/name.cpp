#include "lock/name.hpp"

#include "util/format.hpp"

namespace redlock::lock {

namespace {
bool allowed(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '/' || c == '@' || c == '+' || c == '-';
}
} // namespace

util::Expected<void> validate_name(std::string_view name) {
    if (name.empty())
        return util::fail(util::ErrorKind::usage, "lock name must not be empty");
    if (name.size() > k_max_name_length)
        return util::fail(util::ErrorKind::usage,
                          util::format("lock name is {} characters long; at most {} are allowed",
                                       name.size(), k_max_name_length));
    // The name is echoed only when all of it is printable ASCII: a newline or escape
    // sequence further on must not split or forge the one-line message.
    bool printable = true;
    for (char c : name)
        printable &= c >= 0x20 && c < 0x7f;
    for (char c : name) {
        if (!allowed(c)) {
            auto shown = (c >= 0x21 && c < 0x7f)
                             ? util::format("'{}'", c)
                             : util::format("byte 0x{:02x}", static_cast<unsigned char>(c));
            return util::fail(util::ErrorKind::usage,
                              util::format("invalid lock name '{}': {} is not allowed (use A-Z a-z "
                                           "0-9 . _ : / @ + -)",
                                           printable ? std::string(name) : "...", shown));
        }
    }
    return {};
}

} // namespace redlock::lock
