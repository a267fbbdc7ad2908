/* saved_memory.c — what a graph keeps alive for its backward: the nodes reachable from a
 * tensor's grad_fn, and per op the bytes of the storages their saved tensors hold. Each
 * storage counts once, for the first node that reaches it (nodes walked latest-created
 * first, the order backward frees them); storages saved as leaves' values (parameters)
 * are counted apart, since the model holds them anyway. Custom (Lua) nodes keep their
 * saved tensors in Lua: the walk passes through them without counting. For finding what
 * makes a step's memory large (cr.saved_memory). */
#include "internal.h"

/* A set of pointers (open addressing; grows at half full). */
typedef struct {
    const void **slot;
    size_t cap, n;
} ptr_set;

static size_t ptr_hash(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* 1 when p was added, 0 when it was there, -1 out of memory. */
static int ptr_set_add(ptr_set *s, const void *p) {
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        const void **slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) {
                size_t j = ptr_hash(s->slot[i], cap);
                while (slot[j]) j = (j + 1) & (cap - 1);
                slot[j] = s->slot[i];
            }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t j = ptr_hash(p, s->cap);
    while (s->slot[j]) {
        if (s->slot[j] == p) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->slot[j] = p;
    s->n++;
    return 1;
}

static int by_seq_desc(const void *a, const void *b) {
    int64_t x = (*(cr_node *const *)a)->seq, y = (*(cr_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Counts t's storage for op (or as a leaf's) when the walk has not seen it. */
static int count_saved(ptr_set *storages, const cr_tensor *t, bool leaf, int op, int64_t *bytes,
                       int64_t *tensors, int64_t *leaf_bytes) {
    if (!t) return 0;
    int added = ptr_set_add(storages, t->storage);
    if (added <= 0) return added;
    if (leaf) *leaf_bytes += (int64_t)t->storage->nbytes;
    else {
        bytes[op] += (int64_t)t->storage->nbytes;
        tensors[op]++;
    }
    return 0;
}

cr_status cr_autograd_saved_memory(const cr_tensor *root, int64_t *bytes, int64_t *tensors,
                                   int64_t *nodes, int64_t *leaf_bytes) {
    CR_CHECK_TENSOR("saved_memory", root, "tensor");
    memset(bytes, 0, sizeof(int64_t) * CR_OP_COUNT);
    memset(tensors, 0, sizeof(int64_t) * CR_OP_COUNT);
    memset(nodes, 0, sizeof(int64_t) * CR_OP_COUNT);
    *leaf_bytes = 0;
    if (!root->grad_fn) return CR_OK;
    ptr_set seen = {0}, storages = {0};
    size_t n = 0, cap = 64;
    cr_node **list = malloc(cap * sizeof *list);
    int bad = !list || ptr_set_add(&seen, root->grad_fn) < 0;
    if (!bad) list[n++] = root->grad_fn;
    /* every reachable node, by a breadth-first walk over the list itself */
    for (size_t k = 0; !bad && k < n; k++) {
        cr_node *node = list[k];
        for (int i = 0; node->edges && i < node->call.nin && !bad; i++) {
            cr_node *next = node->edges[i].node;
            if (!next || next->kind == CR_NODE_ACCUMULATE) continue;
            int added = ptr_set_add(&seen, next);
            if (added < 0) bad = 1;
            else if (added) {
                if (n == cap) {
                    cr_node **grown = realloc(list, 2 * cap * sizeof *list);
                    if (!grown) {
                        bad = 1;
                        break;
                    }
                    list = grown;
                    cap *= 2;
                }
                list[n++] = next;
            }
        }
    }
    if (!bad) qsort(list, n, sizeof *list, by_seq_desc);
    for (size_t k = 0; !bad && k < n; k++) {
        cr_node *node = list[k];
        int op = (int)node->call.op;
        if (node->kind != CR_NODE_OP) continue;
        nodes[op]++;
        if (node->released) continue;
        for (int i = 0; i < node->call.nin && !bad; i++) {
            bool leaf = node->edges && node->edges[i].node && node->edges[i].node->kind == CR_NODE_ACCUMULATE;
            bad = count_saved(&storages, node->call.in[i], leaf, op, bytes, tensors, leaf_bytes) < 0;
        }
        for (int o = 0; o < node->call.nout && !bad; o++)
            bad = count_saved(&storages, node->call.out[o], false, op, bytes, tensors, leaf_bytes) < 0;
    }
    free(list);
    free(seen.slot);
    free(storages.slot);
    if (bad) return cr_fail(CR_ERR_OOM, "saved_memory: out of memory walking the graph");
    return CR_OK;
}
