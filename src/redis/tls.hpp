#pragma once
// TLS for rediss:// servers: OpenSSL on the non-blocking socket a Connection owns, hiredis
// keeping the protocol half. OpenSSL is loaded on first use (dlopen of libssl.so.3, else
// libssl.so.1.1), not linked: its library constructors alone cost every run about 3 million
// instructions of start-up (callgrind), TLS or not, where a whole `redlock run -- true` costs under
// one.

#include <memory>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "util/error.hpp"

namespace redlock::redis::tls {

// "OpenSSL 3.0.15 19 Sep 2023", or why TLS cannot be used here (for --version, doctor).
[[nodiscard]] util::Expected<std::string> library_version();

// One TLS session over a connected socket, in client mode.
class Session {
  public:
    // What an operation needs before it can go on, or how it ended.
    enum class Status { done, want_read, want_write, closed, failed };

    // A session for `fd`, with the server's TLS settings and `host` (the URL's host, the
    // name the certificate must match unless tls_server_name says otherwise).
    [[nodiscard]] static util::Expected<Session> open(int fd, const config::TlsConfig& tls,
                                                      const std::string& host);
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;
    ~Session();

    // Drives the handshake; `done` once the server is verified.
    [[nodiscard]] Status handshake();
    // Like send(2)/recv(2): `done` with `n` bytes moved (0 < n), or what it waits for.
    [[nodiscard]] Status write(const char* data, size_t size, size_t& n);
    [[nodiscard]] Status read(char* data, size_t size, size_t& n);
    // Why the last operation failed, for a message: "certificate verify failed: ...".
    [[nodiscard]] const std::string& error() const { return m_error; }

  private:
    Session() = default;
    Status status_of(int rc, const char* what);
    // Clears OpenSSL's error queue and errno before a call.
    void begin();
    // An SSL_read/SSL_write that returned `rc`: `n` bytes moved, or what it waits for.
    Status moved(int rc, size_t& n, const char* what);

    struct Handles;
    std::unique_ptr<Handles> m_handles;
    std::string m_error;
};

} // namespace redlock::redis::tls
