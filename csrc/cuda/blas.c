/* blas.c (cuda) — mm, bmm and addmm through cuBLAS. cuBLAS is column-major, so a
 * row-major product C = A B is computed as C^T = B^T A^T: a row-major operand read in
 * column-major order already is its transpose, and a transposed view (column-major in
 * memory) is passed with CUBLAS_OP_T, so neither needs a copy. Other strides are copied
 * to a contiguous tensor first. f32 multiplies in full f32 (TF32 when
 * CRESCENT_CUDA_TF32=1), f16/bf16 natively with f32 accumulation, f64 in f64. */
#include <limits.h>

#include "cuda_impl.h"
#include "elementwise_impl.h"

typedef struct {
    cublasOperation_t op;
    int64_t ld;
} gemm_operand;

/* How cuBLAS reads the [r, c] matrix with strides (sr, sc) as its transpose; false when
 * the strides fit neither reading. */
static bool operand_layout(int64_t r, int64_t c, int64_t sr, int64_t sc, gemm_operand *o) {
    int64_t one_c = c > 1 ? c : 1, one_r = r > 1 ? r : 1;
    if ((sc == 1 || c == 1) && (r == 1 || sr >= one_c)) {
        o->op = CUBLAS_OP_N;
        o->ld = r == 1 ? one_c : sr;
        return true;
    }
    if ((sr == 1 || r == 1) && (c == 1 || sc >= one_r)) {
        o->op = CUBLAS_OP_T;
        o->ld = c == 1 ? one_r : sc;
        return true;
    }
    return false;
}

/* A view cuBLAS can read: t itself or a contiguous copy (new reference either way). */
static cr_status readable(cr_tensor **out, cr_tensor *t, int lead) {
    gemm_operand o;
    int64_t r = t->shape[lead], c = t->shape[lead + 1];
    if (operand_layout(r, c, t->stride[lead], t->stride[lead + 1], &o)) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    return cr_gpu_contiguous_copy(out, t);
}

/* out[batch, n, m] = alpha * a[batch, n, k] @ b[batch, k, m] + beta * out. */
static cr_status gemm(int device, cr_tensor *out, cr_tensor *a, cr_tensor *b, bool batched,
                      double alpha, double beta, const char *name) {
    int lead = batched ? 1 : 0;
    int64_t n = a->shape[lead], k = a->shape[lead + 1], m = b->shape[lead + 1];
    int64_t batch = batched ? a->shape[0] : 1;
    if (n == 0 || m == 0 || batch == 0) return CR_OK;
    if (n > INT_MAX || m > INT_MAX || k > INT_MAX || batch > INT_MAX)
        return cr_fail(CR_ERR_UNSUPPORTED, "%s: a dimension past 2^31 - 1 is not supported on "
                       "the GPU", name);
    cr_tensor *ar = NULL, *br = NULL;
    cr_status st = readable(&ar, a, lead);
    if (!st) st = readable(&br, b, lead);
    cublasHandle_t h = NULL;
    if (!st) st = cr_gpu_cublas(device, &h);
    if (st) goto done;
    gemm_operand oa = {CUBLAS_OP_N, 1}, ob = {CUBLAS_OP_N, 1};
    bool ok_a = operand_layout(n, k, ar->stride[lead], ar->stride[lead + 1], &oa);
    bool ok_b = operand_layout(k, m, br->stride[lead], br->stride[lead + 1], &ob);
    CR_ASSERT(ok_a && ok_b); /* readable() made them so */
    cudaDataType_t type;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    float af = (float)alpha, bf = (float)beta;
    const void *pa = &af, *pb = &bf;
    switch (out->dtype) {
    case CR_DT_F32:
        type = CUDA_R_32F;
        if (cr_gpu_tf32_setting() == 1) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
        break;
    case CR_DT_F16: type = CUDA_R_16F; break;
    case CR_DT_BF16: type = CUDA_R_16BF; break;
    case CR_DT_F64:
        type = CUDA_R_64F;
        compute = CUBLAS_COMPUTE_64F;
        pa = &alpha;
        pb = &beta;
        break;
    default:
        st = cr_fail(CR_ERR_ARG, "%s: dtype %s has no GPU matrix product", name,
                     cr_dtype_name(out->dtype));
        goto done;
    }
    if (!batched) {
        st = cr_gpu_check_cublas(
            cublasGemmEx(h, ob.op, oa.op, (int)m, (int)n, (int)k, pa, cr_tensor_ptr(br), type,
                         (int)ob.ld, cr_tensor_ptr(ar), type, (int)oa.ld, pb, cr_tensor_ptr(out),
                         type, (int)m, compute, CUBLAS_GEMM_DEFAULT),
            name);
    } else {
        st = cr_gpu_check_cublas(
            cublasGemmStridedBatchedEx(h, ob.op, oa.op, (int)m, (int)n, (int)k, pa,
                                       cr_tensor_ptr(br), type, (int)ob.ld, br->stride[0],
                                       cr_tensor_ptr(ar), type, (int)oa.ld, ar->stride[0], pb,
                                       cr_tensor_ptr(out), type, (int)m, n * m, (int)batch,
                                       compute, CUBLAS_GEMM_DEFAULT),
            name);
    }
done:
    cr_tensor_free(ar);
    cr_tensor_free(br);
    return st;
}

cr_status cr_gpu_mm(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    return st ? st : gemm(device, c->out[0], c->in[0], c->in[1], false, 1.0, 0.0, "mm");
}

cr_status cr_gpu_bmm(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    return st ? st : gemm(device, c->out[0], c->in[0], c->in[1], true, 1.0, 0.0, "bmm");
}

/* out = beta * bias + alpha * a @ b: the bias broadcast into out, then one GEMM with beta
 * (with beta 0 the bias is not read, so NaNs in it do not propagate; with k = 0 cuBLAS
 * leaves beta * bias). */
cr_status cr_gpu_addmm(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    double beta = c->f[0], alpha = c->f[1];
    if (beta != 0 && (st = cr_copy_into(c->out[0], c->in[0]))) return st;
    return gemm(device, c->out[0], c->in[1], c->in[2], false, alpha, beta, "addmm");
}

