#pragma once
// Values handed from one redlock process to another of the same binary on the same machine
// (a run's will to its releaser, a cron slot to the run the daemon starts for it): integers
// as 8 bytes in this machine's order, strings with their length first, and the config a
// run needs (key prefix, history settings, servers with their TLS and passwords). Never
// argv or the environment, which `ps` and /proc show.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace redlock::job {

class WireWriter {
  public:
    void put(long long v) { m_out.append(reinterpret_cast<const char*>(&v), sizeof v); }
    void put(std::string_view s) {
        put(static_cast<long long>(s.size()));
        m_out.append(s);
    }
    void put_maybe(const std::optional<std::string>& s) {
        put_flag(s.has_value());
        put(std::string_view(s ? *s : std::string()));
    }
    void put_flag(bool b) { put(static_cast<long long>(b)); }
    void put(std::chrono::milliseconds d) { put(static_cast<long long>(d.count())); }
    // The config's key prefix, history settings and servers.
    void put_config(const config::Config& config);
    [[nodiscard]] const std::string& bytes() const { return m_out; }

  private:
    std::string m_out;
};

// Reads what a WireWriter wrote; ok() says whether all of it was there, and no more.
class WireReader {
  public:
    explicit WireReader(std::string_view in) : m_in(in) {}
    long long integer();
    std::string text();
    std::optional<std::string> maybe_text();
    bool flag() { return integer() != 0; }
    std::chrono::milliseconds millis() { return std::chrono::milliseconds(integer()); }
    // False (and ok() false) when the servers are not 1 to 1000.
    bool config(config::Config& config);
    [[nodiscard]] bool ok() const { return m_ok && m_in.empty(); }

  private:
    std::string_view m_in;
    bool m_ok = true;
};

} // namespace redlock::job
