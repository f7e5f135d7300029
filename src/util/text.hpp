#pragma once
// Bytes from outside (a server's error text, another client's key value, holder metadata)
// made safe to show: valid UTF-8 recognised, and what a terminal would act on escaped.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace redlock::util {

// The length of the well-formed UTF-8 sequence that starts at text[pos] (1 to 4), or 0
// when the byte there does not start one: a stray continuation byte, an overlong form, a
// surrogate, a code point beyond U+10FFFF or a sequence cut short.
[[nodiscard]] size_t utf8_sequence_length(std::string_view text, size_t pos);

// Whether all of `text` is well-formed UTF-8.
[[nodiscard]] bool is_utf8(std::string_view text);

// `text` for a terminal, on one line: newline, carriage return and tab as \n, \r, \t, the
// other C0 controls (ESC included) and DEL as \xHH, the C1 controls U+0080-U+009F as
// \u00HH, and each byte that is not part of valid UTF-8 as \xHH. Everything else,
// backslashes included, is kept as it is.
[[nodiscard]] std::string printable(std::string_view text);

// `text` cut to at most `width` bytes, never inside a UTF-8 sequence, with "~" at the end
// when something was cut (so "~" counts in the width).
[[nodiscard]] std::string clip(std::string_view text, size_t width);

// The first index at or after `from` that is not a blank (space or tab): `text.size()`
// when none is.
[[nodiscard]] size_t skip_blanks(std::string_view text, size_t from);

// The word of `known` that `word` is most likely a typo of (at most two edits away, and
// fewer than its length): for "did you mean" hints.
[[nodiscard]] std::optional<std::string_view> closest_word(std::string_view word,
                                                           std::span<const std::string_view> known);

} // namespace redlock::util
