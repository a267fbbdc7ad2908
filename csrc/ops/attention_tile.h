/* attention_tile.h — the typed tile kernels of scaled dot-product attention, included
 * twice by attention.c: ATT_T float (names ending _f32) and double (_f64, ATT_SUF_F64 1).
 * One work item is a block of ATT_BR query rows (forward, dQ) or of ATT_BC key rows (dK,
 * dV) of one head; the scores of a row block against a key block are the only [rows,
 * keys] matrix held, a tile in the thread's scratch. Every product of tiles goes through one
 * register-blocked kernel, C = alpha A B + beta C with A and B row-major (operands that
 * would be transposed are transposed into scratch first): each element's sum runs over k
 * in order, so the result does not depend on threads. ATT_BLOCK, where defined, computes
 * a full ATT_MR x ATT_NR block (attention.c's AVX-512 or AVX2 kernel for f32; with
 * ATT_BLOCK_MASKED it also takes a narrower last block). */

/* This inclusion's functions, under names written out so that grep finds them
 * (ATT_SUF_F64 picks the type's): <name>_T in the code below. */
#if ATT_SUF_F64
#define att_backward_head_item_T att_backward_head_item_f64
#define att_backward_kv_item_T att_backward_kv_item_f64
#define att_backward_q_item_T att_backward_q_item_f64
#define att_bwd_T att_bwd_f64
#define att_bwd_view_T att_bwd_view_f64
#define att_dscores_T att_dscores_f64
#define att_forward_item_T att_forward_item_f64
#define att_gemm_T att_gemm_f64
#define att_head_T att_head_f64
#define att_head_of_T att_head_of_f64
#define att_head_out_T att_head_out_f64
#define att_keep_T att_keep_f64
#define att_key_block_T att_key_block_f64
#define att_load_staged_T att_load_staged_f64
#define att_probs_T att_probs_f64
#define att_row_dots_T att_row_dots_f64
#define att_run_T att_run_f64
#define att_scores_T att_scores_f64
#define att_stage_elems_T att_stage_elems_f64
#define att_store_staged_T att_store_staged_f64
#define att_transpose_T att_transpose_f64
#else
#define att_backward_head_item_T att_backward_head_item_f32
#define att_backward_kv_item_T att_backward_kv_item_f32
#define att_backward_q_item_T att_backward_q_item_f32
#define att_bwd_T att_bwd_f32
#define att_bwd_view_T att_bwd_view_f32
#define att_dscores_T att_dscores_f32
#define att_forward_item_T att_forward_item_f32
#define att_gemm_T att_gemm_f32
#define att_head_T att_head_f32
#define att_head_of_T att_head_of_f32
#define att_head_out_T att_head_out_f32
#define att_keep_T att_keep_f32
#define att_key_block_T att_key_block_f32
#define att_load_staged_T att_load_staged_f32
#define att_probs_T att_probs_f32
#define att_row_dots_T att_row_dots_f32
#define att_run_T att_run_f32
#define att_scores_T att_scores_f32
#define att_stage_elems_T att_stage_elems_f32
#define att_store_staged_T att_store_staged_f32
#define att_transpose_T att_transpose_f32
#endif

/* C[M, N] = alpha * A[M, K] B[K, N] + beta * C (beta 0: C is not read). Blocks of ATT_MR
 * rows by ATT_NR columns of C accumulate in local arrays (in registers with ATT_BLOCK);
 * each element's sum runs over k in order. The last rows of A, when fewer than ATT_MR,
 * are copied into a zero-padded block; b_padded says that B's rows may be read up to a
 * whole ATT_NR past N (a scratch tile of ATT_BC columns), so the last columns take the
 * block kernel too. */
static void att_gemm_T(int64_t M, int64_t N, int64_t K, ATT_T alpha, const ATT_T *A, int64_t lda, const ATT_T *B,
                       int64_t ldb, bool b_padded, ATT_T beta, ATT_T *C, int64_t ldc) {
    ATT_T apad[ATT_MR * ATT_PAD_K];
    for (int64_t i0 = 0; i0 < M; i0 += ATT_MR) {
        const int mr = (int)(M - i0 < ATT_MR ? M - i0 : ATT_MR);
        const ATT_T *Ab = A + i0 * lda;
        int64_t la = lda;
        bool rows_full = mr == ATT_MR;
        if (!rows_full && K <= ATT_PAD_K) {
            for (int r = 0; r < ATT_MR; r++)
                for (int64_t k = 0; k < K; k++) apad[r * K + k] = r < mr ? Ab[r * lda + k] : 0;
            Ab = apad;
            la = K;
            rows_full = true;
        }
        for (int64_t j0 = 0; j0 < N; j0 += ATT_NR) {
            const int nr = (int)(N - j0 < ATT_NR ? N - j0 : ATT_NR);
            ATT_T acc[ATT_MR][ATT_NR];
#ifdef ATT_BLOCK
#ifdef ATT_BLOCK_MASKED
            if (rows_full) {
#else
            if (rows_full && (nr == ATT_NR || b_padded)) {
#endif
                ATT_BLOCK(K, Ab, la, B + j0, ldb, nr, acc);
            } else
#endif
            {
                for (int r = 0; r < ATT_MR; r++)
                    for (int c = 0; c < ATT_NR; c++) acc[r][c] = 0;
                for (int64_t k = 0; k < K; k++) {
                    const ATT_T *b = B + k * ldb + j0;
                    for (int r = 0; r < mr; r++) {
                        const ATT_T a = Ab[r * la + k];
                        for (int c = 0; c < nr; c++) acc[r][c] += a * b[c];
                    }
                }
            }
            for (int r = 0; r < mr; r++) {
                ATT_T *crow = C + (i0 + r) * ldc + j0;
                if (beta == 0)
                    for (int c = 0; c < nr; c++) crow[c] = alpha * acc[r][c];
                else
                    for (int c = 0; c < nr; c++) crow[c] = alpha * acc[r][c] + beta * crow[c];
            }
        }
    }
}

/* dst[c][r] = src[r][c] for an nr x nc block of rows of stride lds, into rows of stride ldd. */
static void att_transpose_T(const ATT_T *src, int64_t lds, int64_t nr, int64_t nc, ATT_T *dst, int64_t ldd) {
    int64_t r0 = 0;
#ifdef ATT_TRANSPOSE8
    /* whole 8 x 8 blocks in registers, the edges below */
    for (; r0 + 8 <= nr; r0 += 8) {
        int64_t c = 0;
        for (; c + 8 <= nc; c += 8) ATT_TRANSPOSE8(src + r0 * lds + c, lds, dst + c * ldd + r0, ldd);
        for (; c < nc; c++)
            for (int64_t r = r0; r < r0 + 8; r++) dst[c * ldd + r] = src[r * lds + c];
    }
#endif
    for (int64_t r = r0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) dst[c * ldd + r] = src[r * lds + c];
}

/* keep[c] = 1 / (1 - p) where key j0 + c of row i of head n survives dropout, else 0:
 * element (n, i, j) keeps when uniform(word (n Tq + i) Tk + j of the call's reservation)
 * >= p, the dropout op's rule (rng.h). */
static void att_keep_T(const att_geom *g, int64_t n, int64_t i, int64_t j0, int nc, ATT_T *keep) {
    const ATT_T inv = (ATT_T)(1.0 / (1.0 - g->p));
    const float pf = (float)g->p;
    const int64_t base = (n * g->Tq + i) * g->Tk + j0;
    int64_t blk = -1;
    uint32_t w[4];
    for (int c = 0; c < nc; c++) {
        const int64_t idx = base + c;
        if (idx >> 2 != blk) {
            blk = idx >> 2;
            cr_philox_block(g->seed, g->counter + (uint64_t)blk, w);
        }
        keep[c] = cr_uniform_f32(w[idx & 3]) >= pf ? inv : 0;
    }
}

/* Scores of rows i0..i0+nr-1 of head n against keys j0..j0+nc-1 into S (rows of stride
 * ATT_BC): scale * q_i . k_j, plus an additive mask, -inf where a boolean mask says no or
 * the causal mask hides key j > i. kt: the key tile transposed, [d][ATT_BC]. */
static void att_scores_T(const att_geom *g, int64_t n, const ATT_T *q, const ATT_T *kt, int64_t i0, int nr,
                         int64_t j0, int nc, ATT_T *S) {
    const ATT_T ninf = (ATT_T)-INFINITY;
    att_gemm_T(nr, nc, g->d, (ATT_T)g->scale, q + i0 * g->d, g->d, kt, ATT_BC, true, 0, S, ATT_BC);
    const char *mrow = NULL;
    if (g->mask_kind) mrow = g->mask + (g->ms[0] * (n / g->H) + g->ms[1] * (n % g->H)) * (int64_t)g->mask_es;
    for (int r = 0; r < nr; r++) {
        ATT_T *s = S + (int64_t)r * ATT_BC;
        const int64_t i = i0 + r;
        if (g->causal)
            for (int c = 0; c < nc; c++)
                if (j0 + c > i) s[c] = ninf;
        if (g->mask_kind == ATT_MASK_BOOL) {
            const uint8_t *m = (const uint8_t *)mrow + g->ms[2] * i + g->ms[3] * j0;
            for (int c = 0; c < nc; c++)
                if (!m[g->ms[3] * c]) s[c] = ninf;
        } else if (g->mask_kind == ATT_MASK_ADD) {
            const ATT_T *m = (const ATT_T *)mrow + g->ms[2] * i + g->ms[3] * j0;
            for (int c = 0; c < nc; c++) s[c] += m[g->ms[3] * c];
        }
    }
}

/* P[r][c] = exp(S[r][c] - lse_i) in place (0 where the row is fully masked), and with
 * dropout Z = P * keep into Z and the factors into keep (Z == S without dropout). */
static void att_probs_T(const att_geom *g, int64_t n, const ATT_T *lse, int64_t i0, int nr, int64_t j0, int nc,
                        ATT_T *S, ATT_T *Z, ATT_T *keep) {
    for (int r = 0; r < nr; r++) {
        ATT_T *s = S + (int64_t)r * ATT_BC;
        const ATT_T l = lse[i0 + r];
        if (l == (ATT_T)-INFINITY) {
            for (int c = 0; c < nc; c++) s[c] = 0;
        } else {
#pragma omp simd
            for (int c = 0; c < nc; c++) s[c] = ATT_EXP(s[c] - l);
        }
        if (Z != S) {
            ATT_T *z = Z + (int64_t)r * ATT_BC, *kp = keep + (int64_t)r * ATT_BC;
            att_keep_T(g, n, i0 + r, j0, nc, kp);
            for (int c = 0; c < nc; c++) z[c] = s[c] * kp[c];
        }
    }
}

/* The forward's scratch (elements): kt [d][BC], S [BR][BC], acc [BR][dv], m, l [BR], keep [BC]. */
#define ATT_FWD_SCRATCH(d, dv) ((d) * ATT_BC + ATT_BR * ATT_BC + ATT_BR * (dv) + 2 * ATT_BR + ATT_BC)

/* Forward of rows i0..i0+nr-1 of head n (q, k, v, o and lse are that head's rows):
 * online softmax over key tiles (running max m, running sum l), O = sum_j softmax_ij
 * [keep_ij / (1-p)] v_j, lse = m + log l. A row with every key masked gets O = 0 and lse =
 * -inf. */
static void att_forward_item_T(const att_geom *g, const ATT_T *q, const ATT_T *k, const ATT_T *v, ATT_T *O,
                               ATT_T *LSE, int64_t n, int64_t i0, int nr, ATT_T *work) {
    const int64_t d = g->d, dv = g->dv, Tk = g->Tk;
    ATT_T *kt = work, *S = kt + d * ATT_BC, *acc = S + ATT_BR * ATT_BC, *m = acc + ATT_BR * dv, *l = m + ATT_BR,
          *keep = l + ATT_BR;
    const ATT_T ninf = (ATT_T)-INFINITY;
    for (int r = 0; r < nr; r++) m[r] = ninf, l[r] = 0;
    for (int64_t e = 0; e < nr * dv; e++) acc[e] = 0;
    const int64_t jend = g->causal ? (i0 + nr < Tk ? i0 + nr : Tk) : Tk;
    for (int64_t j0 = 0; j0 < jend; j0 += ATT_BC) {
        const int nc = (int)(jend - j0 < ATT_BC ? jend - j0 : ATT_BC);
        att_transpose_T(k + j0 * d, d, nc, d, kt, ATT_BC);
        att_scores_T(g, n, q, kt, i0, nr, j0, nc, S);
        for (int r = 0; r < nr; r++) {
            ATT_T *s = S + (int64_t)r * ATT_BC, mx = ninf;
#pragma omp simd reduction(max : mx)
            for (int c = 0; c < nc; c++) mx = s[c] > mx ? s[c] : mx;
            const ATT_T mnew = mx > m[r] ? mx : m[r];
            ATT_T *a = acc + (int64_t)r * dv;
            if (mnew == ninf) { /* every key so far masked: nothing to add */
                for (int c = 0; c < nc; c++) s[c] = 0;
                continue;
            }
            const ATT_T corr = ATT_EXP(m[r] - mnew);
            ATT_T sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < nc; c++) {
                s[c] = ATT_EXP(s[c] - mnew);
                sum += s[c];
            }
            l[r] = l[r] * corr + sum;
            m[r] = mnew;
            if (g->dropout) {
                att_keep_T(g, n, i0 + r, j0, nc, keep);
                for (int c = 0; c < nc; c++) s[c] *= keep[c];
            }
            if (corr != 1)
                for (int64_t e = 0; e < dv; e++) a[e] *= corr;
        }
        att_gemm_T(nr, dv, nc, 1, S, ATT_BC, v + j0 * dv, dv, false, 1, acc, dv);
    }
    for (int r = 0; r < nr; r++) {
        ATT_T *o = O + (i0 + r) * dv;
        const ATT_T *a = acc + (int64_t)r * dv;
        const ATT_T inv = l[r] > 0 ? 1 / l[r] : 0;
        for (int64_t e = 0; e < dv; e++) o[e] = a[e] * inv;
        LSE[i0 + r] = l[r] > 0 ? m[r] + ATT_LOG(l[r]) : ninf;
    }
}

/* dS = P * (dP - D_i) in place of dP, with dP = dO v^T (times keep / (1-p) with dropout),
 * on a tile whose probabilities are in P; vt is the value tile transposed [dv][BC]. */
static void att_dscores_T(const att_geom *g, const ATT_T *dO, const ATT_T *D, const ATT_T *vt, int64_t i0, int nr,
                          int nc, const ATT_T *P, const ATT_T *keep, ATT_T *dP) {
    att_gemm_T(nr, nc, g->dv, 1, dO + i0 * g->dv, g->dv, vt, ATT_BC, true, 0, dP, ATT_BC);
    for (int r = 0; r < nr; r++) {
        ATT_T *dp = dP + (int64_t)r * ATT_BC;
        if (g->dropout) {
            const ATT_T *kp = keep + (int64_t)r * ATT_BC;
            for (int c = 0; c < nc; c++) dp[c] *= kp[c];
        }
        const ATT_T Di = D[i0 + r], *p = P + (int64_t)r * ATT_BC;
        for (int c = 0; c < nc; c++) dp[c] = p[c] * (dp[c] - Di);
    }
}

/* The backward's scratch (elements): kt [d][BC], vt [dv][BC], S, Z, keep, dP [BR][BC],
 * T [BC][BR] (a tile transposed), then the accumulators: gk [BC][d] and gv [BC][dv] (dK,
 * dV) or gq [BR][d] (dQ). */
#define ATT_BWD_SCRATCH(d, dv) (((d) + (dv)) * ATT_BC + 5 * ATT_BR * ATT_BC + \
                                (ATT_BC > ATT_BR ? ATT_BC : ATT_BR) * ((d) + (dv)))

/* What a backward work item of a head reads and where its scratch lies: the head's
 * rows of q, k, v, dO, lse and D, then the tiles kt [d][BC], vt [dv][BC], S, Z (S itself
 * without dropout), keep, dP, T [BC][BR] and the accumulators (ATT_BWD_SCRATCH). */
typedef struct {
    const ATT_T *q, *k, *v, *go, *lse, *D;
    ATT_T *kt, *vt, *S, *Z, *keep, *dP, *T, *acc;
} att_bwd_T;

static att_bwd_T att_bwd_view_T(const att_geom *g, const ATT_T *q, const ATT_T *k, const ATT_T *v,
                                const ATT_T *go, const ATT_T *lse, const ATT_T *D, ATT_T *work) {
    const int64_t d = g->d, dv = g->dv, tile = (int64_t)ATT_BR * ATT_BC;
    att_bwd_T w;
    w.q = q, w.k = k, w.v = v, w.go = go, w.lse = lse, w.D = D;
    w.kt = work, w.vt = w.kt + d * ATT_BC, w.S = w.vt + dv * ATT_BC;
    w.Z = g->dropout ? w.S + tile : w.S;
    w.keep = w.S + 2 * tile, w.dP = w.S + 3 * tile, w.T = w.S + 4 * tile, w.acc = w.S + 5 * tile;
    return w;
}

/* Keys j0..j0+nc-1 of head n, viewed by w, over every query row that sees them: dV_j =
 * sum_i Z_ij dO_i and dK_j = scale * sum_i dS_ij q_i into the head's dK, dV rows (either
 * may be NULL), and, given gq (the head's dQ rows), dQ_i += scale dS_ij k_j as well. */
static void att_key_block_T(const att_geom *g, const att_bwd_T *w, int64_t n, int64_t j0, int nc, ATT_T *dK,
                            ATT_T *dV, ATT_T *gq) {
    const int64_t d = g->d, dv = g->dv, Tq = g->Tq;
    ATT_T *gk = w->acc, *gv = gk + ATT_BC * d;
    const ATT_T scale = (ATT_T)g->scale;
    for (int64_t e = 0; e < nc * d; e++) gk[e] = 0;
    for (int64_t e = 0; e < nc * dv; e++) gv[e] = 0;
    att_transpose_T(w->k + j0 * d, d, nc, d, w->kt, ATT_BC);
    att_transpose_T(w->v + j0 * dv, dv, nc, dv, w->vt, ATT_BC);
    for (int64_t i0 = g->causal ? j0 : 0; i0 < Tq; i0 += ATT_BR) {
        const int nr = (int)(Tq - i0 < ATT_BR ? Tq - i0 : ATT_BR);
        att_scores_T(g, n, w->q, w->kt, i0, nr, j0, nc, w->S);
        att_probs_T(g, n, w->lse, i0, nr, j0, nc, w->S, w->Z, w->keep);
        if (dV) {
            att_transpose_T(w->Z, ATT_BC, nr, nc, w->T, ATT_BR); /* Z^T [nc][nr] */
            att_gemm_T(nc, dv, nr, 1, w->T, ATT_BR, w->go + i0 * dv, dv, false, 1, gv, dv);
        }
        att_dscores_T(g, w->go, w->D, w->vt, i0, nr, nc, w->S, w->keep, w->dP);
        if (dK) {
            att_transpose_T(w->dP, ATT_BC, nr, nc, w->T, ATT_BR); /* dS^T */
            att_gemm_T(nc, d, nr, scale, w->T, ATT_BR, w->q + i0 * d, d, false, 1, gk, d);
        }
        if (gq) att_gemm_T(nr, d, nc, scale, w->dP, ATT_BC, w->k + j0 * d, d, false, 1, gq + i0 * d, d);
    }
    if (dK) memcpy(dK + j0 * d, gk, (size_t)(nc * d) * sizeof(ATT_T));
    if (dV) memcpy(dV + j0 * dv, gv, (size_t)(nc * dv) * sizeof(ATT_T));
}

/* dK and dV of keys j0..j0+nc-1 of head n (the two-pass scheme's first pass); every
 * pointer is the head's rows. */
static void att_backward_kv_item_T(const att_geom *g, const ATT_T *q, const ATT_T *k, const ATT_T *v,
                                   const ATT_T *go, const ATT_T *lse, const ATT_T *D, ATT_T *dK, ATT_T *dV,
                                   int64_t n, int64_t j0, int nc, ATT_T *work) {
    att_bwd_T w = att_bwd_view_T(g, q, k, v, go, lse, D, work);
    att_key_block_T(g, &w, n, j0, nc, dK, dV, NULL);
}

/* dQ of rows i0..i0+nr-1 of head n: dQ_i = scale * sum_j dS_ij k_j (every pointer the
 * head's rows). */
static void att_backward_q_item_T(const att_geom *g, const ATT_T *q, const ATT_T *k, const ATT_T *v,
                                  const ATT_T *go, const ATT_T *lse, const ATT_T *Dn, ATT_T *dQ, int64_t n,
                                  int64_t i0, int nr, ATT_T *work) {
    const int64_t d = g->d, dv = g->dv, Tk = g->Tk;
    att_bwd_T w = att_bwd_view_T(g, q, k, v, go, lse, Dn, work);
    ATT_T *kt = w.kt, *vt = w.vt, *S = w.S, *Z = w.Z, *keep = w.keep, *dP = w.dP, *gq = w.acc;
    const ATT_T scale = (ATT_T)g->scale;
    for (int64_t e = 0; e < nr * d; e++) gq[e] = 0;
    const int64_t jend = g->causal ? (i0 + nr < Tk ? i0 + nr : Tk) : Tk;
    for (int64_t j0 = 0; j0 < jend; j0 += ATT_BC) {
        const int nc = (int)(jend - j0 < ATT_BC ? jend - j0 : ATT_BC);
        att_transpose_T(k + j0 * d, d, nc, d, kt, ATT_BC);
        att_transpose_T(v + j0 * dv, dv, nc, dv, vt, ATT_BC);
        att_scores_T(g, n, q, kt, i0, nr, j0, nc, S);
        att_probs_T(g, n, lse, i0, nr, j0, nc, S, Z, keep);
        att_dscores_T(g, go, Dn, vt, i0, nr, nc, S, keep, dP);
        att_gemm_T(nr, d, nc, scale, dP, ATT_BC, k + j0 * d, d, false, 1, gq, d);
    }
    memcpy(dQ + i0 * d, gq, (size_t)(nr * d) * sizeof(ATT_T));
}

/* The whole backward of head n in one work item, for calls with enough heads to share
 * among the threads: every key block as att_key_block, with dQ accumulated straight into
 * the head's dQ rows, so the scores and dP of each tile are computed once (five tile
 * products per tile instead of the two passes' seven). Every sum runs in the two passes'
 * order (dK_j, dV_j over i; dQ_i over j), so the bits are theirs. */
static void att_backward_head_item_T(const att_geom *g, const ATT_T *q, const ATT_T *k, const ATT_T *v,
                                     const ATT_T *go, const ATT_T *lse, const ATT_T *D, ATT_T *dQ, ATT_T *dK,
                                     ATT_T *dV, int64_t n, ATT_T *work) {
    att_bwd_T w = att_bwd_view_T(g, q, k, v, go, lse, D, work);
    ATT_T *gq = dQ;
    if (gq) memset(gq, 0, (size_t)(g->Tq * g->d) * sizeof(ATT_T));
    for (int64_t j0 = 0; j0 < g->Tk; j0 += ATT_BC)
        att_key_block_T(g, &w, n, j0, (int)(g->Tk - j0 < ATT_BC ? g->Tk - j0 : ATT_BC), dK, dV, gq);
}

/* D_i = dO_i . O_i for every row of every head (the softmax backward's row term). */
static void att_row_dots_T(const ATT_T *dO, const ATT_T *O, ATT_T *D, int64_t rows, int64_t dv, bool par) {
#pragma omp parallel for if (par) schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        ATT_T s = 0;
        const ATT_T *a = dO + i * dv, *b = O + i * dv;
        for (int64_t e = 0; e < dv; e++) s += a[e] * b[e];
        D[i] = s;
    }
}

/* One head's rows as the work items read and write them: straight into the tensors, or
 * (staged inputs) f32 copies in the thread's staging area, read in before the item and
 * its outputs written out after it. lse, D and lse_out are always the tensors' own. */
typedef struct {
    const ATT_T *q, *k, *v, *go, *lse, *D;
    ATT_T *o, *lse_out, *dq, *dk, *dv;
} att_head_T;

/* Staging elements per thread for staged inputs: q, k, v, dO of a head and the outputs. */
static int64_t att_stage_elems_T(const att_geom *g) {
    return 2 * (g->Tq * g->d + g->Tk * g->d + g->Tk * g->dv + g->Tq * g->dv);
}

/* rows x cols of a staged tensor's head (row stride sr, element stride se) into dst:
 * f32 (half 0) copied, f16/bf16 converted. */
static void att_load_staged_T(ATT_T *dst, const void *head, int64_t rows, int64_t cols, int64_t sr, int64_t se,
                              cr_dtype half) {
    const bool bf16 = half == CR_DT_BF16;
    if (!half) {
        for (int64_t r = 0; r < rows; r++) {
            const float *s = (const float *)head + r * sr;
            for (int64_t e = 0; e < cols; e++) dst[r * cols + e] = (ATT_T)s[e * se];
        }
        return;
    }
    const uint16_t *src = head;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *s = src + r * sr;
        ATT_T *o = dst + r * cols;
        if (se == 1 && bf16)
            for (int64_t e = 0; e < cols; e++) o[e] = (ATT_T)cr_bf16_to_f32(s[e]);
        else
            for (int64_t e = 0; e < cols; e++) o[e] = (ATT_T)att_half_to_f32(s[e * se], bf16);
    }
}

/* n elements out of the staging area into a staged tensor (contiguous) of dtype half
 * (0: f32). */
static void att_store_staged_T(void *out, const ATT_T *src, int64_t n, cr_dtype half) {
    uint16_t *dst = out;
    if (!half)
        for (int64_t e = 0; e < n; e++) ((float *)out)[e] = (float)src[e];
    else if (half == CR_DT_BF16)
        for (int64_t e = 0; e < n; e++) dst[e] = cr_f32_to_bf16((float)src[e]);
    else
        for (int64_t e = 0; e < n; e++) dst[e] = cr_f32_to_f16((float)src[e]);
}

/* Head n's pointers for a pass; with staged inputs, its q, k, v (and dO) read into stage. */
static att_head_T att_head_of_T(const att_geom *g, int pass, const att_bufs *b, int64_t n, ATT_T *stage) {
    const int64_t d = g->d, dv = g->dv, Tq = g->Tq, Tk = g->Tk;
    att_head_T h;
    h.lse = b->lse ? (const ATT_T *)b->lse + n * Tq : NULL;
    h.D = b->D ? (const ATT_T *)b->D + n * Tq : NULL;
    h.lse_out = b->lse_out ? (ATT_T *)b->lse_out + n * Tq : NULL;
    if (!b->staged) {
        h.q = (const ATT_T *)b->q + n * Tq * d, h.k = (const ATT_T *)b->k + n * Tk * d;
        h.v = (const ATT_T *)b->v + n * Tk * dv;
        h.go = b->go ? (const ATT_T *)b->go + n * Tq * dv : NULL;
        h.o = b->out ? (ATT_T *)b->out + n * Tq * dv : NULL;
        h.dq = b->dq ? (ATT_T *)b->dq + n * Tq * d : NULL;
        h.dk = b->dk ? (ATT_T *)b->dk + n * Tk * d : NULL;
        h.dv = b->dv ? (ATT_T *)b->dv + n * Tk * dv : NULL;
        return h;
    }
    const size_t es = b->half ? 2 : 4;
    const int64_t hb = n / g->H, hh = n % g->H;
    ATT_T *sq = stage, *sk = sq + Tq * d, *sv = sk + Tk * d, *sgo = sv + Tk * dv, *so = sgo + Tq * dv,
          *sdq = so + Tq * dv, *sdk = sdq + Tq * d, *sdv = sdk + Tk * d;
    const int64_t *qs = b->qs, *ks = b->ks, *vs = b->vs, *gs = b->gs;
    att_load_staged_T(sq, (const char *)b->q + (hb * qs[0] + hh * qs[1]) * es, Tq, d, qs[2], qs[3], b->half);
    att_load_staged_T(sk, (const char *)b->k + (hb * ks[0] + hh * ks[1]) * es, Tk, d, ks[2], ks[3], b->half);
    att_load_staged_T(sv, (const char *)b->v + (hb * vs[0] + hh * vs[1]) * es, Tk, dv, vs[2], vs[3], b->half);
    if (pass != ATT_PASS_FWD)
        att_load_staged_T(sgo, (const char *)b->go + (hb * gs[0] + hh * gs[1]) * es, Tq, dv, gs[2], gs[3],
                             b->half);
    h.q = sq, h.k = sk, h.v = sv, h.go = pass != ATT_PASS_FWD ? sgo : NULL;
    h.o = b->out ? so : NULL, h.dq = b->dq ? sdq : NULL, h.dk = b->dk ? sdk : NULL, h.dv = b->dv ? sdv : NULL;
    return h;
}

/* A work item's outputs out of the staging area into the staged tensors (contiguous):
 * rows [start, start + count) of the head, or all of them (ATT_PASS_HEAD). */
static void att_head_out_T(const att_geom *g, int pass, const att_bufs *b, int64_t n, const att_head_T *h,
                           int64_t start, int64_t count) {
    const int64_t d = g->d, dv = g->dv, Tq = g->Tq, Tk = g->Tk;
    const cr_dtype hd = b->half;
    const size_t es = hd ? 2 : 4;
    if (pass == ATT_PASS_FWD) {
        att_store_staged_T((char *)b->out + (n * Tq + start) * dv * es, h->o + start * dv, count * dv, hd);
        return;
    }
    const int64_t q0 = pass == ATT_PASS_HEAD ? 0 : start, qn = pass == ATT_PASS_HEAD ? Tq : count;
    const int64_t k0 = pass == ATT_PASS_HEAD ? 0 : start, kn = pass == ATT_PASS_HEAD ? Tk : count;
    if (pass != ATT_PASS_KV && h->dq)
        att_store_staged_T((char *)b->dq + (n * Tq + q0) * d * es, h->dq + q0 * d, qn * d, hd);
    if (pass != ATT_PASS_Q && h->dk)
        att_store_staged_T((char *)b->dk + (n * Tk + k0) * d * es, h->dk + k0 * d, kn * d, hd);
    if (pass != ATT_PASS_Q && h->dv)
        att_store_staged_T((char *)b->dv + (n * Tk + k0) * dv * es, h->dv + k0 * dv, kn * dv, hd);
}

/* One pass over every work item of every head (ATT_PASS_FWD and ATT_PASS_Q: query row
 * blocks; ATT_PASS_KV: key blocks; ATT_PASS_HEAD: whole heads), with a scratch buffer per
 * thread (and a staging area for staged inputs); false when one could not be allocated. */
static bool att_run_T(const att_geom *g, int pass, const att_bufs *b) {
    const int64_t N = g->B * g->H, nqb = (g->Tq + ATT_BR - 1) / ATT_BR, nkb = (g->Tk + ATT_BC - 1) / ATT_BC;
    const int64_t per = pass == ATT_PASS_HEAD ? 1 : pass == ATT_PASS_KV ? nkb : nqb, items = N * per;
    const int64_t elems = pass == ATT_PASS_FWD ? ATT_FWD_SCRATCH(g->d, g->dv) : ATT_BWD_SCRATCH(g->d, g->dv);
    const int64_t staged = b->staged ? att_stage_elems_T(g) : 0;
    const size_t bytes = (size_t)(elems + staged) * sizeof(ATT_T);
    int oom = 0;
#pragma omp parallel if (parallel_worth(g, items))
    {
        ATT_T *work = calloc(1, bytes); /* zeroed: the padded tile reads see numbers */
        if (!work) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (!work) continue;
            const int64_t n = it / per, start = it % per * (pass == ATT_PASS_KV ? ATT_BC : ATT_BR);
            const att_head_T h = att_head_of_T(g, pass, b, n, work + elems);
            int64_t count = 0;
            if (pass == ATT_PASS_HEAD) {
                att_backward_head_item_T(g, h.q, h.k, h.v, h.go, h.lse, h.D, h.dq, h.dk, h.dv, n, work);
            } else if (pass == ATT_PASS_KV) {
                const int nc = (int)(g->Tk - start < ATT_BC ? g->Tk - start : ATT_BC);
                att_backward_kv_item_T(g, h.q, h.k, h.v, h.go, h.lse, h.D, h.dk, h.dv, n, start, nc, work);
                count = nc;
            } else {
                const int nr = (int)(g->Tq - start < ATT_BR ? g->Tq - start : ATT_BR);
                if (pass == ATT_PASS_FWD) att_forward_item_T(g, h.q, h.k, h.v, h.o, h.lse_out, n, start, nr, work);
                else att_backward_q_item_T(g, h.q, h.k, h.v, h.go, h.lse, h.D, h.dq, n, start, nr, work);
                count = nr;
            }
            if (b->staged) att_head_out_T(g, pass, b, n, &h, start, count);
        }
        free(work);
    }
    return !oom;
}

#undef att_backward_head_item_T
#undef att_backward_kv_item_T
#undef att_backward_q_item_T
#undef att_bwd_T
#undef att_bwd_view_T
#undef att_dscores_T
#undef att_forward_item_T
#undef att_gemm_T
#undef att_head_T
#undef att_head_of_T
#undef att_head_out_T
#undef att_keep_T
#undef att_key_block_T
#undef att_load_staged_T
#undef att_probs_T
#undef att_row_dots_T
#undef att_run_T
#undef att_scores_T
#undef att_stage_elems_T
#undef att_store_staged_T
#undef att_transpose_T
