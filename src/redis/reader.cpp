#include "redis/reader.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <new>
#include <optional>

#include <hiredis/sds.h> // hiredis's read buffer

#include "util/format.hpp"

namespace redlock::redis {

struct ReaderState {
    ReaderPtr reader;
    size_t claimed = 0;   // array elements the reply being read has claimed so far
    size_t pending = 0;   // bytes fed since the last reply ended
    std::string refusal;  // why the reader stopped, once it did
    size_t pass_over = 0; // bulk strings longer than this are dropped (0: refused)
    size_t dropping = 0;  // bytes of such a bulk string still to drop as they come
};

namespace {

// hiredis's own reply constructors (static in hiredis.c, installed by redisReaderCreate):
// the bounded ones call them once a reply passed the checks, so that every reply is one
// that freeReplyObject frees.
const redisReplyObjectFunctions& hiredis_functions() {
    static const redisReplyObjectFunctions functions = [] {
        ReaderPtr probe(redisReaderCreate());
        if (!probe)
            throw std::bad_alloc();
        return *probe->fn;
    }();
    return functions;
}

// An array is refused before hiredis allocates its element pointers: calloc of a claimed
// 2^31-1 elements is 16 GB, and freeing it walks every slot (minutes), even when the
// elements never come. Every array of one reply draws on one budget, so nesting cannot
// multiply it. (A refusal is hiredis's "out of memory"; refusal says what it was.) Called
// from C: nothing may be thrown through it.
void* create_array(const redisReadTask* task, int elements) noexcept {
    auto& state = *static_cast<ReaderState*>(task->privdata);
    if (!task->parent)
        state.claimed = 0; // the first array of a new reply
    const auto n = static_cast<size_t>(std::max(elements, 0));
    if (n <= k_max_reply_elements && state.claimed + n <= k_max_reply_elements) {
        state.claimed += n;
        return hiredis_functions().createArray(task, elements);
    }
    try {
        state.refusal = n > k_max_reply_elements
                            ? util::format("reply too large: array of {} elements", n)
                            : util::format("reply too large: more than {} array elements in all",
                                           k_max_reply_elements);
    } catch (...) { // out of memory: hiredis's own message then
    }
    return nullptr;
}

redisReplyObjectFunctions* bounded_functions() {
    static redisReplyObjectFunctions functions = [] {
        auto f = hiredis_functions();
        f.createArray = create_array;
        return f;
    }();
    return &functions;
}

// The length that a bulk string being read claims. hiredis buffers a bulk string whole
// before it makes anything of it, its header ("LENGTH\r\n", the '$' consumed) left at the
// read position meanwhile: a claim past the byte limit can be refused at once, rather than
// once that much has come (or the command timed out). Digits that came so far are a lower
// bound of the length.
std::optional<size_t> claimed_bulk_length(const redisReader& r) {
    if (r.ridx < 0 || r.rstack[r.ridx].type != REDIS_REPLY_STRING || !r.buf || r.pos >= r.len)
        return std::nullopt;
    const char* begin = r.buf + r.pos;
    size_t length = 0;
    auto [end, ec] = std::from_chars(begin, r.buf + r.len, length);
    if (end == begin)
        return std::nullopt;
    return ec == std::errc::result_out_of_range ? SIZE_MAX : length;
}

// Passes over the bulk string hiredis is reading (its header, "LENGTH\r\n" after the '$',
// at the read position; claimed_bulk_length): its header becomes a nil's ("-1\r\n", which
// is never longer), what came of its body is dropped from hiredis's buffer (an sds), and
// the rest is to be dropped as it comes. nullopt while the header has not all come; false
// when it cannot be (not a length).
std::optional<bool> pass_over_bulk(ReaderState& s) {
    redisReader& r = *s.reader;
    const char* begin = r.buf + r.pos;
    const char* end = r.buf + r.len;
    const char* crlf = std::search(begin, end, "\r\n", "\r\n" + 2);
    if (crlf == end)
        return end - begin > 24 ? std::optional(false) : std::nullopt;
    size_t length = 0;
    auto [digits_end, ec] = std::from_chars(begin, crlf, length);
    const auto header_end = static_cast<size_t>(crlf + 2 - r.buf);
    const size_t have = r.len - header_end; // of the body and its "\r\n"
    if (ec != std::errc() || digits_end != crlf || header_end - r.pos < 4 || have >= length + 2)
        return false;
    std::memcpy(r.buf + header_end - 4, "-1\r\n", 4);
    r.pos = header_end - 4;
    sdssetlen(r.buf, header_end); // (inline, as sdslen: hiredis.h has them without extern "C")
    r.buf[header_end] = '\0';
    r.len = header_end;
    s.dropping = length + 2 - have;
    s.pending -= have;
    return true;
}

// What is buffered of a line that hiredis waits to see the end of (a status, an error, an
// integer, an array's header): it looks for the end from the line's start at every read, so
// a line that never ends would cost time quadratic in its length.
size_t unfinished_line(const redisReader& r) {
    if (r.ridx < 0 || !r.buf)
        return 0;
    switch (r.rstack[r.ridx].type) {
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
    case REDIS_REPLY_INTEGER:
    case REDIS_REPLY_ARRAY:
        return r.len - r.pos;
    default:
        return 0;
    }
}

} // namespace

Reader::Reader() : m_state(std::make_unique<ReaderState>()) {
    m_state->reader.reset(redisReaderCreateWithFunctions(bounded_functions()));
    if (!m_state->reader)
        throw std::bad_alloc();
    m_state->reader->privdata = m_state.get();
}

Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

std::expected<void, std::string> Reader::feed(std::string_view bytes) {
    auto& s = *m_state;
    if (!s.refusal.empty())
        return std::unexpected(s.refusal);
    if (s.dropping > 0) { // of a bulk string passed over
        const size_t n = std::min(s.dropping, bytes.size());
        s.dropping -= n;
        bytes.remove_prefix(n);
        if (bytes.empty())
            return {};
    }
    if (s.pending + bytes.size() > k_max_reply_bytes) {
        s.refusal = util::format("reply too large: more than {} bytes", k_max_reply_bytes);
        return std::unexpected(s.refusal);
    }
    if (redisReaderFeed(s.reader.get(), bytes.data(), bytes.size()) != REDIS_OK) {
        s.refusal = s.reader->errstr[0] ? s.reader->errstr : "cannot buffer the reply";
        return std::unexpected(s.refusal);
    }
    s.pending += bytes.size();
    return {};
}

std::expected<ReplyPtr, std::string> Reader::next() {
    auto& s = *m_state;
    if (!s.refusal.empty())
        return std::unexpected(s.refusal);
    redisReader& r = *s.reader;
    void* raw = nullptr;
    if (redisReaderGetReply(&r, &raw) != REDIS_OK) {
        if (s.refusal.empty())
            s.refusal = r.errstr;
        return std::unexpected(s.refusal);
    }
    if (raw) {
        s.pending = r.len - r.pos; // the bytes of the replies after it
        return ReplyPtr(static_cast<redisReply*>(raw));
    }
    if (auto length = claimed_bulk_length(r); length && s.pass_over > 0 && *length > s.pass_over) {
        auto passed = pass_over_bulk(s);
        if (!passed)
            return ReplyPtr(); // its header is still coming
        if (*passed)
            return next(); // a nil in its place, and on
    }
    if (auto length = claimed_bulk_length(r); length && *length > k_max_reply_bytes) {
        s.refusal = util::format("reply too large: bulk string of {} bytes", *length);
        return std::unexpected(s.refusal);
    }
    if (unfinished_line(r) > k_max_line_bytes) {
        s.refusal = util::format("reply too large: a line of more than {} bytes", k_max_line_bytes);
        return std::unexpected(s.refusal);
    }
    return ReplyPtr();
}

size_t Reader::pending() const {
    return m_state->pending;
}

void Reader::pass_over_bulks_longer_than(size_t bytes) {
    m_state->pass_over = bytes;
}

} // namespace redlock::redis
