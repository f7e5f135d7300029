#include "support/redis_server.hpp"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <netinet/in.h>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <hiredis/hiredis.h>

#ifndef REDLOCK_TEST_REDIS_SERVER
#define REDLOCK_TEST_REDIS_SERVER "redis-server"
#endif

namespace redlock::test {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto k_start_timeout = 5s;
constexpr auto k_poll_interval = 10ms;
constexpr int k_start_attempts = 5;

struct ContextDeleter {
    void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyDeleter {
    void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

std::string redis_server_path() {
    // The build knows where redis-server is; REDIS_SERVER may point somewhere else.
    if (const char* env = std::getenv("REDIS_SERVER"); env != nullptr && *env != '\0') {
        return env;
    }
    return REDLOCK_TEST_REDIS_SERVER;
}

// Whether the server has ACL rules of channels ("&*", Redis 6.2): Redis 6.0 allows every
// user every channel, and refuses to start on such a rule. From its --version ("Redis
// server v=6.0.16 ..."; Valkey has them), asked once.
bool has_channel_rules() {
    static const bool has = [] {
        const std::string command = "'" + redis_server_path() + "' --version";
        std::unique_ptr<FILE, int (*)(FILE*)> out(popen(command.c_str(), "r"), pclose);
        std::array<char, 256> line{};
        if (!out || !fgets(line.data(), line.size(), out.get()))
            return true;
        const std::string text(line.data());
        const auto v = text.find("v=");
        if (text.starts_with("Valkey") || v == std::string::npos)
            return true;
        int major = 0, minor = 0;
        if (std::sscanf(text.c_str() + v, "v=%d.%d", &major, &minor) != 2)
            return true;
        return major > 6 || (major == 6 && minor >= 2);
    }();
    return has;
}

timeval to_timeval(std::chrono::milliseconds ms) {
    return timeval{static_cast<time_t>(ms.count() / 1000),
                   static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

// A port the kernel had free a moment ago. The server may still lose a race for it; the
// caller retries with another port and checks that the answering server is its own.
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        const int saved = errno;
        ::close(fd);
        throw std::runtime_error(std::string("bind to a free port: ") + std::strerror(saved));
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

std::vector<std::string> split_words(const std::string& text) {
    std::vector<std::string> words;
    std::istringstream in(text);
    for (std::string word; in >> word;) {
        words.push_back(word);
    }
    return words;
}

std::string render(const redisReply* reply) {
    switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        return std::string(reply->str, reply->len);
    case REDIS_REPLY_ERROR:
        return "(error) " + std::string(reply->str, reply->len);
    case REDIS_REPLY_INTEGER:
        return std::to_string(reply->integer);
    case REDIS_REPLY_NIL:
        return "(nil)";
    case REDIS_REPLY_ARRAY: {
        std::string out = "[";
        for (size_t i = 0; i < reply->elements; ++i) {
            if (i != 0) {
                out += ", ";
            }
            out += render(reply->element[i]);
        }
        return out + "]";
    }
    default:
        return "(unknown reply type " + std::to_string(reply->type) + ")";
    }
}

ReplyPtr run_argv(redisContext* c, const std::vector<std::string>& argv) {
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const auto& a : argv) {
        args.push_back(a.data());
        lens.push_back(a.size());
    }
    return ReplyPtr(static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data())));
}

} // namespace

RedisServer::RedisServer(RedisServerOptions options) : m_options(std::move(options)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "redlock-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
        throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    }
    m_dir = tmpl;
    if (m_options.use_unix_socket) {
        m_socket_path = m_dir + "/redis.sock";
    }
    for (int attempt = 0; attempt < k_start_attempts; ++attempt) {
        if (!m_options.use_unix_socket) {
            m_port = free_port();
        }
        if (try_start()) {
            return;
        }
    }
    const std::string log = log_tail();
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
    throw std::runtime_error("redis-server did not start in " + std::to_string(k_start_attempts) +
                             " attempts; log:\n" + log);
}

RedisServer::~RedisServer() {
    if (m_pid > 0) {
        if (m_frozen) {
            thaw();
        }
        kill();
    }
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
}

std::string RedisServer::url() const {
    if (m_options.use_unix_socket) {
        return "unix://" + m_socket_path;
    }
    return "redis://127.0.0.1:" + std::to_string(m_port);
}

std::vector<std::string> RedisServer::command_line() const {
    std::vector<std::string> args = {redis_server_path(),
                                     "--port",
                                     std::to_string(m_options.use_unix_socket ? 0 : m_port),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--dir",
                                     m_dir};
    if (m_options.use_unix_socket) {
        args.insert(args.end(), {"--unixsocket", m_socket_path, "--unixsocketperm", "700"});
    }
    if (m_options.requirepass) {
        args.insert(args.end(), {"--requirepass", *m_options.requirepass});
    }
    if (m_options.acl_user) {
        args.push_back("--user");
        args.push_back(m_options.acl_user->name);
        for (auto& rule : split_words(m_options.acl_user->rules)) {
            if (!rule.starts_with('&') || has_channel_rules())
                args.push_back(std::move(rule));
        }
        args.push_back(">" + m_options.acl_user->password);
    }
    args.insert(args.end(), m_options.extra_args.begin(), m_options.extra_args.end());
    return args;
}

bool RedisServer::try_start() {
    const std::vector<std::string> args = command_line();
    std::vector<char*> argv;
    for (const auto& a : args) {
        argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    const std::string log_path = m_dir + "/redis.log";
    const pid_t parent = ::getpid();

    const pid_t pid = ::fork();
    if (pid < 0) {
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
        // Only async-signal-safe calls until exec. If the test process dies, so does Redis.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) {
            ::_exit(127);
        }
        const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        const int null = ::open("/dev/null", O_RDONLY);
        if (log >= 0) {
            ::dup2(log, STDOUT_FILENO);
            ::dup2(log, STDERR_FILENO);
        }
        if (null >= 0) {
            ::dup2(null, STDIN_FILENO);
        }
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    m_pid = pid;
    m_frozen = false;

    const auto deadline = Clock::now() + k_start_timeout;
    while (Clock::now() < deadline) {
        reap_if_exited();
        if (m_pid < 0) {
            return false; // e.g. the port was taken meanwhile
        }
        if (answers_ping()) {
            return true;
        }
        std::this_thread::sleep_for(k_poll_interval);
    }
    kill();
    return false;
}

void RedisServer::reap_if_exited() {
    if (m_pid <= 0) {
        return;
    }
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_pid = -1;
        m_frozen = false;
    }
}

// True when our own process answers on the address (a server started by someone else on
// the same port would report another process_id).
bool RedisServer::answers_ping() const {
    const timeval tv = to_timeval(200ms);
    ContextPtr c(m_options.use_unix_socket ? redisConnectUnixWithTimeout(m_socket_path.c_str(), tv)
                                           : redisConnectWithTimeout("127.0.0.1", m_port, tv));
    if (!c || c->err != 0) {
        return false;
    }
    redisSetTimeout(c.get(), to_timeval(1000ms));
    if (m_options.requirepass) {
        ReplyPtr auth = run_argv(c.get(), {"AUTH", *m_options.requirepass});
        if (!auth || auth->type == REDIS_REPLY_ERROR) {
            return false;
        }
    }
    ReplyPtr info = run_argv(c.get(), {"INFO", "server"});
    if (!info || info->type != REDIS_REPLY_STRING) {
        return false;
    }
    const std::string text(info->str, info->len);
    return text.find("process_id:" + std::to_string(m_pid) + "\r\n") != std::string::npos;
}

void RedisServer::freeze() {
    if (m_pid <= 0 || m_frozen) {
        return;
    }
    ::kill(m_pid, SIGSTOP);
    int status = 0;
    // Wait for the stop to take effect, so the caller knows the server no longer answers.
    if (::waitpid(m_pid, &status, WUNTRACED) == m_pid) {
        if (WIFSTOPPED(status)) {
            m_frozen = true;
        } else {
            m_pid = -1;
        }
    }
}

void RedisServer::thaw() {
    if (m_pid <= 0 || !m_frozen) {
        return;
    }
    ::kill(m_pid, SIGCONT);
    m_frozen = false;
}

void RedisServer::kill() {
    if (m_pid <= 0) {
        return;
    }
    ::kill(m_pid, SIGKILL);
    int status = 0;
    while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
    }
    m_pid = -1;
    m_frozen = false;
}

void RedisServer::restart() {
    kill();
    // Same address: redis sets SO_REUSEADDR, so the port is ours again at once unless
    // someone else grabbed it meanwhile.
    for (int attempt = 0; attempt < k_start_attempts; ++attempt) {
        if (try_start()) {
            return;
        }
        std::this_thread::sleep_for(100ms);
    }
    throw std::runtime_error("redis-server did not restart on " + url() + "; log:\n" + log_tail());
}

std::string RedisServer::command(const std::vector<std::string>& argv) const {
    const timeval tv = to_timeval(5000ms);
    ContextPtr c(m_options.use_unix_socket ? redisConnectUnixWithTimeout(m_socket_path.c_str(), tv)
                                           : redisConnectWithTimeout("127.0.0.1", m_port, tv));
    if (!c) {
        throw std::runtime_error("cannot allocate a redis context");
    }
    if (c->err != 0) {
        throw std::runtime_error("cannot connect to " + url() + ": " + c->errstr);
    }
    redisSetTimeout(c.get(), tv);
    if (m_options.requirepass) {
        ReplyPtr auth = run_argv(c.get(), {"AUTH", *m_options.requirepass});
        if (!auth) {
            throw std::runtime_error("AUTH to " + url() + " failed: " + c->errstr);
        }
        if (auth->type == REDIS_REPLY_ERROR) {
            return render(auth.get());
        }
    }
    ReplyPtr reply = run_argv(c.get(), argv);
    if (!reply) {
        throw std::runtime_error("command to " + url() + " failed: " + c->errstr);
    }
    return render(reply.get());
}

std::string RedisServer::log_tail(size_t max_lines) const {
    std::ifstream in(m_dir + "/redis.log");
    std::deque<std::string> lines;
    for (std::string line; std::getline(in, line);) {
        lines.push_back(line);
        if (lines.size() > max_lines) {
            lines.pop_front();
        }
    }
    std::string out;
    for (const auto& line : lines) {
        out += line + "\n";
    }
    return out;
}

} // namespace redlock::test
