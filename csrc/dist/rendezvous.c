/* rendezvous.c — cr_dist_rendezvous (crescent_dist.h): how the ranks of a run started
 * without an MPI launcher (torchrun-style MASTER_ADDR / MASTER_PORT) get rank 0's bytes,
 * the NCCL id, before any communicator exists.
 *
 * Rank 0 listens on MASTER_PORT; every other rank connects to MASTER_ADDR:MASTER_PORT,
 * retrying every 50 ms while nothing listens there yet, since the ranks start in any
 * order. Rank 0 listens on every address of MASTER_ADDR's family, not on MASTER_ADDR
 * alone: as with torchrun, the address that other machines use for rank 0 may resolve to
 * a loopback address on rank 0's own machine (Debian maps the host name to 127.0.1.1).
 *
 * The exchange, integers big-endian:
 *   rank r -> 0:  hello  = magic "CRDV", version, r, world, n (u32, u32, u32, u32, u64)
 *   0 -> rank r:  answer = magic "CRDV", version, status, world, n, then n bytes when
 *                 status is 0 (else the hello's fault, which the rank reports)
 *   rank r -> 0:  one byte, the ack: rank 0 returns once every rank has its bytes.
 * A connection that does not open with the magic (a port scanner, another service) is
 * closed and does not count; a hello that disagrees with rank 0 (world size, byte count,
 * a rank given twice) is answered with its fault, so both sides can name it.
 *
 * Rank 0 serves all connections in one poll() loop over non-blocking sockets, so a slow or
 * silent connection delays no other. Every blocking step polls against one deadline, the
 * call's start plus timeout_s: the call never outlasts its timeout. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

enum { MAGIC = 0x43524456 /* "CRDV" */, VERSION = 1, HDR = 24, MAX_BYTES = 1 << 20 };
/* An answer's status: what was wrong with the hello. */
enum { ST_OK = 0, ST_VERSION, ST_WORLD, ST_BYTES, ST_RANK, ST_TWICE };
enum { CLOSED = -1 }; /* io result: the peer closed the connection */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static void put_header(uint8_t *h, uint32_t third, uint32_t world, uint64_t n) {
    put32(h, MAGIC);
    put32(h + 4, VERSION);
    put32(h + 8, third);
    put32(h + 12, world);
    put64(h + 16, n);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds to the deadline for poll(): rounded up, 0 once it has passed. */
static int ms_left(double deadline) {
    double ms = (deadline - now_s()) * 1e3;
    if (ms <= 0) return 0;
    return ms > 1e9 ? 1000000000 : (int)ms + 1;
}

/* poll() on one descriptor until `events` or the deadline: 0, ETIMEDOUT or errno. */
static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int left = ms_left(deadline), r = poll(&p, 1, left);
        if (r > 0) return 0; /* errors and hang-ups show in the read or write that follows */
        if (r == 0 && left == 0) return ETIMEDOUT;
        if (r < 0 && errno != EINTR) return errno;
    }
}

/* Whole buffers through a non-blocking socket: 0, CLOSED, ETIMEDOUT or errno. */
static int send_all(int fd, const void *p, size_t len, double deadline) {
    const char *c = p;
    while (len) {
        ssize_t k = send(fd, c, len, MSG_NOSIGNAL);
        if (k > 0) {
            c += k, len -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno == EPIPE ? CLOSED : errno;
        int e = wait_fd(fd, POLLOUT, deadline);
        if (e) return e;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t len, double deadline) {
    char *c = p;
    while (len) {
        ssize_t k = recv(fd, c, len, 0);
        if (k > 0) {
            c += k, len -= (size_t)k;
            continue;
        }
        if (k == 0) return CLOSED;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return errno == ECONNRESET ? CLOSED : errno;
        int e = wait_fd(fd, POLLIN, deadline);
        if (e) return e;
    }
    return 0;
}

/* strerror in the middle of a sentence: "connection refused". */
static const char *why(int e, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", e == CLOSED ? "the connection was closed" : e == ETIMEDOUT ? "timed out"
                                                                        : strerror(e));
    if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z')) buf[0] += 'a' - 'A';
    return buf;
}

typedef struct {
    const char *addr;
    int port, rank, world;
    double timeout, deadline;
} rdv;

/* ---- the other ranks -------------------------------------------------------------- */
/* One connection attempt: the socket, or -1 with *err (ECONNREFUSED: nothing listens). */
static int connect_one(const struct addrinfo *ai, double deadline, int *err) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    int e = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        e = errno;
        if (e == EINPROGRESS || e == EINTR) {
            socklen_t len = sizeof e;
            e = wait_fd(fd, POLLOUT, deadline);
            if (!e && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
        }
    }
    /* nothing listening on a port of the ephemeral range: Linux may connect the socket to
     * itself (simultaneous open), which reads as a rank 0 speaking our own hello */
    struct sockaddr_storage self, peer;
    socklen_t ls = sizeof self, lp = sizeof peer;
    if (!e && getsockname(fd, (struct sockaddr *)&self, &ls) == 0 &&
        getpeername(fd, (struct sockaddr *)&peer, &lp) == 0 && ls == lp && !memcmp(&self, &peer, ls))
        e = ECONNREFUSED;
    if (e) {
        close(fd);
        *err = e;
        return -1;
    }
    return fd;
}

static cr_status answer_fault(const rdv *r, const uint8_t *h, size_t n) {
    uint32_t status = get32(h + 8), world = get32(h + 12);
    uint64_t bytes = get64(h + 16);
    const char *a = r->addr;
    int p = r->port, k = r->rank;
    switch (status) {
    case ST_VERSION:
        return cr_fail(CR_ERR_ARG, "rank %d: rank 0 at %s:%d runs another crescent version "
                       "(rendezvous protocol v%u, this rank v%d): run every rank from the same build",
                       k, a, p, (unsigned)get32(h + 4), VERSION);
    case ST_WORLD:
        return cr_fail(CR_ERR_ARG, "rank %d: rank 0 at %s:%d runs a job of world size %u, but this "
                       "rank was given %d: start every rank with the same WORLD_SIZE", k, a, p,
                       (unsigned)world, r->world);
    case ST_BYTES:
        return cr_fail(CR_ERR_ARG, "rank %d: rank 0 at %s:%d sends %llu bytes, but this rank expects "
                       "%zu: every rank must run the same program", k, a, p,
                       (unsigned long long)bytes, n);
    case ST_RANK:
        return cr_fail(CR_ERR_ARG, "rank %d: rank 0 at %s:%d does not accept rank %d in a world of "
                       "%u: give each process its own RANK in [1, WORLD_SIZE)", k, a, p, k,
                       (unsigned)world);
    case ST_TWICE:
        return cr_fail(CR_ERR_ARG, "rank %d: another process has already joined rank 0 at %s:%d as "
                       "rank %d: give each process its own RANK (or another job uses this "
                       "MASTER_PORT)", k, a, p, k);
    default:
        return cr_fail(CR_ERR_DEVICE, "rank %d: rank 0 at %s:%d turned this rank away (status %u)", k,
                       a, p, (unsigned)status);
    }
}

static cr_status join(const rdv *r, uint8_t *buf, size_t n) {
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(r->addr, port, &hints, &res);
    if (gai)
        return cr_fail(CR_ERR_ARG, "rank %d: MASTER_ADDR '%s' does not resolve (%s): set it to the "
                       "host name or IP address of rank 0's machine", r->rank, r->addr,
                       gai_strerror(gai));
    int fd = -1, err = ECONNREFUSED;
    for (;;) {
        for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
            fd = connect_one(ai, r->deadline, &err);
        if (fd >= 0 || ms_left(r->deadline) == 0) break;
        int left = ms_left(r->deadline);
        usleep((useconds_t)(left < 50 ? left : 50) * 1000); /* rank 0 may not listen yet */
    }
    freeaddrinfo(res);
    char text[128];
    if (fd < 0)
        return cr_fail(CR_ERR_DEVICE, "rank %d: could not reach MASTER_ADDR:MASTER_PORT = %s:%d within "
                       "%g s (%s): is rank 0 running, and is MASTER_ADDR the address of rank 0's "
                       "machine?", r->rank, r->addr, r->port, r->timeout, why(err, text, sizeof text));
    uint8_t h[HDR], ack = 1;
    put_header(h, (uint32_t)r->rank, (uint32_t)r->world, n);
    const char *doing = "sending its hello";
    int e = send_all(fd, h, HDR, r->deadline);
    if (!e) doing = "waiting for the answer", e = recv_all(fd, h, HDR, r->deadline);
    cr_status st = CR_OK;
    if (!e) {
        if (get32(h) != MAGIC)
            st = cr_fail(CR_ERR_DEVICE, "rank %d: %s:%d answered, but not as crescent's rank 0 "
                         "(another service on that port?): pick another MASTER_PORT", r->rank,
                         r->addr, r->port);
        else if (get32(h + 8) != ST_OK)
            st = answer_fault(r, h, n);
        else if (get64(h + 16) != n) /* rank 0 checked; a broken peer must not overrun buf */
            st = cr_fail(CR_ERR_DEVICE, "rank %d: rank 0 at %s:%d announced %llu bytes instead of %zu",
                         r->rank, r->addr, r->port, (unsigned long long)get64(h + 16), n);
        else {
            doing = "reading the bytes", e = recv_all(fd, buf, n, r->deadline);
            if (!e) doing = "acknowledging", e = send_all(fd, &ack, 1, r->deadline);
        }
    }
    close(fd);
    if (e == ETIMEDOUT)
        return cr_fail(CR_ERR_DEVICE, "rank %d: rank 0 at %s:%d accepted the connection, but the "
                       "exchange (%s) did not finish within %g s: is rank 0 stuck?", r->rank,
                       r->addr, r->port, doing, r->timeout);
    if (e)
        return cr_fail(CR_ERR_DEVICE, "rank %d: the connection to rank 0 at %s:%d failed while %s (%s): "
                       "did rank 0 fail? its own error says why", r->rank, r->addr, r->port, doing,
                       why(e, text, sizeof text));
    return st;
}

/* ---- rank 0 ------------------------------------------------------------------------- */
static int listen_on(const rdv *r, cr_status *st) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(r->addr, NULL, &hints, &res);
    if (gai) {
        *st = cr_fail(CR_ERR_ARG, "rank 0: MASTER_ADDR '%s' does not resolve (%s): set it to the "
                      "host name or IP address of this machine", r->addr, gai_strerror(gai));
        return -1;
    }
    /* the wildcard address of MASTER_ADDR's family; IPv6 also takes IPv4 when it can */
    bool six = false, four = false;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next)
        six |= ai->ai_family == AF_INET6, four |= ai->ai_family == AF_INET;
    freeaddrinfo(res);
    int err = EAFNOSUPPORT;
    for (int pass = 0; pass < 2; pass++) {
        bool v6 = pass == 0;
        if (v6 ? !six : !four) continue; /* IPv4 also when the IPv6 socket failed */
        int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_storage sa;
        memset(&sa, 0, sizeof sa);
        socklen_t len;
        if (v6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
            s6->sin6_family = AF_INET6;
            s6->sin6_addr = in6addr_any;
            s6->sin6_port = htons((uint16_t)r->port);
            len = sizeof *s6;
        } else {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&sa;
            s4->sin_family = AF_INET;
            s4->sin_addr.s_addr = htonl(INADDR_ANY);
            s4->sin_port = htons((uint16_t)r->port);
            len = sizeof *s4;
        }
        if (bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
        err = errno;
        close(fd);
        if (err == EADDRINUSE) break;
    }
    if (err == EADDRINUSE)
        *st = cr_fail(CR_ERR_DEVICE, "rank 0: cannot listen on MASTER_PORT %d for %s:%d (address "
                      "already in use): another process, maybe an earlier run, holds that port; "
                      "pick another MASTER_PORT", r->port, r->addr, r->port);
    else {
        char text[128];
        *st = cr_fail(CR_ERR_DEVICE, "rank 0: cannot listen on MASTER_PORT %d for %s:%d (%s)%s",
                      r->port, r->addr, r->port, why(err, text, sizeof text),
                      err == EACCES ? ": ports below 1024 need privileges; pick a MASTER_PORT above "
                                      "1023" : "");
    }
    return -1;
}

enum { C_HELLO, C_SEND, C_ACK };
typedef struct {
    int fd, state, rank;
    size_t off;
    uint8_t h[HDR];
} conn;

typedef struct {
    conn *c;
    int n, cap;
    bool *served; /* [world]: a rank has been answered with the bytes */
    int acked;
    char turned_away[320];
    int strangers;
} server;

static void drop(server *s, int i) {
    close(s->c[i].fd);
    s->c[i] = s->c[--s->n];
}

/* A complete hello: the answer to send (status 0: the bytes follow), or a fault. */
static void read_hello(server *s, conn *c, const rdv *r, size_t n) {
    const uint8_t *h = c->h;
    uint32_t version = get32(h + 4), rank = get32(h + 8), world = get32(h + 12);
    uint64_t bytes = get64(h + 16);
    uint32_t status = version != VERSION                      ? ST_VERSION
                      : world != (uint32_t)r->world           ? ST_WORLD
                      : bytes != n                            ? ST_BYTES
                      : rank == 0 || rank >= (uint32_t)r->world ? ST_RANK
                      : s->served[rank]                       ? ST_TWICE
                                                              : ST_OK;
    if (status != ST_OK && !s->turned_away[0])
        snprintf(s->turned_away, sizeof s->turned_away, "; a process that joined as rank %u of %u "
                 "(expecting %llu bytes, protocol v%u) was turned away: %s", (unsigned)rank,
                 (unsigned)world, (unsigned long long)bytes, (unsigned)version,
                 status == ST_VERSION ? "it runs another crescent version"
                 : status == ST_WORLD ? "its WORLD_SIZE differs"
                 : status == ST_BYTES ? "it expects another byte count"
                 : status == ST_RANK  ? "its RANK is out of range"
                                      : "that rank had already joined");
    put_header(c->h, status, (uint32_t)r->world, n);
    c->off = 0;
    c->state = C_SEND;
    c->rank = status == ST_OK ? (int)rank : -1; /* -1: the fault goes out, then the close */
    if (status == ST_OK) s->served[rank] = true;
}

/* One step of connection i after poll() said it is ready (it may drop it: the last moves
 * into slot i). A failure that ends the rendezvous goes to *st. */
static void step(server *s, int i, const rdv *r, const uint8_t *buf, size_t n, cr_status *st) {
    conn *c = &s->c[i];
    if (c->state == C_HELLO) {
        ssize_t k = recv(c->fd, c->h + c->off, HDR - c->off, 0);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (k <= 0) { /* closed before saying who it was: not a rank that counts */
            s->strangers++;
            drop(s, i);
            return;
        }
        c->off += (size_t)k;
        if (c->off >= 4 && get32(c->h) != MAGIC) {
            s->strangers++;
            drop(s, i);
            return;
        }
        if (c->off == HDR) read_hello(s, c, r, n);
        return;
    }
    if (c->state == C_SEND) {
        size_t total = HDR + (c->rank >= 0 ? n : 0);
        const uint8_t *p = c->off < HDR ? c->h + c->off : buf + (c->off - HDR);
        size_t len = c->off < HDR ? HDR - c->off : total - c->off;
        ssize_t k = send(c->fd, p, len, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (k > 0) c->off += (size_t)k;
        if (k > 0 && c->off < total) return;
        if (k > 0 && c->rank >= 0) {
            c->state = C_ACK;
            return;
        }
        if (k <= 0 && c->rank >= 0) {
            char text[128];
            *st = cr_fail(CR_ERR_DEVICE, "rank 0: the connection of rank %d to %s:%d broke while "
                          "sending it the bytes (%s): did rank %d fail?", c->rank, r->addr, r->port,
                          why(k < 0 ? errno : CLOSED, text, sizeof text), c->rank);
            return;
        }
        drop(s, i); /* a fault sent (or not): the other side reports it */
        return;
    }
    uint8_t ack;
    ssize_t k = recv(c->fd, &ack, 1, 0);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (k != 1) {
        *st = cr_fail(CR_ERR_DEVICE, "rank 0: rank %d closed its connection to %s:%d without "
                      "acknowledging the bytes: did rank %d fail?", c->rank, r->addr, r->port, c->rank);
        return;
    }
    s->acked++;
    drop(s, i);
    return;
}

static cr_status serve_timeout(const server *s, const rdv *r) {
    char missing[256] = "";
    int nmiss = 0;
    size_t len = 0;
    for (int k = 1; k < r->world; k++) {
        if (s->served[k]) continue;
        if (++nmiss <= 12 && len < sizeof missing)
            len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                    nmiss > 1 ? ", " : "", k);
    }
    char strangers[96] = "";
    if (s->strangers)
        snprintf(strangers, sizeof strangers, "; %d connection%s that did not speak crescent's "
                 "rendezvous %s closed", s->strangers, s->strangers == 1 ? "" : "s",
                 s->strangers == 1 ? "was" : "were");
    if (nmiss)
        return cr_fail(CR_ERR_DEVICE, "rank 0: only %d of the other %d ranks reached %s:%d within %g s "
                       "(missing: rank%s %s%s)%s%s: start every rank with the same MASTER_ADDR, "
                       "MASTER_PORT and WORLD_SIZE", r->world - 1 - nmiss, r->world - 1, r->addr,
                       r->port, r->timeout, nmiss == 1 ? "" : "s", missing, nmiss > 12 ? ", ..." : "",
                       s->turned_away, strangers);
    int late = -1;
    for (int i = 0; i < s->n && late < 0; i++)
        if (s->c[i].rank >= 0) late = s->c[i].rank;
    return cr_fail(CR_ERR_DEVICE, "rank 0: every rank reached %s:%d, but rank %d did not take the "
                   "bytes and acknowledge them within %g s: is it stuck?", r->addr, r->port, late,
                   r->timeout);
}

static cr_status serve(const rdv *r, const uint8_t *buf, size_t n) {
    cr_status st = CR_OK;
    int lfd = listen_on(r, &st);
    if (lfd < 0) return st;
    server s = {0};
    s.served = calloc((size_t)r->world, sizeof *s.served);
    struct pollfd *pf = NULL;
    int pcap = 0;
    if (!s.served) st = cr_fail(CR_ERR_OOM, "rendezvous: out of memory for %d ranks", r->world);
    while (!st && s.acked < r->world - 1) {
        if (pcap < s.n + 1) {
            pcap = 2 * (s.n + 1);
            struct pollfd *p2 = realloc(pf, sizeof *pf * (size_t)pcap);
            if (!p2) {
                st = cr_fail(CR_ERR_OOM, "rendezvous: out of memory");
                break;
            }
            pf = p2;
        }
        pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < s.n; i++)
            pf[i + 1] = (struct pollfd){.fd = s.c[i].fd,
                                        .events = s.c[i].state == C_SEND ? POLLOUT : POLLIN};
        int left = ms_left(r->deadline), np = s.n + 1;
        int ready = poll(pf, (nfds_t)np, left);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) {
            char text[128];
            st = cr_fail(CR_ERR_DEVICE, "rank 0: poll on %s:%d failed (%s)", r->addr, r->port,
                         why(errno, text, sizeof text));
            break;
        }
        if (ready == 0) {
            if (left == 0) st = serve_timeout(&s, r);
            continue;
        }
        /* connections first, from the last (drop moves the last into the freed slot); the
         * poll entries keep their indices because new ones are added only afterwards */
        for (int i = np - 2; i >= 0 && !st; i--)
            if (pf[i + 1].revents) step(&s, i, r, buf, n, &st);
        if (st || !(pf[0].revents & POLLIN)) continue;
        for (;;) {
            int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) break; /* EAGAIN, or a connection that died in the queue */
            if (s.n == s.cap) {
                int cap = s.cap ? 2 * s.cap : 16;
                conn *c2 = realloc(s.c, sizeof *c2 * (size_t)cap);
                if (!c2) {
                    close(fd);
                    st = cr_fail(CR_ERR_OOM, "rendezvous: out of memory");
                    break;
                }
                s.c = c2, s.cap = cap;
            }
            s.c[s.n++] = (conn){.fd = fd, .state = C_HELLO, .rank = -1};
        }
    }
    for (int i = 0; i < s.n; i++) close(s.c[i].fd);
    close(lfd);
    free(s.c);
    free(s.served);
    free(pf);
    return st;
}

cr_status cr_dist_rendezvous(const char *addr, int port, int rank, int world, uint8_t *buf, size_t n,
                             double timeout_s) {
    if (world < 1)
        return cr_fail(CR_ERR_ARG, "rendezvous: world size %d; WORLD_SIZE must be at least 1", world);
    if (rank < 0 || rank >= world)
        return cr_fail(CR_ERR_ARG, "rendezvous: rank %d does not lie in [0, %d): RANK must be below "
                       "WORLD_SIZE", rank, world);
    if (!addr || !*addr)
        return cr_fail(CR_ERR_ARG, "rendezvous: MASTER_ADDR is empty; set it to the host name or IP "
                       "address of rank 0's machine");
    if (port < 1 || port > 65535)
        return cr_fail(CR_ERR_ARG, "rendezvous: MASTER_PORT %d is not a port: pick one in 1 to 65535 "
                       "(above 1023 without privileges)", port);
    if (n > MAX_BYTES)
        return cr_fail(CR_ERR_ARG, "rendezvous: %zu bytes to hand out; it carries at most 1 MiB "
                       "(%d bytes)", n, (int)MAX_BYTES);
    if (!buf && n)
        return cr_fail(CR_ERR_ARG, "rendezvous: buf is NULL for %zu bytes; pass a buffer", n);
    if (!(timeout_s > 0))
        return cr_fail(CR_ERR_ARG, "rendezvous: timeout %g s; it must be a positive number of seconds",
                       timeout_s);
    if (world == 1) return CR_OK;
    rdv r = {.addr = addr, .port = port, .rank = rank, .world = world, .timeout = timeout_s,
             .deadline = now_s() + timeout_s};
    return rank == 0 ? serve(&r, buf, n) : join(&r, buf, n);
}
