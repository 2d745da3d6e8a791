/*
 * An ABI-compatible stand-in for PF_RING's libpfring.so, written for nictune's tests.
 *
 * It exports the functions nictune's ctypes binding calls, with their real C signatures
 * and the struct layouts of pf_ring.h (short extended header), records every call, and
 * returns synthetic Ethernet/IPv4/UDP packets. The PF_RING kernel module is not on the
 * test machines; this library lets the binding and the agent's PF_RING path really run.
 *
 * Environment: FAKE_PFRING_PACKETS (count, default 100), FAKE_PFRING_SIZE (IP bytes,
 * default 100), FAKE_PFRING_PORT (UDP dst port, default 9000), FAKE_PFRING_OTHER (every
 * n-th packet goes to another port, default 0 = none), FAKE_PFRING_DROP (reported drops),
 * FAKE_PFRING_SPIN (1: a blocking recv with nothing left spins instead of sleeping, so the
 * reading thread never switches voluntarily), FAKE_PFRING_STRAND (the last n packets stay
 * in the ring unread, as below a watermark without timeout: recv never returns them).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

struct fake_ext_hdr {
    uint64_t timestamp_ns;
    uint32_t flags;
    uint8_t rx_direction;
    int32_t if_index;
    uint32_t pkt_hash;
    uint8_t tail[64]; /* the library may write more; nictune's buffer has room for 512 */
};

struct pfring_pkthdr {
    struct timeval ts;
    uint32_t caplen;
    uint32_t len;
    struct fake_ext_hdr extended_hdr;
};

typedef struct {
    uint64_t recv;
    uint64_t drop;
    uint64_t shunt;
} pfring_stat;

typedef struct {
    char device[64];
    uint32_t caplen, flags;
    uint16_t watermark, watermark_timeout;
    unsigned duration;
    int enabled;
    volatile int broken;
    long sent, total, size, port, other, drop, spin, strand;
    unsigned char pkt[9100];
} pfring;

static char call_log[8192];

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void record(const char *fmt, ...) {
    size_t used = strlen(call_log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call_log + used, sizeof(call_log) - used, fmt, ap);
    va_end(ap);
    used = strlen(call_log);
    if (used + 1 < sizeof(call_log)) {
        call_log[used] = '\n';
        call_log[used + 1] = 0;
    }
}

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    return v ? strtol(v, NULL, 10) : fallback;
}

const char *fake_pfring_calls(void) { return call_log; }

/* Offsets and sizes as this C compiler lays them out, for the binding's tests. */
void fake_pfring_layout(size_t *out) {
    out[0] = sizeof(struct pfring_pkthdr);
    out[1] = offsetof(struct pfring_pkthdr, caplen);
    out[2] = offsetof(struct pfring_pkthdr, len);
    out[3] = offsetof(struct pfring_pkthdr, extended_hdr);
    out[4] = offsetof(struct fake_ext_hdr, flags);
    out[5] = offsetof(struct fake_ext_hdr, rx_direction);
    out[6] = offsetof(struct fake_ext_hdr, if_index);
    out[7] = offsetof(struct fake_ext_hdr, pkt_hash);
    out[8] = sizeof(pfring_stat);
}

pfring *pfring_open(const char *device_name, uint32_t caplen, uint32_t flags) {
    pfring *r = calloc(1, sizeof(pfring));
    if (!r) return NULL;
    call_log[0] = 0; /* the log describes the latest ring */
    snprintf(r->device, sizeof(r->device), "%s", device_name);
    r->caplen = caplen;
    r->flags = flags;
    r->watermark = 128; /* PF_RING's defaults */
    r->duration = 500;
    r->total = env_long("FAKE_PFRING_PACKETS", 100);
    r->size = env_long("FAKE_PFRING_SIZE", 100);
    r->port = env_long("FAKE_PFRING_PORT", 9000);
    r->other = env_long("FAKE_PFRING_OTHER", 0);
    r->drop = env_long("FAKE_PFRING_DROP", 0);
    r->spin = env_long("FAKE_PFRING_SPIN", 0);
    r->strand = env_long("FAKE_PFRING_STRAND", 0);
    if (r->size < 28 || r->size > 9000) r->size = 100;
    record("open %s %u %u", device_name, caplen, flags);
    return r;
}

int pfring_set_poll_watermark(pfring *ring, uint16_t watermark) {
    ring->watermark = watermark;
    record("watermark %u", watermark);
    return 0;
}

int pfring_set_poll_watermark_timeout(pfring *ring, uint16_t poll_watermark_timeout) {
    ring->watermark_timeout = poll_watermark_timeout;
    record("watermark_timeout %u", poll_watermark_timeout);
    return 0;
}

int pfring_set_poll_duration(pfring *ring, unsigned duration) {
    ring->duration = duration;
    record("duration %u", duration);
    return 0;
}

int pfring_enable_ring(pfring *ring) {
    ring->enabled = 1;
    record("enable");
    return 0;
}

void pfring_breakloop(pfring *ring) {
    ring->broken = 1;
    record("breakloop");
}

static void build_packet(pfring *r, long seq) {
    unsigned char *p = r->pkt;
    long port = (r->other && seq % r->other == r->other - 1) ? r->port + 1 : r->port;
    memset(p, 0, 14 + r->size);
    p[12] = 0x08; /* IPv4 */
    p[14] = 0x45;
    p[16] = (unsigned char)(r->size >> 8);
    p[17] = (unsigned char)r->size;
    p[23] = 17; /* UDP */
    p[34] = 0x30; /* source port 12345 */
    p[35] = 0x39;
    p[36] = (unsigned char)(port >> 8);
    p[37] = (unsigned char)port;
}

int pfring_recv(pfring *ring, unsigned char **buffer, unsigned buffer_len,
                struct pfring_pkthdr *hdr, uint8_t wait_for_incoming_packet) {
    if (!ring->enabled) return -1;
    while (ring->sent >= ring->total - ring->strand) {
        if (!wait_for_incoming_packet || ring->broken) return 0;
        if (ring->spin) continue;
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    build_packet(ring, ring->sent);
    uint32_t len = (uint32_t)(14 + ring->size);
    uint32_t cap = len < ring->caplen ? len : ring->caplen;
    if (buffer_len == 0) {
        *buffer = ring->pkt;
    } else {
        if (cap > buffer_len) cap = buffer_len;
        memcpy(*buffer, ring->pkt, cap);
    }
    gettimeofday(&hdr->ts, NULL);
    hdr->caplen = cap;
    hdr->len = len;
    hdr->extended_hdr.timestamp_ns = 1000000000ull * 1000 + (uint64_t)ring->sent * 1000;
    hdr->extended_hdr.flags = 0;
    hdr->extended_hdr.rx_direction = 1;
    hdr->extended_hdr.if_index = 7;
    hdr->extended_hdr.pkt_hash = (uint32_t)ring->sent;
    ring->sent++;
    return 1;
}

uint32_t pfring_get_num_queued_pkts(pfring *ring) {
    record("queued");
    return (uint32_t)(ring->total - ring->sent);
}

int pfring_stats(pfring *ring, pfring_stat *stats) {
    stats->recv = (uint64_t)ring->sent;
    stats->drop = (uint64_t)ring->drop;
    stats->shunt = 0;
    record("stats");
    return 0;
}

void pfring_close(pfring *ring) {
    record("close");
    free(ring);
}
