#include "job/wire.hpp"

#include <cstring>

namespace redlock::job {

namespace {

void put_tls(WireWriter& w, const config::TlsConfig& tls) {
    w.put(tls.ca_file);
    w.put(tls.cert_file);
    w.put(tls.key_file);
    w.put(tls.server_name);
    w.put_flag(tls.verify);
}

config::TlsConfig get_tls(WireReader& r) {
    config::TlsConfig tls;
    tls.ca_file = r.text();
    tls.cert_file = r.text();
    tls.key_file = r.text();
    tls.server_name = r.text();
    tls.verify = r.flag();
    return tls;
}

void put_server(WireWriter& w, const config::ServerConfig& s) {
    const auto& u = s.url;
    w.put(u.host);
    w.put(static_cast<long long>(u.port));
    w.put(u.socket_path);
    w.put(static_cast<long long>(u.db));
    w.put_maybe(u.username);
    w.put_maybe(u.password);
    w.put_flag(u.tls);
    w.put(static_cast<long long>(u.sentinels.size()));
    for (const auto& e : u.sentinels) {
        w.put(e.host);
        w.put(static_cast<long long>(e.port));
    }
    w.put(u.master_name);
    w.put(s.connect_timeout);
    w.put(s.command_timeout);
    w.put(s.where);
    put_tls(w, s.tls);
    w.put(static_cast<long long>(s.replicas));
    w.put_maybe(s.sentinel_username);
    w.put_maybe(s.sentinel_password);
}

config::ServerConfig get_server(WireReader& r) {
    config::ServerConfig s;
    auto& u = s.url;
    u.host = r.text();
    u.port = static_cast<int>(r.integer());
    u.socket_path = r.text();
    u.db = static_cast<int>(r.integer());
    u.username = r.maybe_text();
    u.password = r.maybe_text();
    u.tls = r.flag();
    const long long sentinels = r.integer();
    for (long long i = 0; i < sentinels && i < 1000; ++i) {
        config::Endpoint e;
        e.host = r.text();
        e.port = static_cast<int>(r.integer());
        u.sentinels.push_back(std::move(e));
    }
    u.master_name = r.text();
    s.connect_timeout = r.millis();
    s.command_timeout = r.millis();
    s.where = r.text();
    s.tls = get_tls(r);
    s.replicas = static_cast<int>(r.integer());
    s.sentinel_username = r.maybe_text();
    s.sentinel_password = r.maybe_text();
    return s;
}

} // namespace

void WireWriter::put_config(const config::Config& c) {
    put(c.key_prefix);
    put(static_cast<long long>(c.history));
    put(c.history_max_age);
    put(static_cast<long long>(c.servers.size()));
    for (const auto& s : c.servers)
        put_server(*this, s);
}

long long WireReader::integer() {
    long long v = 0;
    if (m_in.size() < sizeof v) {
        m_ok = false;
        return 0;
    }
    std::memcpy(&v, m_in.data(), sizeof v);
    m_in.remove_prefix(sizeof v);
    return v;
}

std::string WireReader::text() {
    const long long n = integer();
    if (n < 0 || static_cast<size_t>(n) > m_in.size()) {
        m_ok = false;
        return {};
    }
    std::string out(m_in.substr(0, static_cast<size_t>(n)));
    m_in.remove_prefix(static_cast<size_t>(n));
    return out;
}

std::optional<std::string> WireReader::maybe_text() {
    const bool has = integer() != 0;
    auto value = text();
    return has ? std::optional(std::move(value)) : std::nullopt;
}

bool WireReader::config(config::Config& c) {
    c.key_prefix = text();
    c.history = static_cast<size_t>(integer());
    c.history_max_age = millis();
    const long long servers = integer();
    if (servers < 1 || servers > 1000) {
        m_ok = false;
        return false;
    }
    for (long long i = 0; i < servers; ++i)
        c.servers.push_back(get_server(*this));
    return m_ok;
}

} // namespace redlock::job
