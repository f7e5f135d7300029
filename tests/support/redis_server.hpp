#pragma once
// A real redis-server for one test: started on loopback (a free TCP port or a unix socket
// in a private temp dir) by the constructor, stopped and cleaned up by the destructor. It
// can be frozen (SIGSTOP), thawed, killed and restarted on the same address, so tests can
// play partitions and crashes without mocks.

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace redlock::test {

// An ACL user created at start with `--user NAME RULES... >PASSWORD`.
struct AclUser {
    std::string name;
    std::string password;
    // ACL rules separated by spaces, e.g. "on ~lock:* +@all" or "on ~other:* +@all". Rules of
    // channels ("&*") are left out on a server without them (Redis 6.0: every channel).
    // The password is added as ">PASSWORD"; a rule string may also carry its own.
    std::string rules = "on ~* &* +@all";
};

struct RedisServerOptions {
    bool use_unix_socket = false;           // listen on DIR/redis.sock only (no TCP)
    std::optional<std::string> requirepass; // password of the default user
    std::optional<AclUser> acl_user;        // an extra ACL user
    std::vector<std::string> extra_args;    // appended to the command line as given
};

class RedisServer {
  public:
    // Starts the server and waits (bounded) until it answers; throws std::runtime_error
    // with the tail of the server's log when it cannot be started.
    explicit RedisServer(RedisServerOptions options = {});
    ~RedisServer();
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    [[nodiscard]] int port() const { return m_port; } // 0 with a unix socket
    [[nodiscard]] const std::string& socket_path() const { return m_socket_path; }
    [[nodiscard]] const std::string& dir() const { return m_dir; } // the temp dir
    [[nodiscard]] pid_t pid() const { return m_pid; }              // -1 when not running
    [[nodiscard]] bool running() const { return m_pid > 0; }
    [[nodiscard]] bool frozen() const { return m_frozen; }

    // "redis://127.0.0.1:PORT" or "unix://PATH" — without credentials.
    [[nodiscard]] std::string url() const;

    void freeze();  // SIGSTOP; returns once the server is stopped
    void thaw();    // SIGCONT
    void kill();    // SIGKILL and reap; the temp dir stays for restart()
    void restart(); // kill if running, start again on the same port or socket

    // Runs one command on a fresh blocking connection (authenticated as the default user
    // when requirepass is set) and renders the reply as text: strings and statuses as
    // they are, integers in decimal, nil as "(nil)", errors as "(error) MESSAGE", arrays
    // as "[a, b]". Throws std::runtime_error when the server cannot be reached (5 s).
    std::string command(const std::vector<std::string>& argv) const;

    // The last lines of the server's log file, for failure messages.
    [[nodiscard]] std::string log_tail(size_t max_lines = 20) const;

  private:
    [[nodiscard]] bool try_start(); // one attempt on m_port; false when it did not come up
    [[nodiscard]] bool answers_ping() const;
    [[nodiscard]] std::vector<std::string> command_line() const;
    void reap_if_exited();

    RedisServerOptions m_options;
    std::string m_dir;
    std::string m_socket_path;
    int m_port = 0;
    pid_t m_pid = -1;
    bool m_frozen = false;
};

} // namespace redlock::test
