#include "config/config.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <span>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <vector>

#include <toml++/toml.h>

#include "util/duration.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace redlock::config {

namespace {

using util::ErrorKind;

constexpr std::string_view k_default_server = "redis://127.0.0.1:6379";
// A password file is a few bytes; the cap stops a mistaken path to a large file from
// being read whole.
constexpr size_t k_max_password_file = size_t{64} * 1024;

using namespace std::string_view_literals;
constexpr std::array k_top_level_keys = {"key_prefix"sv,
                                         "ttl"sv,
                                         "wait"sv,
                                         "min_validity"sv,
                                         "connect_timeout"sv,
                                         "command_timeout"sv,
                                         "tls_ca_file"sv,
                                         "tls_cert_file"sv,
                                         "tls_key_file"sv,
                                         "tls_server_name"sv,
                                         "tls_verify"sv,
                                         "replicas"sv,
                                         "history"sv,
                                         "history_max_age"sv,
                                         "metrics_file"sv,
                                         "metrics_dir"sv,
                                         "on_lost"sv,
                                         "hook_timeout"sv,
                                         "servers"sv};
constexpr std::array k_server_keys = {"url"sv,
                                      "username"sv,
                                      "password_env"sv,
                                      "password_file"sv,
                                      "connect_timeout"sv,
                                      "command_timeout"sv,
                                      "tls_ca_file"sv,
                                      "tls_cert_file"sv,
                                      "tls_key_file"sv,
                                      "tls_server_name"sv,
                                      "tls_verify"sv,
                                      "replicas"sv,
                                      "sentinel_username"sv,
                                      "sentinel_password_env"sv,
                                      "sentinel_password_file"sv};

bool contains(std::span<const std::string_view> keys, std::string_view key) {
    return std::ranges::find(keys, key) != keys.end();
}

std::string_view type_name(const toml::node& node) {
    switch (node.type()) {
    case toml::node_type::string:
        return "a string";
    case toml::node_type::integer:
        return "an integer";
    case toml::node_type::floating_point:
        return "a floating-point number";
    case toml::node_type::boolean:
        return "a boolean";
    case toml::node_type::date:
        return "a date";
    case toml::node_type::time:
        return "a time";
    case toml::node_type::date_time:
        return "a date-time";
    case toml::node_type::array:
        return "an array";
    case toml::node_type::table:
        return "a table";
    case toml::node_type::none:
        break;
    }
    return "nothing";
}

bool before(const toml::source_position& a, const toml::source_position& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
}

// A table's entries in the order they appear in the file (toml::table is sorted by key), so
// that the first error reported is the first one in the file.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
    std::vector<std::pair<const toml::key*, const toml::node*>> entries;
    entries.reserve(t.size());
    for (auto&& [key, node] : t)
        entries.emplace_back(&key, &node);
    std::ranges::stable_sort(entries, [](const auto& a, const auto& b) {
        return before(a.first->source().begin, b.first->source().begin);
    });
    return entries;
}

bool readable_by_others(mode_t mode) {
    return (mode & (S_IRGRP | S_IROTH)) != 0;
}

ServerConfig default_server(const Config& config) {
    auto url = parse_server_url(k_default_server);
    return ServerConfig{std::move(*url),
                        config.connect_timeout,
                        config.command_timeout,
                        {},
                        config.tls,
                        config.replicas,
                        {},
                        {}};
}

struct PendingServer {
    ServerUrl url;
    // tls_* keys given in the table, applied over the top-level ones.
    std::vector<std::pair<std::string, const toml::node*>> tls;
    std::optional<int> replicas;
    std::optional<Millis> connect_timeout;
    std::optional<Millis> command_timeout;
    std::string where;
    std::optional<std::string> sentinel_username;
    std::optional<std::string> sentinel_password;
};

// Where a problem sits in the text, 1-based, columns counted in characters.
struct TextPosition {
    size_t line = 1;
    size_t column = 1;
};

struct TextProblem {
    TextPosition where;
    std::string message;
};

// toml++ 3.3.0 reaches TOML_UNREACHABLE (undefined behaviour: a crash, or worse) on a
// non-ASCII character where it looks for whitespace: after a value (`ttl = "1s" ò`), in
// a bare key or table name, and after a line-ending backslash in a """ string
// (marzer/tomlplusplus#190, #295). TOML 1.0 allows non-ASCII only inside strings and
// comments, so this scan refuses it anywhere else, and right after a line-ending
// backslash, before toml++ sees the text. Invalid UTF-8 is refused here too, so that the
// columns counted below are characters.
std::optional<TextProblem> unsafe_for_toml(std::string_view text) {
    enum class State { normal, comment, basic, literal, multi_basic, multi_literal };
    State state = State::normal;
    TextPosition at;
    bool after_continuation = false; // in a """ string, skipping blanks after "\<newline>"
    auto starts = [&](size_t i, std::string_view what) {
        return text.substr(i, what.size()) == what;
    };
    for (size_t i = 0; i < text.size();) {
        const char c = text[i];
        const size_t n = util::utf8_sequence_length(text, i);
        if (n == 0)
            return TextProblem{at,
                               util::format("invalid UTF-8 (byte 0x{:02x})",
                                            static_cast<unsigned>(static_cast<unsigned char>(c)))};
        if (n > 1) {
            if (state == State::normal)
                return TextProblem{at, "a non-ASCII character outside a string or comment"};
            if (after_continuation)
                return TextProblem{at, "a non-ASCII character right after a line-ending "
                                       "backslash; write it as \\uXXXX"};
        }
        size_t advance = n;
        if (c == '\n') {
            if (state == State::comment || state == State::basic || state == State::literal)
                state = State::normal; // a string cut by a newline is toml++'s error to report
        } else if (after_continuation && c != ' ' && c != '\t' && c != '\r') {
            after_continuation = false;
        }
        switch (state) {
        case State::normal:
            if (c == '#')
                state = State::comment;
            else if (starts(i, "\"\"\""))
                state = State::multi_basic, advance = 3;
            else if (starts(i, "\'\'\'"))
                state = State::multi_literal, advance = 3;
            else if (c == '"')
                state = State::basic;
            else if (c == '\'')
                state = State::literal;
            break;
        case State::comment:
            break;
        case State::basic:
            if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n')
                advance = 2;
            else if (c == '"')
                state = State::normal;
            break;
        case State::literal:
            if (c == '\'')
                state = State::normal;
            break;
        case State::multi_basic:
            if (c == '\\') {
                size_t j = i + 1;
                while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r'))
                    ++j;
                if (j < text.size() && text[j] == '\n')
                    after_continuation = true;
                else if (i + 1 < text.size() && text[i + 1] != '\n')
                    advance = 2;
            } else if (starts(i, "\"\"\"")) {
                // Up to two more quotes belong to the string: """a""""" is a"".
                advance = 3;
                while (advance < 5 && i + advance < text.size() && text[i + advance] == '"')
                    ++advance;
                state = State::normal;
            }
            break;
        case State::multi_literal:
            if (starts(i, "\'\'\'")) {
                advance = 3;
                while (advance < 5 && i + advance < text.size() && text[i + advance] == '\'')
                    ++advance;
                state = State::normal;
            }
            break;
        }
        // Columns advance by characters; an escape or a quote run is ASCII, one per byte.
        for (size_t k = i; k < i + advance && k < text.size();) {
            if (text[k] == '\n') {
                ++at.line;
                at.column = 1;
            } else {
                ++at.column;
            }
            const size_t step = util::utf8_sequence_length(text, k);
            k += step == 0 ? 1 : step;
        }
        i += advance;
    }
    return std::nullopt;
}

class Parser {
  public:
    explicit Parser(const std::filesystem::path& source)
        : m_source(source), m_name(source.string()) {}

    // Whether a password is written in the file itself (in a server url).
    [[nodiscard]] bool has_inline_password() const { return m_inline_password; }

    util::Expected<Config> parse(std::string_view text) {
        if (auto problem = unsafe_for_toml(text))
            return util::fail(ErrorKind::config,
                              util::format("{}:{}:{}: {}", m_name, problem->where.line,
                                           problem->where.column, problem->message));
#if TOML_EXCEPTIONS
        toml::table root;
        try {
            root = toml::parse(text, std::string_view{m_name});
        } catch (const toml::parse_error& e) {
            return syntax_error(e);
        }
#else
        toml::parse_result parsed = toml::parse(text, std::string_view{m_name});
        if (!parsed)
            return syntax_error(parsed.error());
        toml::table root = std::move(parsed).table();
#endif
        Config config;
        config.source = m_source;
        std::vector<PendingServer> servers;

        for (const auto& [key, node] : in_file_order(root)) {
            const std::string_view name = key->str();
            util::Expected<void> ok;
            if (name == "key_prefix")
                ok = parse_key_prefix(*node, config.key_prefix);
            else if (name == "ttl")
                ok = parse_ttl(*node, config.ttl);
            else if (name == "wait")
                ok = parse_duration_into(name, *node, config.wait);
            else if (name == "min_validity")
                ok = parse_duration_into(name, *node, config.min_validity);
            else if (name == "connect_timeout")
                ok = parse_timeout(name, *node, config.connect_timeout);
            else if (name == "command_timeout")
                ok = parse_timeout(name, *node, config.command_timeout);
            else if (name == "replicas")
                ok = parse_replicas(*node, config.replicas);
            else if (name == "history")
                ok = parse_history(*node, config.history);
            else if (name == "history_max_age")
                ok = parse_history_age(*node, config.history_max_age);
            else if (name.starts_with("tls_") && contains(k_top_level_keys, name))
                ok = parse_tls_key(name, *node, config.tls);
            else if (name == "metrics_file" || name == "metrics_dir")
                ok = parse_metrics_path(name, *node, config);
            else if (name == "on_lost")
                ok = parse_on_lost(*node, config.on_lost);
            else if (name == "hook_timeout")
                ok = parse_timeout(name, *node, config.hook_timeout);
            else if (name == "servers")
                ok = parse_servers(*node, servers);
            else
                ok = unknown_key(*key, k_top_level_keys, false);
            if (!ok)
                return std::unexpected(ok.error());
        }

        for (auto& pending : servers) {
            TlsConfig tls = config.tls;
            for (const auto& [name, node] : pending.tls)
                if (auto ok = parse_tls_key(name, *node, tls); !ok)
                    return std::unexpected(ok.error());
            config.servers.push_back(ServerConfig{
                std::move(pending.url), pending.connect_timeout.value_or(config.connect_timeout),
                pending.command_timeout.value_or(config.command_timeout), std::move(pending.where),
                std::move(tls), pending.replicas.value_or(config.replicas),
                std::move(pending.sentinel_username), std::move(pending.sentinel_password)});
        }
        if (config.servers.empty())
            config.servers.push_back(default_server(config));
        return config;
    }

  private:
    std::unexpected<util::Error> error(const toml::source_position& where,
                                       std::string_view message) const {
        return util::fail(ErrorKind::config,
                          util::format("{}:{}:{}: {}", m_name, where.line, where.column, message));
    }
    std::unexpected<util::Error> error(const toml::node& node, std::string_view message) const {
        return error(node.source().begin, message);
    }

    std::unexpected<util::Error> syntax_error(const toml::parse_error& e) const {
        std::string description(e.description());
        // toml++ reports a string left open as the newline it ran into.
        if (description.find("unescaped control characters") != std::string::npos)
            description = "unterminated string: the closing quote is missing on this line";
        if (!description.empty() && description[0] >= 'A' && description[0] <= 'Z')
            description[0] = static_cast<char>(description[0] - 'A' + 'a');
        return error(e.source().begin, description);
    }

    std::unexpected<util::Error> unknown_key(const toml::key& key,
                                             std::span<const std::string_view> known,
                                             bool in_server) const {
        const std::string_view name = key.str();
        std::string message = util::format("unknown key '{}'", name);
        if (in_server && contains(k_top_level_keys, name))
            message += " in [[servers]] (top-level keys must come before the first [[servers]])";
        else if (!in_server && contains(k_server_keys, name))
            message += " (it belongs in a [[servers]] table)";
        else if (const auto hint = util::closest_word(name, known))
            message += util::format(" (did you mean '{}'?)", *hint);
        else if (const auto top =
                     in_server ? util::closest_word(name, k_top_level_keys) : std::nullopt)
            message += util::format(" (did you mean '{}'? it is a top-level key, set before the "
                                    "first [[servers]])",
                                    *top);
        return error(key.source().begin, message);
    }

    util::Expected<std::string> get_string(std::string_view name, const toml::node& node) const {
        if (const auto* value = node.as_string())
            return value->get();
        return error(node, util::format("'{}' must be a string, not {}", name, type_name(node)));
    }

    util::Expected<Millis> get_duration(std::string_view name, const toml::node& node) const {
        util::Expected<Millis> result;
        if (const auto* text = node.as_string())
            result = util::parse_duration(text->get());
        else if (const auto* integer = node.as_integer())
            result = util::duration_from_seconds(static_cast<double>(integer->get()));
        else if (const auto* floating = node.as_floating_point())
            result = util::duration_from_seconds(floating->get());
        else
            return error(
                node,
                util::format(
                    "'{}' must be a duration string like \"30s\" or a number of seconds, not {}",
                    name, type_name(node)));
        if (!result)
            return error(node, util::format("'{}': {}", name, result.error().message));
        return result;
    }

    util::Expected<void> parse_key_prefix(const toml::node& node, std::string& out) const {
        auto value = get_string("key_prefix", node);
        if (!value)
            return std::unexpected(value.error());
        for (char c : *value) {
            if (c < 0x20 || c > 0x7e)
                return error(node, "'key_prefix' may only contain printable ASCII characters");
            // A brace would change the Redis Cluster hash tag of "{<prefix><name>}:suffix",
            // putting a lock's helper keys in another slot than the lock itself.
            if (c == '{' || c == '}')
                return error(node, "'key_prefix' must not contain '{' or '}'");
        }
        out = std::move(*value);
        return {};
    }

    util::Expected<void> parse_ttl(const toml::node& node, Millis& out) const {
        auto value = get_duration("ttl", node);
        if (!value)
            return std::unexpected(value.error());
        if (*value < k_min_ttl)
            return error(node, util::format("'ttl' must be at least {}, not {}",
                                            util::format_duration(k_min_ttl),
                                            util::format_duration(*value)));
        out = *value;
        return {};
    }

    util::Expected<void> parse_timeout(std::string_view name, const toml::node& node,
                                       Millis& out) const {
        auto value = get_duration(name, node);
        if (!value)
            return std::unexpected(value.error());
        if (value->count() <= 0)
            return error(node, util::format("'{}' must be at least 1ms, not 0s", name));
        out = *value;
        return {};
    }

    util::Expected<void> parse_timeout(std::string_view name, const toml::node& node,
                                       std::optional<Millis>& out) const {
        Millis value{};
        if (auto ok = parse_timeout(name, node, value); !ok)
            return ok;
        out = value;
        return {};
    }

    util::Expected<void> parse_duration_into(std::string_view name, const toml::node& node,
                                             std::optional<Millis>& out) const {
        auto value = get_duration(name, node);
        if (!value)
            return std::unexpected(value.error());
        out = *value;
        return {};
    }

    // metrics_file or metrics_dir (one of them): a path, relative to the config's directory.
    util::Expected<void> parse_metrics_path(std::string_view name, const toml::node& node,
                                            Config& config) const {
        auto value = get_string(name, node);
        if (!value)
            return std::unexpected(value.error());
        if (value->empty())
            return error(node, util::format("'{}' must not be empty", name));
        const bool file = name == "metrics_file";
        if (!(file ? config.metrics_dir : config.metrics_file).empty())
            return error(node, "give either 'metrics_file' or 'metrics_dir', not both");
        std::filesystem::path path(*value);
        if (path.is_relative())
            path = m_source.parent_path() / path;
        (file ? config.metrics_file : config.metrics_dir) = path.string();
        return {};
    }

    util::Expected<void> parse_on_lost(const toml::node& node, std::string& out) const {
        auto value = get_string("on_lost", node);
        if (!value)
            return std::unexpected(value.error());
        out = std::move(*value); // empty: none
        return {};
    }

    // An integer from `low` to `high`, for key `key`.
    util::Expected<long long> integer_in(std::string_view key, const toml::node& node,
                                         long long low, long long high) const {
        const auto* value = node.as_integer();
        if (value == nullptr)
            return error(node,
                         util::format("'{}' must be an integer, not {}", key, type_name(node)));
        if (value->get() < low || value->get() > high)
            return error(
                node, util::format("'{}' must be {} to {}, not {}", key, low, high, value->get()));
        return value->get();
    }

    // replicas: how many replicas must acknowledge a lock write (WAIT), 0 to 100.
    util::Expected<void> parse_replicas(const toml::node& node, int& out) const {
        auto value = integer_in("replicas", node, 0, 100);
        if (!value)
            return std::unexpected(value.error());
        out = static_cast<int>(*value);
        return {};
    }

    // history: how many runs of each name are kept, 0 (none) to 100000.
    util::Expected<void> parse_history(const toml::node& node, size_t& out) const {
        auto value = integer_in("history", node, 0, 100000);
        if (!value)
            return std::unexpected(value.error());
        out = static_cast<size_t>(*value);
        return {};
    }

    // history_max_age: runs older than this are dropped, at least a minute.
    util::Expected<void> parse_history_age(const toml::node& node, Millis& out) const {
        auto value = get_duration("history_max_age", node);
        if (!value)
            return std::unexpected(value.error());
        if (*value < std::chrono::minutes(1))
            return error(node, util::format("'history_max_age' must be at least 1m, not {}",
                                            util::format_duration(*value)));
        out = *value;
        return {};
    }

    // tls_verify is a boolean; the others name a file (relative to the config's directory)
    // or, tls_server_name, the name the server's certificate must have.
    util::Expected<void> parse_tls_key(std::string_view name, const toml::node& node,
                                       TlsConfig& tls) const {
        if (name == "tls_verify") {
            if (const auto* value = node.as_boolean()) {
                tls.verify = value->get();
                return {};
            }
            return error(
                node, util::format("'tls_verify' must be true or false, not {}", type_name(node)));
        }
        auto value = get_string(name, node);
        if (!value)
            return std::unexpected(value.error());
        if (value->empty())
            return error(node, util::format("'{}' must not be empty", name));
        if (name == "tls_server_name") {
            tls.server_name = std::move(*value);
            return {};
        }
        std::filesystem::path path(*value);
        if (path.is_relative())
            path = m_source.parent_path() / path;
        // Found missing now rather than at the first connection, as a config error.
        if (::access(path.c_str(), R_OK) != 0)
            return error(node, util::format("cannot read {} '{}': {}", name, path.string(),
                                            util::read_error_text(errno)));
        (name == "tls_ca_file"     ? tls.ca_file
         : name == "tls_cert_file" ? tls.cert_file
                                   : tls.key_file) = path.string();
        return {};
    }

    util::Expected<void> parse_servers(const toml::node& node, std::vector<PendingServer>& out) {
        const auto* array = node.as_array();
        if (array == nullptr) {
            if (node.is_table())
                return error(node, "'servers' must be an array of tables: write [[servers]], "
                                   "not [servers]");
            return error(node,
                         util::format("'servers' must be an array of tables ([[servers]]), not {}",
                                      type_name(node)));
        }
        for (const toml::node& element : *array) {
            const auto* table = element.as_table();
            if (table == nullptr)
                return error(element, util::format("each 'servers' entry must be a table, not {}",
                                                   type_name(element)));
            auto server = parse_server(*table);
            if (!server)
                return std::unexpected(server.error());
            out.push_back(std::move(*server));
        }
        return {};
    }

    util::Expected<PendingServer> parse_server(const toml::table& table) {
        PendingServer server;
        const toml::node* url = nullptr;
        const toml::node* username = nullptr;
        const toml::node* password_env = nullptr;
        const toml::node* password_file = nullptr;
        const toml::node* first_sentinel_key = nullptr;
        const toml::node* sentinel_password_env = nullptr;
        const toml::node* sentinel_password_file = nullptr;

        for (const auto& [key, node] : in_file_order(table)) {
            const std::string_view name = key->str();
            util::Expected<void> ok;
            if (name.starts_with("sentinel_") && contains(k_server_keys, name)) {
                if (!node->is_string())
                    return error(*node, util::format("'{}' must be a string, not {}", name,
                                                     type_name(*node)));
                if (first_sentinel_key == nullptr)
                    first_sentinel_key = node;
                if (name == "sentinel_username") {
                    if (node->as_string()->get().empty())
                        return error(*node, "'sentinel_username' must not be empty");
                    server.sentinel_username = node->as_string()->get();
                } else {
                    if (sentinel_password_env != nullptr || sentinel_password_file != nullptr)
                        return error(*node, "give the sentinels one password source, "
                                            "sentinel_password_env or sentinel_password_file");
                    (name == "sentinel_password_env" ? sentinel_password_env
                                                     : sentinel_password_file) = node;
                }
            } else if (name == "url" || name == "username" || name == "password_env" ||
                       name == "password_file") {
                if (!node->is_string())
                    return error(*node, util::format("'{}' must be a string, not {}", name,
                                                     type_name(*node)));
                (name == "url"            ? url
                 : name == "username"     ? username
                 : name == "password_env" ? password_env
                                          : password_file) = node;
            } else if (name == "connect_timeout") {
                ok = parse_timeout(name, *node, server.connect_timeout);
            } else if (name == "command_timeout") {
                ok = parse_timeout(name, *node, server.command_timeout);
            } else if (name == "replicas") {
                int replicas = 0;
                ok = parse_replicas(*node, replicas);
                server.replicas = replicas;
            } else if (name.starts_with("tls_") && contains(k_server_keys, name)) {
                server.tls.emplace_back(std::string(name), node);
            } else {
                ok = unknown_key(*key, k_server_keys, true);
            }
            if (!ok)
                return std::unexpected(ok.error());
        }

        if (url == nullptr)
            return error(table, "a [[servers]] table needs a 'url'");
        auto parsed = parse_server_url(url->as_string()->get());
        if (!parsed)
            return error(*url, parsed.error().message);
        server.url = std::move(*parsed);
        server.where = util::format("{}:{}", url->source().begin.line, url->source().begin.column);
        if (server.url.password)
            m_inline_password = true;

        if (username != nullptr) {
            const std::string& name = username->as_string()->get();
            if (name.empty())
                return error(*username, "'username' must not be empty");
            server.url.username = name;
        }

        // One password source per server: with two, which one wins would be a guess.
        std::vector<std::pair<std::string_view, const toml::node*>> sources;
        if (server.url.password)
            sources.emplace_back("the password in 'url'", url);
        if (password_env != nullptr)
            sources.emplace_back("'password_env'", password_env);
        if (password_file != nullptr)
            sources.emplace_back("'password_file'", password_file);
        if (sources.size() > 1) {
            std::ranges::sort(sources, [](const auto& a, const auto& b) {
                return before(a.second->source().begin, b.second->source().begin);
            });
            return error(*sources[1].second,
                         util::format("{} conflicts with {}; give a server one password source",
                                      sources[1].first, sources[0].first));
        }

        using Source = std::tuple<const toml::node*, std::string_view, std::optional<std::string>*>;
        for (auto [node, key, target] :
             {Source{password_env, "password_env", &server.url.password},
              Source{sentinel_password_env, "sentinel_password_env", &server.sentinel_password}}) {
            if (node == nullptr)
                continue;
            auto password = read_password_env(*node, key);
            if (!password)
                return std::unexpected(password.error());
            *target = std::move(*password);
        }
        for (auto [node, key, target] :
             {Source{password_file, "password_file", &server.url.password},
              Source{sentinel_password_file, "sentinel_password_file",
                     &server.sentinel_password}}) {
            if (node == nullptr)
                continue;
            auto password = read_password_file(*node, key);
            if (!password)
                return std::unexpected(password.error());
            *target = std::move(*password);
        }
        if (first_sentinel_key != nullptr && !server.url.is_sentinel())
            return error(*first_sentinel_key, "sentinel_* keys apply to a redis-sentinel:// url");
        return server;
    }

    util::Expected<std::string> read_password_env(const toml::node& node,
                                                  std::string_view key) const {
        const std::string& variable = node.as_string()->get();
        if (variable.empty())
            return error(node, util::format("'{}' must name an environment variable", key));
        const char* value = std::getenv(variable.c_str());
        if (value == nullptr)
            return error(node,
                         util::format("environment variable '{}' ({}) is not set", variable, key));
        if (*value == '\0')
            return error(node,
                         util::format("environment variable '{}' ({}) is empty", variable, key));
        return std::string(value);
    }

    util::Expected<std::string> read_password_file(const toml::node& node,
                                                   std::string_view key) const {
        const std::string& value = node.as_string()->get();
        if (value.empty())
            return error(node, util::format("'{}' must name a file", key));
        std::filesystem::path path(value);
        if (path.is_relative())
            path = m_source.parent_path() / path;

        int errno_value = 0;
        auto content = util::read_file(path, k_max_password_file, errno_value);
        if (!content) {
            if (errno_value == EFBIG)
                return error(node, util::format("{} '{}' is too large to hold a password", key,
                                                path.string()));
            return error(node, util::format("cannot read {} '{}': {}", key, path.string(),
                                            util::read_error_text(errno_value)));
        }
        std::string& password = content->text;
        if (password.ends_with('\n'))
            password.pop_back();
        if (password.ends_with('\r'))
            password.pop_back();
        if (password.empty())
            return error(node, util::format("{} '{}' is empty", key, path.string()));
        if (readable_by_others(content->mode))
            util::log::note(
                "warning: password file '{}' is readable by group or others; chmod 600 it",
                path.string());
        return std::move(password);
    }

    std::filesystem::path m_source;
    std::string m_name;
    bool m_inline_password = false;
};

// An explicitly named config must exist; a stat is all it costs.
util::Expected<std::optional<std::filesystem::path>>
explicit_file(const std::filesystem::path& path, std::string_view named_by) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int error = errno;
        return util::fail(ErrorKind::config,
                          util::format("cannot read config '{}' (named by {}): {}", path.string(),
                                       named_by, util::read_error_text(error)));
    }
    return path;
}

// An optional candidate is skipped only when it is plainly absent; any other failure (say,
// EACCES) returns the path so that loading it reports the problem instead of hiding it.
bool candidate_present(const std::filesystem::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0)
        return true;
    return errno != ENOENT && errno != ENOTDIR;
}

const char* non_empty_env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
}

} // namespace

util::Expected<std::optional<std::filesystem::path>>
find_config_file(const std::optional<std::filesystem::path>& explicit_path) {
    if (explicit_path)
        return explicit_file(*explicit_path, "-c");
    if (const char* env = non_empty_env("REDLOCK_CONFIG"))
        return explicit_file(env, "REDLOCK_CONFIG");

    // XDG base directories must be absolute; a relative one is ignored, as the spec says.
    std::optional<std::filesystem::path> config_home;
    if (const char* xdg = non_empty_env("XDG_CONFIG_HOME"); xdg != nullptr && *xdg == '/')
        config_home = xdg;
    else if (const char* home = non_empty_env("HOME"))
        config_home = std::filesystem::path(home) / ".config";
    if (config_home) {
        auto user_file = *config_home / "redlock" / "config.toml";
        if (candidate_present(user_file))
            return user_file;
    }
    std::filesystem::path system_file = "/etc/redlock/config.toml";
    if (candidate_present(system_file))
        return system_file;
    return std::nullopt;
}

util::Expected<Config> parse_config(std::string_view text, const std::filesystem::path& source) {
    return Parser(source).parse(text);
}

util::Expected<Config> load_config(const std::optional<std::filesystem::path>& path) {
    if (!path) {
        Config config;
        config.servers.push_back(default_server(config));
        return config;
    }

    int errno_value = 0;
    // No practical config comes near this; it only bounds a mistaken -c naming a huge file.
    constexpr size_t k_max_config = size_t{16} * 1024 * 1024;
    auto content = util::read_file(*path, k_max_config, errno_value);
    if (!content)
        return util::fail(ErrorKind::config,
                          util::format("cannot read config '{}': {}", path->string(),
                                       util::read_error_text(errno_value)));
    Parser parser(*path);
    auto config = parser.parse(content->text);
    if (config && parser.has_inline_password() && readable_by_others(content->mode))
        util::log::note(
            "warning: '{}' contains a password and is readable by group or others; chmod 600 it",
            path->string());
    return config;
}

} // namespace redlock::config
