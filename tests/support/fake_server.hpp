#pragma once
// A "server" on loopback that answers with bytes no Redis would send, for tests of what a
// connection does with them (a hostile or corrupted server). Not a stand-in for Redis:
// tests of locking run against a real redis-server (support/redis_server.hpp).
//
// One connection at a time: once a connection sent its first bytes, `answer` is called on
// it and may write what it likes, for as long as it likes (send() below stops when the
// peer is gone or the server is being destroyed); the connection is then closed.

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "util/fd.hpp"

namespace redlock::test {

class FakeServer {
  public:
    class Peer {
      public:
        Peer(int fd, const std::atomic<bool>& stopping) : m_fd(fd), m_stopping(stopping) {}
        // Writes all of `bytes`; false once the peer is gone or the server is stopping.
        bool send(std::string_view bytes) const;
        [[nodiscard]] bool stopping() const { return m_stopping; }

      private:
        int m_fd;
        const std::atomic<bool>& m_stopping;
    };
    using Answer = std::function<void(const Peer&)>;

    // Listens on a free loopback port at once; throws std::runtime_error if it cannot.
    explicit FakeServer(Answer answer);
    ~FakeServer(); // stops answering and joins the thread
    FakeServer(const FakeServer&) = delete;
    FakeServer& operator=(const FakeServer&) = delete;

    [[nodiscard]] int port() const { return m_port; }
    [[nodiscard]] std::string url() const; // "redis://127.0.0.1:PORT"

  private:
    void serve();

    Answer m_answer;
    util::UniqueFd m_listener;
    int m_port = 0;
    std::atomic<bool> m_stopping{false};
    std::thread m_thread;
};

} // namespace redlock::test
