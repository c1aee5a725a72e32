#include <stdint.h>
#include <string.h>
#include <byteswap.h>
static inline uint32_t rd32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __bswap_32(v);
}
static inline uint16_t rd16(const unsigned char *p) {
    return __bswap_16(*(const uint16_t *)p);
}
