#pragma once
// The fleet as a web page and as JSON, as `redlock exporter` serves them on / and
// /api/locks. The page is complete as served (a table of every lock, rendered here: it
// needs no JavaScript, and reads as well through curl); a small script (page_script())
// keeps it live by fetching /api/locks every two seconds and putting each lock's `row`
// (the cells as the page shows them) in place, with textContent only. Every string that
// came from a server is escaped (a holder's command "<script>" is text), and the page's
// Content-Security-Policy allows no script but the page's own file.

#include <string>
#include <string_view>

#include "fleet/fleet.hpp"
#include "util/timestamp.hpp"

namespace redlock::fleet {

// The most locks the page and the API list (the page of a fleet of 100,000 names would be
// tens of megabytes, asked for every two seconds while open): past it, those worth a look
// first (fleet/page.cpp, summaries).
inline constexpr size_t k_page_locks = 1000;

[[nodiscard]] std::string render_page(const Fleet& fleet, util::UtcMillis now);
[[nodiscard]] std::string render_api(const Fleet& fleet, util::UtcMillis now);
[[nodiscard]] std::string_view page_script();
[[nodiscard]] std::string_view page_style();
// The page's Content-Security-Policy: its own script, style and API, nothing else.
inline constexpr std::string_view k_page_policy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

} // namespace redlock::fleet
