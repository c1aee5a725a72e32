/* packed_header.c - a protocol parser over packed header structs.
 *
 * A received Ethernet frame is 14 bytes of Ethernet header followed by IPv4,
 * UDP and an application header.  The frame buffer is 16-aligned, so the IPv4
 * header starts at 14 = 2 mod 4 (the reason Linux drivers reserve NET_IP_ALIGN
 * bytes), and the parser overlays `__attribute__((packed))` structs on it.
 * Packed means "alignment 1": on x86 gcc then uses plain loads, and every
 * field whose offset in the frame is not a multiple of its size is read with
 * a misaligned load.  Per frame (offsets in the frame):
 *   ip->saddr   at 26 (2 mod 4)  4-byte read  (parse_frame)
 *   ip->daddr   at 30 (2 mod 4)  4-byte read  (parse_frame)
 *   app seq     at 43 (3 mod 4)  4-byte read  (memcpy in read32, inlined in
 *                                             app_seq, inlined in parse_frame)
 *   app->stamp  at 49 (1 mod 8)  8-byte read  (parse_frame)
 *   app->len    at 47 (odd)      2-byte read  (parse_frame, ntohs)
 * The Ethernet type (12), IP proto (23) and the UDP ports (34, 36) are
 * aligned for their size and do not fault.
 *
 * Usage: packed_header [frames]   (default 20 => 5 * 20 = 100 faults)
 */
#include <arpa/inet.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eth_hdr {
    uint8_t dst[6], src[6];
    uint16_t type;
} __attribute__((packed));

struct ip_hdr {
    uint8_t ver_ihl, tos;
    uint16_t tot_len, id, frag;
    uint8_t ttl, proto;
    uint16_t check;
    uint32_t saddr, daddr;
} __attribute__((packed));

struct udp_hdr {
    uint16_t sport, dport, len, check;
} __attribute__((packed));

struct app_hdr {
    uint8_t kind;
    uint32_t seq;
    uint16_t len;
    uint64_t stamp;
} __attribute__((packed));

#define ETH_OFF 0
#define IP_OFF (ETH_OFF + sizeof(struct eth_hdr)) /* 14 */
#define UDP_OFF (IP_OFF + sizeof(struct ip_hdr))  /* 34 */
#define APP_OFF (UDP_OFF + sizeof(struct udp_hdr)) /* 42 */
#define FRAME_SIZE 64                             /* stride: every frame 16-aligned */
#define MAX_FRAMES 1024

_Alignas(16) static unsigned char ring[MAX_FRAMES * FRAME_SIZE];

/* The portable "unaligned read" idiom: memcpy into a local.  On x86 gcc turns
 * the 4-byte memcpy into one 4-byte load, so it is still a misaligned access
 * at the CPU level.  always_inline, and called through app_seq (also
 * always_inline), so the faulting PC lies in an inlined copy of read32 inside
 * an inlined copy of app_seq inside parse_frame: a two-level inline chain.
 * It returns the field in network byte order; callers apply ntohl. */
static inline __attribute__((always_inline)) uint32_t read32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v); /* misaligned 4-byte read (app seq) */
    return v;
}

static inline __attribute__((always_inline)) uint32_t app_seq(const struct app_hdr *app)
{
    return read32((const unsigned char *)app + offsetof(struct app_hdr, seq));
}

struct summary {
    uint64_t flow, addr_sum, seq_sum, len_sum, stamp_sum, port_sum;
};

/* noipa: gcc sees only a byte pointer, as in a real receive path.
 *
 * Each misaligned field is loaded once into a local in network order, hashed
 * raw and summed in host order.  This matters for where a debugger places the
 * fault: when the only use of a load is ntohl()/ntohs()/be64toh(), gcc -O1
 * moves the load into the inlined glibc __bswap_16/32/64 (the line table then
 * puts the faulting PC at bits/byteswap.h:37/52/73, and several fields would
 * share one location).  With a second use, each load keeps its own line. */
__attribute__((noipa)) static void parse_frame(const unsigned char *f, struct summary *s)
{
    const struct eth_hdr *eth = (const struct eth_hdr *)(f + ETH_OFF);
    const struct ip_hdr *ip = (const struct ip_hdr *)(f + IP_OFF);
    const struct udp_hdr *udp = (const struct udp_hdr *)(f + UDP_OFF);
    const struct app_hdr *app = (const struct app_hdr *)(f + APP_OFF);

    if (ntohs(eth->type) != 0x0800 || ip->proto != 17) /* aligned: offset 12 */
        return;
    uint32_t saddr = ip->saddr; /* misaligned 4-byte read */
    uint32_t daddr = ip->daddr; /* misaligned 4-byte read */
    uint32_t seq = app_seq(app); /* misaligned 4-byte read, in read32 */
    uint64_t stamp = app->stamp; /* misaligned 8-byte read */
    uint16_t len = app->len;     /* misaligned 2-byte read */
    s->flow ^= saddr ^ daddr ^ seq ^ stamp ^ len;
    s->addr_sum += ntohl(saddr) + ntohl(daddr);
    s->seq_sum += ntohl(seq);
    s->stamp_sum += be64toh(stamp);
    s->port_sum += ntohs(udp->sport) + ntohs(udp->dport); /* aligned: 34, 36 */
    s->len_sum += ntohs(len);
}

/* The frame builder stores one byte at a time through a volatile pointer, so
 * gcc cannot fuse the bytes into wider (misaligned) stores: only the parser
 * faults. */
static void put_be(volatile unsigned char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static void build_frame(unsigned char *f, unsigned k)
{
    memset(f, 0, FRAME_SIZE);
    put_be(f + 12, 0x0800, 2);                    /* ethertype IPv4 */
    put_be(f + IP_OFF, 0x45, 1);                  /* version 4, ihl 5 */
    put_be(f + IP_OFF + 9, 17, 1);                /* UDP */
    put_be(f + IP_OFF + 12, 0x0a000001 + k, 4);   /* saddr 10.0.0.1+k */
    put_be(f + IP_OFF + 16, 0xc0a80001, 4);       /* daddr 192.168.0.1 */
    put_be(f + UDP_OFF, 5000 + k, 2);
    put_be(f + UDP_OFF + 2, 53, 2);
    put_be(f + APP_OFF, 1, 1);
    put_be(f + APP_OFF + 1, 1000 + k, 4);         /* seq */
    put_be(f + APP_OFF + 5, 8 + k % 3, 2);        /* len */
    put_be(f + APP_OFF + 7, 0x0102030405060708ull * (k + 1), 8); /* stamp */
}

int main(int argc, char **argv)
{
    int frames = argc > 1 ? atoi(argv[1]) : 20;
    struct summary s = {0};

    if (frames < 0 || frames > MAX_FRAMES)
        return 2;
    for (int k = 0; k < frames; k++)
        build_frame(ring + (size_t)k * FRAME_SIZE, (unsigned)k);
    printf("packed_header: ring=%p ip saddr at %p (mod 4 = %lu)\n", (void *)ring,
           (void *)(ring + IP_OFF + offsetof(struct ip_hdr, saddr)),
           (unsigned long)((uintptr_t)(ring + IP_OFF + offsetof(struct ip_hdr, saddr)) % 4));
    for (int k = 0; k < frames; k++)
        parse_frame(ring + (size_t)k * FRAME_SIZE, &s);
    printf("packed_header: frames=%d flow=%#llx addrs=%llu ports=%llu seq=%llu len=%llu "
           "stamps=%#llx\n",
           frames, (unsigned long long)s.flow, (unsigned long long)s.addr_sum,
           (unsigned long long)s.port_sum, (unsigned long long)s.seq_sum,
           (unsigned long long)s.len_sum, (unsigned long long)s.stamp_sum);
    return 0;
}
