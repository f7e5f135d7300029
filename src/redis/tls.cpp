#include "redis/tls.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "util/format.hpp"
#include "util/symbol.hpp"

namespace redlock::redis::tls {

namespace {

// The OpenSSL functions redlock calls, looked up once in libssl (and, through it, in
// libcrypto). Macros of the API (SSL_set_tlsext_host_name, SSL_CTX_set_min_proto_version)
// are their SSL_ctrl / SSL_CTX_ctrl calls.
struct Api {
    decltype(&::OpenSSL_version) version;
    decltype(&::TLS_client_method) client_method;
    decltype(&::SSL_CTX_new) ctx_new;
    decltype(&::SSL_CTX_free) ctx_free;
    decltype(&::SSL_CTX_ctrl) ctx_ctrl;
    decltype(&::SSL_CTX_set_default_verify_paths) default_verify_paths;
    decltype(&::SSL_CTX_load_verify_locations) load_verify_locations;
    decltype(&::SSL_CTX_use_certificate_chain_file) use_certificate_chain_file;
    decltype(&::SSL_CTX_use_PrivateKey_file) use_private_key_file;
    decltype(&::SSL_CTX_check_private_key) check_private_key;
    decltype(&::SSL_CTX_set_verify) set_verify;
    decltype(&::SSL_new) ssl_new;
    decltype(&::SSL_free) ssl_free;
    decltype(&::SSL_set_fd) set_fd;
    decltype(&::SSL_ctrl) ssl_ctrl;
    decltype(&::SSL_get0_param) get0_param;
    decltype(&::X509_VERIFY_PARAM_set1_host) param_set1_host;
    decltype(&::X509_VERIFY_PARAM_set1_ip_asc) param_set1_ip_asc;
    decltype(&::SSL_connect) connect;
    decltype(&::SSL_read) read;
    decltype(&::SSL_write) write;
    decltype(&::SSL_get_error) get_error;
    decltype(&::SSL_get_verify_result) get_verify_result;
    decltype(&::X509_verify_cert_error_string) verify_error_string;
    decltype(&::ERR_get_error) err_get;
    decltype(&::ERR_error_string_n) err_string;
    decltype(&::ERR_clear_error) err_clear;
};

// Every function above, by name. Each is in OpenSSL 3 and in 1.1.1 under the same name and
// with the same signature (redlock's release binaries run on hosts with either).
bool find_all(void* lib, Api& api) {
    return util::find_symbol(lib, "OpenSSL_version", api.version) &&
           util::find_symbol(lib, "TLS_client_method", api.client_method) &&
           util::find_symbol(lib, "SSL_CTX_new", api.ctx_new) &&
           util::find_symbol(lib, "SSL_CTX_free", api.ctx_free) &&
           util::find_symbol(lib, "SSL_CTX_ctrl", api.ctx_ctrl) &&
           util::find_symbol(lib, "SSL_CTX_set_default_verify_paths", api.default_verify_paths) &&
           util::find_symbol(lib, "SSL_CTX_load_verify_locations", api.load_verify_locations) &&
           util::find_symbol(lib, "SSL_CTX_use_certificate_chain_file",
                             api.use_certificate_chain_file) &&
           util::find_symbol(lib, "SSL_CTX_use_PrivateKey_file", api.use_private_key_file) &&
           util::find_symbol(lib, "SSL_CTX_check_private_key", api.check_private_key) &&
           util::find_symbol(lib, "SSL_CTX_set_verify", api.set_verify) &&
           util::find_symbol(lib, "SSL_new", api.ssl_new) &&
           util::find_symbol(lib, "SSL_free", api.ssl_free) &&
           util::find_symbol(lib, "SSL_set_fd", api.set_fd) &&
           util::find_symbol(lib, "SSL_ctrl", api.ssl_ctrl) &&
           util::find_symbol(lib, "SSL_get0_param", api.get0_param) &&
           util::find_symbol(lib, "X509_VERIFY_PARAM_set1_host", api.param_set1_host) &&
           util::find_symbol(lib, "X509_VERIFY_PARAM_set1_ip_asc", api.param_set1_ip_asc) &&
           util::find_symbol(lib, "SSL_connect", api.connect) &&
           util::find_symbol(lib, "SSL_read", api.read) &&
           util::find_symbol(lib, "SSL_write", api.write) &&
           util::find_symbol(lib, "SSL_get_error", api.get_error) &&
           util::find_symbol(lib, "SSL_get_verify_result", api.get_verify_result) &&
           util::find_symbol(lib, "X509_verify_cert_error_string", api.verify_error_string) &&
           util::find_symbol(lib, "ERR_get_error", api.err_get) &&
           util::find_symbol(lib, "ERR_error_string_n", api.err_string) &&
           util::find_symbol(lib, "ERR_clear_error", api.err_clear);
}

// OpenSSL 3 where the host has it, else 1.1.1 (Debian 11, Ubuntu 20.04, Amazon Linux 2).
// Each libssl pulls in its own libcrypto, whose symbols dlsym finds through it.
constexpr const char* k_libraries[] = {"libssl.so.3", "libssl.so.1.1"};

util::Expected<Api> open_library() {
    std::string why;
    for (const char* name : k_libraries) {
        void* lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            why += why.empty() ? "" : "; ";
            why += ::dlerror();
            continue;
        }
        Api api{};
        if (find_all(lib, api))
            return api;
        return util::fail(util::ErrorKind::unavailable,
                          util::format("TLS: {} lacks a function: {}", name, ::dlerror()));
    }
    return util::fail(util::ErrorKind::unavailable,
                      util::format("TLS needs OpenSSL 3 or 1.1 (libssl.so.3 or libssl.so.1.1, "
                                   "Debian package libssl3 or libssl1.1): {}",
                                   why));
}

util::Expected<const Api*> load() {
    static std::optional<util::Expected<Api>> loaded;
    if (!loaded)
        loaded = open_library();
    if (!*loaded)
        return std::unexpected(loaded->error());
    return &**loaded;
}

bool is_ip_literal(const std::string& host) {
    in6_addr v6{};
    in_addr v4{};
    return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
           ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// OpenSSL's queued errors, oldest first, as "a; b" (and the queue emptied).
std::string queued_errors(const Api& api) {
    std::string out;
    while (unsigned long e = api.err_get()) {
        char buffer[256];
        api.err_string(e, buffer, sizeof buffer);
        // "error:0A000086:SSL routines::certificate verify failed": the reason is last.
        std::string_view text(buffer);
        if (auto colon = text.rfind(':'); colon != std::string_view::npos)
            text.remove_prefix(colon + 1);
        if (!out.empty())
            out += "; ";
        out += text;
    }
    return out;
}

} // namespace

struct Session::Handles {
    const Api* api = nullptr;
    SSL_CTX* ctx = nullptr;
    SSL* ssl = nullptr;
    bool verify = true;
    std::string expected_name;
    ~Handles() {
        if (ssl)
            api->ssl_free(ssl);
        if (ctx)
            api->ctx_free(ctx);
    }
};

util::Expected<std::string> library_version() {
    auto api = load();
    if (!api)
        return std::unexpected(api.error());
    return std::string((*api)->version(OPENSSL_VERSION));
}

util::Expected<Session> Session::open(int fd, const config::TlsConfig& tls,
                                      const std::string& host) {
    auto api = load();
    if (!api)
        return std::unexpected(api.error());
    const Api& a = **api;
    a.err_clear();
    Session session;
    session.m_handles = std::make_unique<Handles>();
    auto& h = *session.m_handles;
    h.api = &a;
    h.verify = tls.verify;
    auto fail = [&](std::string what) -> util::Expected<Session> {
        auto cause = queued_errors(a);
        return util::fail(util::ErrorKind::config,
                          cause.empty() ? what : util::format("{}: {}", what, cause));
    };
    h.ctx = a.ctx_new(a.client_method());
    if (!h.ctx)
        return fail("TLS: cannot create a context");
    a.ctx_ctrl(h.ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
    if (tls.ca_file.empty()) {
        if (a.default_verify_paths(h.ctx) != 1)
            return fail("TLS: cannot load the system CA store");
    } else if (a.load_verify_locations(h.ctx, tls.ca_file.c_str(), nullptr) != 1) {
        return fail(util::format("cannot load tls_ca_file '{}'", tls.ca_file));
    }
    if (!tls.cert_file.empty()) {
        if (a.use_certificate_chain_file(h.ctx, tls.cert_file.c_str()) != 1)
            return fail(util::format("cannot load tls_cert_file '{}'", tls.cert_file));
        const auto& key = tls.key_file.empty() ? tls.cert_file : tls.key_file;
        if (a.use_private_key_file(h.ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
            return fail(util::format("cannot load tls_key_file '{}'", key));
        if (a.check_private_key(h.ctx) != 1)
            return fail(util::format("tls_key_file '{}' does not match tls_cert_file '{}'", key,
                                     tls.cert_file));
    }
    a.set_verify(h.ctx, tls.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
    h.ssl = a.ssl_new(h.ctx);
    if (!h.ssl || a.set_fd(h.ssl, fd) != 1)
        return fail("TLS: cannot create a session");
    const std::string& name = tls.server_name.empty() ? host : tls.server_name;
    h.expected_name = name;
    if (!is_ip_literal(name)) // SNI carries host names only (RFC 6066)
        a.ssl_ctrl(h.ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                   const_cast<char*>(name.c_str()));
    if (tls.verify) {
        X509_VERIFY_PARAM* param = a.get0_param(h.ssl);
        int ok = is_ip_literal(name) ? a.param_set1_ip_asc(param, name.c_str())
                                     : a.param_set1_host(param, name.c_str(), name.size());
        if (ok != 1)
            return fail(util::format("TLS: cannot check the certificate against '{}'", name));
    }
    return session;
}

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

Session::Status Session::status_of(int rc, const char* what) {
    const Api& a = *m_handles->api;
    switch (a.get_error(m_handles->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        return Status::want_read;
    case SSL_ERROR_WANT_WRITE:
        return Status::want_write;
    case SSL_ERROR_ZERO_RETURN:
        m_error = "connection closed by server";
        return Status::closed;
    case SSL_ERROR_SYSCALL: {
        auto queued = queued_errors(a);
        m_error = !queued.empty() ? queued
                  : errno != 0    ? std::string(std::strerror(errno))
                                  : std::string("connection closed by server");
        return errno == 0 && queued.empty() ? Status::closed : Status::failed;
    }
    default:
        break;
    }
    auto queued = queued_errors(a);
    const long verify = a.get_verify_result(m_handles->ssl);
    if (m_handles->verify && verify != X509_V_OK) {
        m_error =
            verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH
                ? util::format("certificate verify failed: the certificate is not for "
                               "'{}' (set tls_server_name to the name it has)",
                               m_handles->expected_name)
                : util::format("certificate verify failed: {}", a.verify_error_string(verify));
    } else if (queued.find("alert certificate required") != std::string::npos) {
        m_error = "the server requires a client certificate (tls_cert_file and tls_key_file)";
    } else if (queued.find("alert bad certificate") != std::string::npos ||
               queued.find("alert unknown ca") != std::string::npos ||
               queued.find("alert certificate unknown") != std::string::npos) {
        m_error = util::format("the server refused our client certificate ({})", queued);
    } else if (queued.find("wrong version number") != std::string::npos ||
               queued.find("packet length too long") != std::string::npos ||
               queued.find("record layer failure") != std::string::npos) {
        m_error = "the server does not speak TLS (a plain redis:// port?)";
    } else {
        m_error = util::format("TLS {} failed: {}", what, queued.empty() ? "unknown" : queued);
    }
    return Status::failed;
}

void Session::begin() {
    // What status_of reads must come from the call that follows alone.
    m_handles->api->err_clear();
    errno = 0;
}

Session::Status Session::moved(int rc, size_t& n, const char* what) {
    if (rc <= 0)
        return status_of(rc, what);
    n = static_cast<size_t>(rc);
    return Status::done;
}

Session::Status Session::handshake() {
    begin();
    const Api& a = *m_handles->api;
    int rc = a.connect(m_handles->ssl);
    return rc == 1 ? Status::done : status_of(rc, "handshake");
}

Session::Status Session::write(const char* data, size_t size, size_t& n) {
    begin();
    const Api& a = *m_handles->api;
    const int chunk = static_cast<int>(std::min<size_t>(size, 1 << 30));
    return moved(a.write(m_handles->ssl, data, chunk), n, "write");
}

Session::Status Session::read(char* data, size_t size, size_t& n) {
    begin();
    const Api& a = *m_handles->api;
    const int chunk = static_cast<int>(std::min<size_t>(size, 1 << 30));
    return moved(a.read(m_handles->ssl, data, chunk), n, "read");
}

} // namespace redlock::redis::tls
