// C++ names for `--in` (issue 18): a method, a namespaced function and a same-named one in
// another namespace, two instances of a function template, and a method the compiler inlines
// into its caller (main). Each reads through a packed struct, at a stride of its own so that a
// different share of its reads is misaligned; the program counts the misaligned reads of each
// function itself and prints them, so tests take the expected counts from here, not ualdbg.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

template <typename T>
struct __attribute__((packed)) Unaligned {
    char pad;
    T value;
};

// Misaligned reads counted per function, from the addresses the functions read.
static int counts[6];
template <typename T>
static T load(const unsigned char *p, int which) {
    counts[which] += reinterpret_cast<std::uintptr_t>(p + 1) % sizeof(T) != 0;
    return reinterpret_cast<const Unaligned<T> *>(p)->value;
}

namespace ns {
struct Klass {
    const unsigned char *base;
    __attribute__((noinline)) std::uint32_t method(int i) const;
    // Always inlined into main: no symbol, only DW_TAG_inlined_subroutine ranges.
    __attribute__((always_inline)) long small(int n) const {
        long s = 0;
        for (int i = 0; i < n; i++) s += load<std::uint16_t>(base + i, 1);
        return s;
    }
};

std::uint32_t Klass::method(int i) const { return load<std::uint32_t>(base + 3 * i, 0); }

__attribute__((noinline)) std::uint64_t func(const unsigned char *p, int i) { return load<std::uint64_t>(p + 5 * i, 2); }

template <typename T>
__attribute__((noinline)) T twice(const unsigned char *p, int i) {
    return 2 * load<T>(p + i, sizeof(T) == 4 ? 3 : 4);
}
}  // namespace ns

namespace other {
__attribute__((noinline)) std::uint64_t func(const unsigned char *p, int i) { return load<std::uint64_t>(p + 4 * i, 5); }
}  // namespace other

int main(int argc, char **argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 10;
    unsigned char *b = static_cast<unsigned char *>(std::calloc(1, 8 * n + 16));
    ns::Klass k{b};
    unsigned long total = k.small(n);
    for (int i = 0; i < n; i++) {
        total += k.method(i) + ns::func(b, i) + other::func(b, i);
        total += static_cast<unsigned long>(ns::twice<int>(b, i)) + static_cast<unsigned long>(ns::twice<long>(b, i));
    }
    std::printf("total %lu\n", total);
    std::printf("misaligned reads: method=%d small=%d func=%d twice_int=%d twice_long=%d other_func=%d\n",
                counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);
    std::free(b);
    return 0;
}
