/* handles.c — the registry of the tensor handles one Lua state holds.
 *
 * A finalizer per tensor handle (ffi.gc) cost more than a small op itself: LuaJIT keeps
 * each in a finalizer table, calls each through a protected call, and a finalizer that
 * runs while a trace is being recorded aborts the recording, so a loop making small
 * tensors was blacklisted and ran in the interpreter. Instead the binding (util.lua) puts
 * each handle it owns into a slot here and the handle's Lua object into a weak table at
 * the same index; once per GC cycle it lists the slots whose Lua object was collected and
 * cr_handles_free drops those tensors. A registry belongs to one Lua state and is used
 * from its thread only. */
#include "core.h"

struct cr_handles {
    cr_tensor **slots;  /* slots[i] for i in 1..top; NULL when free */
    int32_t *free_list; /* indices of free slots below top, a stack */
    int32_t top, cap, nfree;
};

cr_handles *cr_handles_new(void) { return calloc(1, sizeof(cr_handles)); }

static bool grow(cr_handles *h) {
    int32_t cap = h->cap ? h->cap * 2 : 4096;
    if (cap <= h->cap) return false;
    cr_tensor **slots = realloc(h->slots, sizeof *slots * ((size_t)cap + 1));
    if (!slots) return false;
    h->slots = slots;
    int32_t *free_list = realloc(h->free_list, sizeof *free_list * (size_t)cap);
    if (!free_list) return false;
    h->free_list = free_list;
    h->cap = cap;
    return true;
}

int32_t cr_handles_put(cr_handles *h, cr_tensor *t) {
    if (!h || !t) return 0;
    int32_t i;
    if (h->nfree > 0) {
        i = h->free_list[--h->nfree];
    } else {
        if (h->top == h->cap && !grow(h)) return 0;
        i = ++h->top;
    }
    h->slots[i] = t;
    return i;
}

int32_t cr_handles_top(const cr_handles *h) { return h ? h->top : 0; }

static inline cr_tensor *slot_at(const cr_handles *h, const int32_t *dead, int32_t n, int32_t k) {
    if (k >= n) return NULL;
    int32_t i = dead[k];
    return i >= 1 && i <= h->top ? h->slots[i] : NULL;
}

/* The handles were last used long ago and their memory is cold: each handle's first line
 * is prefetched 16 slots ahead and its storage's header 8 ahead (the handle's line has
 * arrived by then), which took the batch from cache misses to bandwidth. */
int32_t cr_handles_free(cr_handles *h, const int32_t *dead, int32_t n) {
    int32_t freed = 0;
    for (int32_t k = 0; h && k < n; k++) {
        const cr_tensor *ahead = slot_at(h, dead, n, k + 16);
        if (ahead) __builtin_prefetch(ahead, 1);
        const cr_tensor *near = slot_at(h, dead, n, k + 8);
        if (near && near->refcount == 1 && near->storage) __builtin_prefetch(near->storage, 1);
        int32_t i = dead[k];
        if (i < 1 || i > h->top || !h->slots[i]) continue;
        cr_tensor_free(h->slots[i]);
        h->slots[i] = NULL;
        h->free_list[h->nfree++] = i;
        freed++;
    }
    return freed;
}
