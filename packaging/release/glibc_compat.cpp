// Release builds (REDLOCK_PORTABLE) link against glibc 2.31 (Debian 11's) and must start
// on 2.28 (RHEL 8): what the binary would otherwise bind from a newer glibc is defined
// here instead. packaging/release/check_binary.cmake fails the build if anything newer
// than GLIBC_2.28 is still asked for.

#include "glibc_compat.hpp"

#include <cstddef>
#include <cstdint>
#include <link.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" {

// glibc 2.32. libstdc++.a (g++ 12, built on glibc 2.36) reads it to skip atomic reference
// counting while the process has one thread. 0 says "maybe several threads": the atomic
// path, always correct. This definition is the binary's own, whatever glibc it runs on.
char __libc_single_threaded = 0;

int close_range(unsigned int first, unsigned int last, int flags) noexcept {
    return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}

// glibc 2.35, as <bits/dl_find_object.h> has it on x86_64 and aarch64 (no dlfo_eh_dbase
// and no dlfo_eh_count there).
struct dl_find_object {
    unsigned long long dlfo_flags;
    void* dlfo_map_start;
    void* dlfo_map_end;
    struct link_map* dlfo_link_map;
    void* dlfo_eh_frame;
    unsigned long long dlfo_reserved[7];
};

// glibc 2.35. libgcc_eh.a (static libgcc) finds the unwind tables of the code an
// exception passes through with it, and when it fails gives up: no handler is found and
// the program terminates (unwind-dw2-fde-dip.c does not fall back to dl_iterate_phdr when
// the call fails). So this is a real one, built on dl_iterate_phdr (glibc 2.2.5) the way
// libgcc searched before 2.35: the loaded object whose PT_LOAD segments hold `pc`, its
// extent and its PT_GNU_EH_FRAME (.eh_frame_hdr). dlfo_link_map is left null: libgcc
// does not read it, and nothing else here calls this function.
int _dl_find_object(void* pc, struct dl_find_object* result) {
    struct Search {
        std::uintptr_t pc;
        struct dl_find_object* result;
    } search{reinterpret_cast<std::uintptr_t>(pc), result};
    auto visit = [](struct dl_phdr_info* info, std::size_t, void* data) -> int {
        auto& s = *static_cast<Search*>(data);
        std::uintptr_t start = UINTPTR_MAX, end = 0;
        void* eh_frame = nullptr;
        bool holds = false;
        for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
            const std::uintptr_t begin = info->dlpi_addr + phdr.p_vaddr;
            if (phdr.p_type == PT_LOAD) {
                const std::uintptr_t stop = begin + phdr.p_memsz;
                holds = holds || (s.pc >= begin && s.pc < stop);
                start = begin < start ? begin : start;
                end = stop > end ? stop : end;
            } else if (phdr.p_type == PT_GNU_EH_FRAME) {
                eh_frame = reinterpret_cast<void*>(begin);
            }
        }
        if (!holds)
            return 0;
        *s.result = {};
        s.result->dlfo_map_start = reinterpret_cast<void*>(start);
        s.result->dlfo_map_end = reinterpret_cast<void*>(end);
        s.result->dlfo_eh_frame = eh_frame;
        return 1;
    };
    return ::dl_iterate_phdr(visit, &search) == 1 ? 0 : -1;
}

} // extern "C"
