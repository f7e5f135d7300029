#pragma once
// The functions of a library loaded at run time (dlopen), looked up by name: libssl for
// TLS (redis/tls.cpp), libmicrohttpd for the exporter (http/server.cpp). Neither is linked,
// so that a run loads neither.

#include <dlfcn.h>

namespace redlock::util {

// Sets `out` to the function `name` of `lib`; false when the library has none.
template <typename F>
bool find_symbol(void* lib, const char* name, F& out) {
    out = reinterpret_cast<F>(::dlsym(lib, name));
    return out != nullptr;
}

} // namespace redlock::util
