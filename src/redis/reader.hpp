#pragma once
// The one place where bytes from a server become replies: hiredis's reply reader, bounded so
// that a hostile or corrupted server cannot make redlock allocate or buffer without limit.
// One reply may claim at most k_max_reply_elements array elements in all (nested arrays
// included, refused before they are allocated), take at most k_max_reply_bytes on the wire
// (refused as soon as a bulk string's length says so, or once that much came without the
// reply ending), with lines (status, error) of at most k_max_line_bytes, and nest at most
// 7 arrays deep (hiredis's own limit).

#include <cstddef>
#include <expected>
#include <memory>
#include <string>
#include <string_view>

#include "redis/reply.hpp"

namespace redlock::redis {

struct ReaderState; // reader.cpp

// redlock's own replies are tiny: an integer, a status, a few short strings. The largest it
// reads are list's SCAN pages (COUNT 1000: about 1000 keys; a few times that at most, while
// the keyspace is rehashed or cannot be resized during a fork), a cluster's CLUSTER NODES
// (one line per node, about 250 KB for the 1000 nodes Redis supports; a bulk string) and
// doctor's INFO (a few KB). Both limits leave those dozens of times their size, and keep
// what one reply can cost to about 20 MB: 64K objects of ~64 bytes, their pointer arrays,
// and the bytes, buffered and copied.
inline constexpr size_t k_max_reply_elements = 65536;
inline constexpr size_t k_max_reply_bytes = size_t{4} << 20;
// A status or error line: Redis's are short (an error quotes at most 128 bytes of a command).
inline constexpr size_t k_max_line_bytes = size_t{64} << 10;

class Reader {
  public:
    Reader();
    Reader(Reader&&) noexcept;
    Reader& operator=(Reader&&) noexcept;
    ~Reader();

    // Takes bytes read from the server; an error (as next()'s) when the reply they belong to
    // is already too large. Call next() until it has no more replies after each feed, so
    // that the bytes of replies that ended do not count against the next one.
    [[nodiscard]] std::expected<void, std::string> feed(std::string_view bytes);
    // The next complete reply, or null when more bytes are needed. An error when the bytes
    // are not RESP or the reply claims more than the limits ("reply too large: array of
    // 2147483647 elements"); the reader is then of no further use.
    [[nodiscard]] std::expected<ReplyPtr, std::string> next();
    // Bytes received that are not part of a reply returned yet.
    [[nodiscard]] size_t pending() const;

    // From now on, a bulk string longer than `bytes` is passed over rather than refused:
    // its bytes are dropped as they come, never held, and the reply has a nil in its
    // place. For pub/sub, where anyone who may publish can send a message of any size
    // (up to 512 MB), and none of redlock's notices is more than a few hundred bytes: such
    // a message is no notice, and no reason to stop listening.
    void pass_over_bulks_longer_than(size_t bytes);

  private:
    std::unique_ptr<ReaderState> m_state; // on the heap: hiredis keeps a pointer to it
};

} // namespace redlock::redis
