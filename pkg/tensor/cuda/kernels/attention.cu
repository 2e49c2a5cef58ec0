// Attention kernels of the CUDA device: Attend (grouped-query attention of
// new rows over a KV cache, with causal chains, draft trees and several
// sequences per launch) and the training-time-test attention of EAGLE-3
// (AttendTTT and its backward).
//
// Two shapes of kernel, both with an online softmax, so that nothing of size
// [rows x positions] is ever materialised (a one-token decode over a long
// cache and a training sequence of thousands of rows run alike):
//   - row kernels (drafter_attend, drafter_attend_ttt*, without _tiled): one
//     query row and head per block, tiles of ATT_THREADS key positions; each
//     thread scores one position, the block agrees on the tile's maximum and
//     sum (warp shuffles, then one value per warp in shared memory), and the
//     threads, each owning one value of the head, add the weighted values.
//     Decode steps and draft verification run here, a long context split
//     into chunks of ATT_CHUNK positions merged by drafter_attend_combine;
//   - tiled kernels (drafter_attend_prefill, drafter_attend_ttt*_tiled): a
//     tile of 16 query rows per block, keys and values staged in shared
//     memory a step at a time, so that each serves the tile's rows: a
//     prefill's chains and training sequences, heads up to 128 wide.
//
// Determinism of the row kernels: a row's result depends only on its query,
// the keys and values it sees and their positions, never on the other rows
// of the launch, the tile or chunk a masked-out position falls in, or how
// many chunks the launch has. Positions are assigned to threads, tiles and
// chunks by their index alone, and a masked-out position adds exact zeros
// (probability 0, and 0·v to the sums), so a draft-tree node whose ancestors
// form a prefix is scored bit for bit as the decode step at its position
// would be: speculative decoding stays lossless within the GPU.
//
// Heads wider than ATT_MAXD (DeepSeek-V3's absorbed multi-head latent
// attention attends over 576 values per position) run the row kernel's wide
// twin, drafter_attend_wide: the same rows, chunks and order of operations,
// each thread owning ATT_WIDE_VALS values of the head instead of two. It is a
// kernel of its own so that drafter_attend, and with it every width it takes,
// compiles to the same code as before it existed.
//
// Attend's variants (Gemma-2/3): a softcap replaces each score s by
// cap·tanh(s/cap) as it is computed, and a sliding window gives each row a
// first visible position lo (the host computes it per row, from the row's
// position or tree depth): a row kernel's chunks start at lo's chunk and its
// positions at lo, a prefill tile's steps at its first row's lo, so nothing
// before a row's window is loaded. A tree node whose ancestors form a prefix
// has the decode step's lo and limit, hence still its bits.
//
// Attention sinks (gpt-oss, AttnShape.Sinks): a head's sink logit joins a
// row's softmax once, as one more score without a value, after the row's
// keys: in drafter_attend for a row of one block, in drafter_attend_combine
// for a row of several chunks (never in a chunk), and per row of a prefill
// tile once its steps are done. Whether a row has several chunks depends
// only on its lo and limit, so a draft node still gets its decode step's
// bits.

#include "compat.h"

// ATT_THREADS is every attention kernel's block size: the positions of one
// tile (one per thread).
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
// ATT_MAXD is the widest head the kernels take (two values per thread)
// but drafter_attend_wide, which takes heads up to ATT_WIDE_MAXD
// (kv_lora_rank + qk_rope_head_dim = 512 + 64 of DeepSeek-V3's latent),
// ATT_WIDE_VALS values per thread.
#define ATT_MAXD 256
#define ATT_WIDE_MAXD 576
#define ATT_WIDE_VALS ((ATT_WIDE_MAXD + ATT_THREADS - 1) / ATT_THREADS)
// ATT_CHUNK is the positions of one split of a decode-class row's keys
// (decode steps, verification chains and trees: rows few enough that one
// block per row and head would leave most of the GPU idle over a long
// context): such a row is spread over ceil(limit/ATT_CHUNK) blocks per head,
// whose partial softmax states drafter_attend_combine merges. It is fixed,
// not sized to the launch, so that a row's arithmetic never depends on the
// launch it is part of.
#define ATT_CHUNK 256
// ATT_MAXSTEPS bounds the training-time-test steps k (the diagonal keys a
// row attends to besides its sequence's).
#define ATT_MAXSTEPS 64
// ATT_UNROLL unrolls a loop over a register array completely on the GPU, so
// that the array stays in registers (the simulator's compilers need not).
#if defined(__CUDA_ARCH__)
#define ATT_UNROLL _Pragma("unroll")
#else
#define ATT_UNROLL
#endif

// ATT_SEQ is the number of 64-bit values per sequence in Attend's table,
// ATT_ROW the number of ints per row in its row table.
#define ATT_SEQ 8
#define ATT_ROW 5

// att_layer returns the address of layer's keys (kv 0) or values (kv 1) of
// the sequence whose Attend table entry is sq: layer 0's address plus layer
// times the layers' stride in bytes, so that one table serves every layer of
// a pass.
static __device__ __forceinline__ const float* att_layer(const long long* sq, int kv, int layer) {
    return (const float*)((unsigned long long)sq[kv] + (unsigned long long)layer * (unsigned long long)sq[7]);
}

// att_warp_max returns the maximum of v over the warp (every lane gets it).
static __device__ __forceinline__ float att_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// att_warp_sum returns the sum of v over the warp, in the same order on every
// lane (a butterfly), so that every lane holds the same bits.
static __device__ __forceinline__ float att_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// att_block_max returns the maximum of v over the block. red holds one value
// per warp; it is read after the barrier and written again only after the
// caller's next barrier, so one barrier per reduction suffices when the
// caller alternates two red arrays.
static __device__ __forceinline__ float att_block_max(float v, float* red) {
    v = att_warp_max(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < ATT_WARPS; w++) r = fmaxf(r, red[w]);
    return r;
}

// att_block_sum returns the sum of v over the block, the warps' sums added in
// warp order (every thread gets the same bits); see att_block_max for red.
static __device__ __forceinline__ float att_block_sum(float v, float* red) {
    v = att_warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < ATT_WARPS; w++) r += red[w];
    return r;
}

// att_dot returns a·b over n values (a in shared memory, read by every thread
// at once: a broadcast), in four interleaved partial sums (value d in sum
// d%4). With vec (n a multiple of 4, a and b 16-byte aligned) it loads four
// values at a time, adding them in the same order.
struct __attribute__((aligned(16))) att_f4 {
    float x, y, z, w;
};

static __device__ __forceinline__ float att_dot(const float* a, const float* __restrict__ b, int n, bool vec) {
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    int d = 0;
    if (vec) {
        for (; d < n; d += 4) {
            const att_f4 x = *(const att_f4*)(a + d), y = *(const att_f4*)(b + d);
            s0 += x.x * y.x;
            s1 += x.y * y.y;
            s2 += x.z * y.z;
            s3 += x.w * y.w;
        }
    } else {
        for (; d + 4 <= n; d += 4) {
            s0 += a[d] * b[d];
            s1 += a[d + 1] * b[d + 1];
            s2 += a[d + 2] * b[d + 2];
            s3 += a[d + 3] * b[d + 3];
        }
        for (; d < n; d++) s0 += a[d] * b[d];
    }
    return (s0 + s1) + (s2 + s3);
}

// att_lanes describes how a block's threads share the values of a head when
// they add weighted rows: with hd <= ATT_THREADS the threads form groups of
// hd (group g takes the tile's positions g, g+groups, ...; thread d of a group
// owns value d); a wider head has one group whose threads own values d and
// d + ATT_THREADS.
struct att_lanes {
    int groups, grp, d;
    bool active;
};

static __device__ __forceinline__ att_lanes att_lanes_of(int hd) {
    att_lanes ln;
    int tid = threadIdx.x;
    if (hd <= ATT_THREADS) {
        ln.groups = ATT_THREADS / hd;
        ln.grp = tid / hd;
        ln.d = tid - ln.grp * hd;
        ln.active = ln.grp < ln.groups;
    } else {
        ln.groups = 1;
        ln.grp = 0;
        ln.d = tid;
        ln.active = true;
    }
    return ln;
}

// att_merge_groups adds the groups' partial sums of value ln.d (groups in
// order, into group 0's threads) through comb [ATT_THREADS]; a no-op with one
// group. Every thread of the block must call it.
static __device__ __forceinline__ float att_merge_groups(float a, const att_lanes& ln, int hd, float* comb) {
    if (ln.groups == 1) return a;
    __syncthreads(); // comb's previous readers are done
    comb[threadIdx.x] = a;
    __syncthreads();
    if (ln.grp == 0) {
        for (int g = 1; g < ln.groups; g++) a += comb[g * hd + ln.d];
    }
    return a;
}

// Online softmax over positions [j0, j1) for one query (qs, hd values in
// shared memory) against keys and values that Src locates: Src::key(j) and
// Src::val(j) return position j's key and value rows (hd values each), and
// Src::sees(j) whether the row attends to j. Scores are Src::score(scale·q·k)
// (the identity but where Attend caps them). On return
// m and l hold the running maximum and sum of exp(s - m), a0 and a1 the
// thread's share of Σ exp(s - m)·v (values ln.d and ln.d + ATT_THREADS,
// partial over the thread's group: merge with att_merge_groups).
template <class Src>
static __device__ __forceinline__ void att_online(const Src& src, const float* qs, int hd, bool vec, float scale,
                                                  int j0, int j1, const att_lanes& ln, float* ps, float* redA,
                                                  float* redB, float& m, float& l, float& a0, float& a1) {
    const int tid = threadIdx.x;
    const int d2 = ln.d + ATT_THREADS;
    for (int t0 = j0; t0 < j1; t0 += ATT_THREADS) {
        const int j = t0 + tid;
        float s = -INFINITY;
        if (j < j1 && src.sees(j)) s = src.score(scale * att_dot(qs, src.key(j), hd, vec));
        const float mn = fmaxf(m, att_block_max(s, redA));
        // A position the row does not see gets exactly 0, as does every
        // position while nothing has been seen (mn still -inf).
        const float p = (s == -INFINITY) ? 0.f : expf(s - mn);
        ps[tid] = p;
        const float lt = att_block_sum(p, redB); // also publishes ps
        const float alpha = (m == mn) ? 1.f : expf(m - mn);
        l = l * alpha + lt;
        m = mn;
        a0 *= alpha;
        a1 *= alpha;
        if (ln.active) {
            // Positions in order, four loads in flight at a time. A position
            // the row does not see adds 0·v: exactly nothing, since every
            // position below the row's limit holds a written (or zeroed)
            // value.
            const int cnt = min(ATT_THREADS, j1 - t0), G = ln.groups;
            int t = ln.grp;
            if (ln.d < hd) {
                for (; t + 3 * G < cnt; t += 4 * G) {
                    const float v0 = src.val(t0 + t)[ln.d], v1 = src.val(t0 + t + G)[ln.d];
                    const float v2 = src.val(t0 + t + 2 * G)[ln.d], v3 = src.val(t0 + t + 3 * G)[ln.d];
                    a0 += ps[t] * v0;
                    a0 += ps[t + G] * v1;
                    a0 += ps[t + 2 * G] * v2;
                    a0 += ps[t + 3 * G] * v3;
                    if (d2 < hd) {
                        const float w0 = src.val(t0 + t)[d2], w1 = src.val(t0 + t + G)[d2];
                        const float w2 = src.val(t0 + t + 2 * G)[d2], w3 = src.val(t0 + t + 3 * G)[d2];
                        a1 += ps[t] * w0;
                        a1 += ps[t + G] * w1;
                        a1 += ps[t + 2 * G] * w2;
                        a1 += ps[t + 3 * G] * w3;
                    }
                }
                for (; t < cnt; t += G) {
                    const float pt = ps[t];
                    const float* v = src.val(t0 + t);
                    a0 += pt * v[ln.d];
                    if (d2 < hd) a1 += pt * v[d2];
                }
            }
        }
        // redA, redB and ps are next written after the next tile's first
        // barrier, which every thread reaches only when done reading them.
    }
}

// att_sink folds a head's attention sink sk (AttnShape.Sinks) into a
// finished online softmax state (m, l and the weighted sums a0, a1): one
// more score without a value, so the maximum becomes max(m, sk), the sums
// are rescaled to it and the sum of exponentials gains exp(sk - max). The
// sum is rounded product then sum (no fused multiply-add), as
// drafter_attend_combine and att_tile_sink round theirs.
static __device__ __forceinline__ void att_sink(float sk, float& m, float& l, float& a0, float& a1) {
    const float mn = fmaxf(m, sk);
    const float alpha = (m == mn) ? 1.f : expf(m - mn);
    l = __fadd_rn(__fmul_rn(l, alpha), expf(sk - mn));
    a0 *= alpha;
    a1 *= alpha;
    m = mn;
}

// att_softcap returns cap·tanh(s/cap) (Hugging Face's order: divide, tanh,
// multiply), or s when cap is 0: AttnShape.Softcap.
static __device__ __forceinline__ float att_softcap(float s, float cap) {
    return cap == 0.f ? s : tanhf(s / cap) * cap;
}

// att_kv_src locates Attend's keys and values in a KV cache layer (row-major
// [cap, kvDim], the head's group at column offset off) and applies the row's
// mask: positions below n are committed and always seen; position n+c is seen
// where mask[c] (mask null: every position up to the row's limit). The
// caller starts at the row's window (lo). Scores are capped by softcap.
struct att_kv_src {
    const float* k;
    const float* v;
    long long kvd;
    int n;
    const unsigned char* mask;
    float softcap;
    __device__ __forceinline__ bool sees(int j) const { return j < n || mask == 0 || mask[j - n] != 0; }
    __device__ __forceinline__ float score(float s) const { return att_softcap(s, softcap); }
    __device__ __forceinline__ const float* key(int j) const { return k + (long long)j * kvd; }
    __device__ __forceinline__ const float* val(int j) const { return v + (long long)j * kvd; }
};

// att_chunks returns the chunks of ATT_CHUNK positions that [lo, limit)
// meets (limit > lo): ceil(limit/ATT_CHUNK) when lo is 0.
static __device__ __forceinline__ int att_chunks(int lo, int limit) {
    return (limit - 1) / ATT_CHUNK - lo / ATT_CHUNK + 1;
}

// drafter_attend computes Attend for one (row, head, chunk) per block: grid
// (rows, heads, most chunks of a row), ATT_THREADS threads.
//
// rows holds ATT_ROW ints per row of the launch: its sequence, its index i
// among the sequence's new rows, limit (one past the last position it sees),
// part (-1, or its first record in part) and lo (the first position it sees:
// 0, or its sliding window's start). seqs holds ATT_SEQ 64-bit values
// per sequence: layer 0's K and V addresses ([cap, kvDim] float32 each), N,
// P, T, the offset of its [T, P+T] mask in masks (-1: a chain), Row0 and the
// bytes from one layer's K (or V) to the next's; layer picks the layer. The
// row sees positions [0, N) and, of N..limit-1, those its mask allows (a
// chain: all). q and out are [*, heads·hd]; q is already scaled; softcap
// (0: none) caps the scores; sinks (null: none) holds each head's sink
// logit. vec says that hd is a multiple of 4 and q and the caches are
// 16-byte aligned.
//
// A row with part -1 runs in one block over [lo, limit), folds in its
// head's sink (att_sink) and writes out; any
// other (a decode-class row of several chunks) runs one block per chunk of
// ATT_CHUNK positions that [lo, limit) meets (att_chunks), chunk c of them
// over positions [(c0+c)·ATT_CHUNK, (c0+c+1)·ATT_CHUNK) from lo on, c0 =
// lo/ATT_CHUNK, each writing its partial state (max, sum, then hd weighted
// sums) to record (part + c)·heads + head of part, for
// drafter_attend_combine, which adds the sink. Blocks past a row's chunks
// return at once.
extern "C" __global__ void drafter_attend(float* __restrict__ out, const float* __restrict__ q,
                                          const int* __restrict__ rows, const long long* __restrict__ seqs,
                                          const unsigned char* __restrict__ masks, float* __restrict__ part,
                                          int layer, int heads, int kvHeads, int hd, int vec, float softcap,
                                          const float* __restrict__ sinks) {
    __shared__ float qs[ATT_MAXD] __attribute__((aligned(16)));
    __shared__ float ps[ATT_THREADS];
    __shared__ float comb[ATT_THREADS];
    __shared__ float redA[ATT_WARPS];
    __shared__ float redB[ATT_WARPS];
    const int tid = threadIdx.x;
    const int ri = blockIdx.x, h = blockIdx.y, chunk = blockIdx.z;
    const int* rw = rows + ATT_ROW * ri;
    const int si = rw[0], i = rw[1], limit = rw[2], pbase = rw[3], lo = rw[4];
    const int nch = pbase < 0 ? 1 : att_chunks(lo, limit);
    if (chunk >= nch) return; // the whole block: no barrier is skipped
    const long long* sq = seqs + (long long)ATT_SEQ * si;
    const int n = (int)sq[2], pend = (int)sq[3], t = (int)sq[4];
    const long long moff = sq[5];
    const long long row = sq[6] + i;
    const int g = h / (heads / kvHeads);
    const long long qd = (long long)heads * hd;

    att_kv_src src;
    src.kvd = (long long)kvHeads * hd;
    src.k = att_layer(sq, 0, layer) + g * hd;
    src.v = att_layer(sq, 1, layer) + g * hd;
    src.n = n;
    src.mask = moff < 0 ? 0 : masks + moff + (long long)i * (pend + t);
    src.softcap = softcap;
    const int cs = (lo / ATT_CHUNK + chunk) * ATT_CHUNK; // the chunk's first position
    const int j0 = pbase < 0 ? lo : max(lo, cs);
    const int j1 = pbase < 0 ? limit : min(limit, cs + ATT_CHUNK);

    const float* qr = q + row * qd + (long long)h * hd;
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    __syncthreads();

    const att_lanes ln = att_lanes_of(hd);
    float m = -INFINITY, l = 0.f, a0 = 0.f, a1 = 0.f;
    att_online(src, qs, hd, vec != 0, 1.f, j0, j1, ln, ps, redA, redB, m, l, a0, a1);
    a0 = att_merge_groups(a0, ln, hd, comb);

    if (pbase < 0) {
        if (sinks != 0) att_sink(sinks[h], m, l, a0, a1);
        float* o = out + row * qd + (long long)h * hd;
        if (ln.grp == 0) {
            if (ln.d < hd) o[ln.d] = a0 / l;
            if (ln.d + ATT_THREADS < hd) o[ln.d + ATT_THREADS] = a1 / l;
        }
        return;
    }
    float* pp = part + ((long long)(pbase + chunk) * heads + h) * (hd + 2);
    if (tid == 0) {
        pp[0] = m;
        pp[1] = l;
    }
    if (ln.grp == 0) {
        if (ln.d < hd) pp[2 + ln.d] = a0;
        if (ln.d + ATT_THREADS < hd) pp[2 + ln.d + ATT_THREADS] = a1;
    }
}

// drafter_attend_combine merges drafter_attend's chunks of each (row, head)
// whose row has several (grid (rows, heads), ATT_THREADS threads; rows of one
// block return at once): out = Σ_c w_c·acc_c / Σ_c w_c·l_c with w_c =
// exp(m_c - max m), chunks in order, chunks that saw nothing skipped. A row
// that only one chunk saw anything of gets exactly acc/l, what drafter_attend
// writes for a row of one block. With sinks (null: none) the head's sink s
// joins once: max m includes it, and exp(s - max m) is added to the
// denominator after the chunks' sums.
extern "C" __global__ void drafter_attend_combine(float* __restrict__ out, const int* __restrict__ rows,
                                                  const long long* __restrict__ seqs,
                                                  const float* __restrict__ part, int heads, int hd,
                                                  const float* __restrict__ sinks) {
    const int ri = blockIdx.x, h = blockIdx.y;
    const int* rw = rows + ATT_ROW * ri;
    const int si = rw[0], i = rw[1], limit = rw[2], pbase = rw[3], lo = rw[4];
    if (pbase < 0) return;
    const int nch = att_chunks(lo, limit);
    const long long row = seqs[(long long)ATT_SEQ * si + 6] + i;
    const long long stride = (long long)heads * (hd + 2);
    const float* pp = part + ((long long)pbase * heads + h) * (hd + 2);
    float mx = -INFINITY;
    for (int c = 0; c < nch; c++) mx = fmaxf(mx, pp[c * stride]);
    const float sk = sinks != 0 ? sinks[h] : 0.f;
    if (sinks != 0) mx = fmaxf(mx, sk);
    float* o = out + row * heads * hd + (long long)h * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float a = 0.f, l = 0.f;
        for (int c = 0; c < nch; c++) {
            const float* pc = pp + c * stride;
            if (pc[0] == -INFINITY) continue;
            const float w = (pc[0] == mx) ? 1.f : expf(pc[0] - mx);
            l += w * pc[1];
            a += w * pc[2 + d];
        }
        if (sinks != 0) l = __fadd_rn(l, expf(sk - mx));
        o[d] = a / l;
    }
}

// att_online_wide is att_online for drafter_attend_wide: one group of
// ATT_THREADS threads, thread tid owning values tid + e·ATT_THREADS (e <
// ATT_WIDE_VALS) of the head, accumulated in acc[e]. Each value adds the
// tile's positions in order, as att_online's do. (A copy rather than a
// generalisation of att_online, so that the kernels built on that one keep
// their code.)
template <class Src>
static __device__ __forceinline__ void att_online_wide(const Src& src, const float* qs, int hd, bool vec, float scale,
                                                       int j0, int j1, float* ps, float* redA, float* redB, float& m,
                                                       float& l, float (&acc)[ATT_WIDE_VALS]) {
    const int tid = threadIdx.x;
    for (int t0 = j0; t0 < j1; t0 += ATT_THREADS) {
        const int j = t0 + tid;
        float s = -INFINITY;
        if (j < j1 && src.sees(j)) s = src.score(scale * att_dot(qs, src.key(j), hd, vec));
        const float mn = fmaxf(m, att_block_max(s, redA));
        const float p = (s == -INFINITY) ? 0.f : expf(s - mn);
        ps[tid] = p;
        const float lt = att_block_sum(p, redB); // also publishes ps
        const float alpha = (m == mn) ? 1.f : expf(m - mn);
        l = l * alpha + lt;
        m = mn;
        ATT_UNROLL
        for (int e = 0; e < ATT_WIDE_VALS; e++) acc[e] *= alpha;
        // Positions in order, two at a time (each value's loads of both in
        // flight); a position the row does not see adds 0·v, exactly
        // nothing, as in att_online.
        const int cnt = min(ATT_THREADS, j1 - t0);
        int t = 0;
        for (; t + 1 < cnt; t += 2) {
            const float p0 = ps[t], p1 = ps[t + 1];
            const float *v0 = src.val(t0 + t), *v1 = src.val(t0 + t + 1);
            ATT_UNROLL
            for (int e = 0; e < ATT_WIDE_VALS; e++) {
                const int d = tid + e * ATT_THREADS;
                if (d < hd) {
                    const float x0 = v0[d], x1 = v1[d];
                    acc[e] += p0 * x0;
                    acc[e] += p1 * x1;
                }
            }
        }
        if (t < cnt) {
            const float p0 = ps[t];
            const float* v0 = src.val(t0 + t);
            ATT_UNROLL
            for (int e = 0; e < ATT_WIDE_VALS; e++) {
                const int d = tid + e * ATT_THREADS;
                if (d < hd) acc[e] += p0 * v0[d];
            }
        }
        // redA, redB and ps are next written after the next tile's first
        // barrier, which every thread reaches only when done reading them.
    }
}

// drafter_attend_wide is drafter_attend for heads of up to ATT_WIDE_MAXD
// values (the host launches it for heads wider than ATT_MAXD): the same
// arguments (sinks included: a one-block row folds its head's sink in as
// att_sink does), grid, tables, chunks and partial records (which
// drafter_attend_combine merges, whatever the width, adding the sink), so a
// row's result depends only on its own query and the keys it sees here too.
extern "C" __global__ void drafter_attend_wide(float* __restrict__ out, const float* __restrict__ q,
                                               const int* __restrict__ rows, const long long* __restrict__ seqs,
                                               const unsigned char* __restrict__ masks, float* __restrict__ part,
                                               int layer, int heads, int kvHeads, int hd, int vec, float softcap,
                                               const float* __restrict__ sinks) {
    __shared__ float qs[ATT_WIDE_MAXD] __attribute__((aligned(16)));
    __shared__ float ps[ATT_THREADS];
    __shared__ float redA[ATT_WARPS];
    __shared__ float redB[ATT_WARPS];
    const int tid = threadIdx.x;
    const int ri = blockIdx.x, h = blockIdx.y, chunk = blockIdx.z;
    const int* rw = rows + ATT_ROW * ri;
    const int si = rw[0], i = rw[1], limit = rw[2], pbase = rw[3], lo = rw[4];
    const int nch = pbase < 0 ? 1 : att_chunks(lo, limit);
    if (chunk >= nch) return; // the whole block: no barrier is skipped
    const long long* sq = seqs + (long long)ATT_SEQ * si;
    const int n = (int)sq[2], pend = (int)sq[3], t = (int)sq[4];
    const long long moff = sq[5];
    const long long row = sq[6] + i;
    const int g = h / (heads / kvHeads);
    const long long qd = (long long)heads * hd;

    att_kv_src src;
    src.kvd = (long long)kvHeads * hd;
    src.k = att_layer(sq, 0, layer) + g * hd;
    src.v = att_layer(sq, 1, layer) + g * hd;
    src.n = n;
    src.mask = moff < 0 ? 0 : masks + moff + (long long)i * (pend + t);
    src.softcap = softcap;
    const int cs = (lo / ATT_CHUNK + chunk) * ATT_CHUNK; // the chunk's first position
    const int j0 = pbase < 0 ? lo : max(lo, cs);
    const int j1 = pbase < 0 ? limit : min(limit, cs + ATT_CHUNK);

    const float* qr = q + row * qd + (long long)h * hd;
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    __syncthreads();

    float m = -INFINITY, l = 0.f, acc[ATT_WIDE_VALS];
    ATT_UNROLL
    for (int e = 0; e < ATT_WIDE_VALS; e++) acc[e] = 0.f;
    att_online_wide(src, qs, hd, vec != 0, 1.f, j0, j1, ps, redA, redB, m, l, acc);

    if (pbase < 0) {
        if (sinks != 0) { // att_sink over acc
            const float sk = sinks[h], mn = fmaxf(m, sk);
            const float alpha = (m == mn) ? 1.f : expf(m - mn);
            l = __fadd_rn(__fmul_rn(l, alpha), expf(sk - mn));
            ATT_UNROLL
            for (int e = 0; e < ATT_WIDE_VALS; e++) acc[e] *= alpha;
            m = mn;
        }
        float* o = out + row * qd + (long long)h * hd;
        ATT_UNROLL
        for (int e = 0; e < ATT_WIDE_VALS; e++) {
            const int d = tid + e * ATT_THREADS;
            if (d < hd) o[d] = acc[e] / l;
        }
        return;
    }
    float* pp = part + ((long long)(pbase + chunk) * heads + h) * (hd + 2);
    if (tid == 0) {
        pp[0] = m;
        pp[1] = l;
    }
    ATT_UNROLL
    for (int e = 0; e < ATT_WIDE_VALS; e++) {
        const int d = tid + e * ATT_THREADS;
        if (d < hd) pp[2 + d] = acc[e];
    }
}

// ATT_QT and ATT_KT are the tiled forward kernels' tile (drafter_attend_prefill,
// drafter_attend_ttt_tiled): query rows per block and key positions per step;
// ATT_TILE_MAXD the widest head the tiled kernels take (their tiles live in
// static shared memory: 42 KiB at 128).
#define ATT_QT 16
#define ATT_KT 32
#define ATT_TILE_MAXD 128

// att_tile is the shared memory of a block of ATT_QT query rows: the rows'
// queries, one step's ATT_KT keys and values (keys padded by one value so
// that the lanes of a warp, each reading its own key, hit different banks),
// the step's probabilities and the rows' rescaling factors and sums.
struct att_tile {
    float q[ATT_QT][ATT_TILE_MAXD];
    float k[ATT_KT][ATT_TILE_MAXD + 1];
    float v[ATT_KT][ATT_TILE_MAXD + 1];
    float p[ATT_QT][ATT_KT];
    float alpha[ATT_QT];
    float l[ATT_QT];
};

// att_tile_state is a thread's part of a tile's online softmax: the state of
// rows warp + ATT_WARPS·u (m, l: every lane holds them) and value d of the
// weighted sums of rows grp + groups·u (acc).
struct att_tile_state {
    float m[ATT_QT / ATT_WARPS], l[ATT_QT / ATT_WARPS];
    float acc[ATT_QT];
    int groups, grp, d;
    bool active;
};

static __device__ __forceinline__ void att_tile_init(att_tile_state& st, int hd) {
    ATT_UNROLL
    for (int u = 0; u < ATT_QT / ATT_WARPS; u++) {
        st.m[u] = -INFINITY;
        st.l[u] = 0.f;
    }
    ATT_UNROLL
    for (int u = 0; u < ATT_QT; u++) st.acc[u] = 0.f;
    st.groups = ATT_THREADS / hd;
    st.grp = threadIdx.x / hd;
    st.d = threadIdx.x - st.grp * hd;
    st.active = st.grp < st.groups;
}

// att_tile_update folds one step of scores into the tile's online softmax:
// s is this lane's score for row warp + ATT_WARPS·u (-inf where the row does
// not see the key); the probabilities go to sh.p and each row's rescaling to
// sh.alpha, for the weighted sums after a barrier.
static __device__ __forceinline__ void att_tile_update(att_tile& sh, att_tile_state& st, int u, float s) {
    const int r = (threadIdx.x >> 5) + ATT_WARPS * u, lane = threadIdx.x & 31;
    const float mn = fmaxf(st.m[u], att_warp_max(s));
    const float p = (s == -INFINITY) ? 0.f : expf(s - mn);
    const float lt = att_warp_sum(p);
    const float alpha = (st.m[u] == mn) ? 1.f : expf(st.m[u] - mn);
    st.l[u] = st.l[u] * alpha + lt;
    st.m[u] = mn;
    sh.p[r][lane] = p;
    if (lane == 0) sh.alpha[r] = alpha;
}

// att_tile_dot returns a·b over hd values of shared memory in two partial
// sums.
static __device__ __forceinline__ float att_tile_dot(const float* a, const float* b, int hd) {
    float s0 = 0.f, s1 = 0.f;
    int e = 0;
    for (; e + 2 <= hd; e += 2) {
        s0 += a[e] * b[e];
        s1 += a[e + 1] * b[e + 1];
    }
    if (e < hd) s0 += a[e] * b[e];
    return s0 + s1;
}

// att_tile_causal runs the causal part of a tile's attention: rows r < nq
// see key positions j <= first + r of K and V (rows of stride kvd), and with
// a sliding window (window > 0) only those with first + r - j < window,
// scores scale·q·k capped by softcap (0: not capped), ATT_KT positions a
// step from the first row's window on. Every thread of the block calls it.
static __device__ __forceinline__ void att_tile_causal(att_tile& sh, att_tile_state& st, const float* __restrict__ K,
                                                       const float* __restrict__ V, long long kvd, int hd,
                                                       float scale, int first, int nq, int window, float softcap) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int jEnd = first + nq;
    const int jStart = window > 0 ? max(0, first - window + 1) : 0;
    for (int j0 = jStart; j0 < jEnd; j0 += ATT_KT) {
        __syncthreads(); // the previous step's readers (and the callers' writers of sh.q) are done
        for (int x = tid; x < ATT_KT * hd; x += ATT_THREADS) {
            const int jj = x / hd, e = x - jj * hd;
            const int j = j0 + jj;
            sh.k[jj][e] = j < jEnd ? K[j * kvd + e] : 0.f;
            sh.v[jj][e] = j < jEnd ? V[j * kvd + e] : 0.f;
        }
        __syncthreads();
        ATT_UNROLL
        for (int u = 0; u < ATT_QT / ATT_WARPS; u++) {
            const int r = warp + ATT_WARPS * u;
            float s = -INFINITY;
            if (r < nq && j0 + lane <= first + r && (window <= 0 || first + r - (j0 + lane) < window))
                s = att_softcap(scale * att_tile_dot(sh.q[r], sh.k[lane], hd), softcap);
            att_tile_update(sh, st, u, s);
        }
        __syncthreads();
        if (st.active) {
            const int cnt = min(ATT_KT, jEnd - j0);
            ATT_UNROLL
            for (int u = 0; u < ATT_QT; u++) {
                const int r = st.grp + st.groups * u;
                if (r < nq) st.acc[u] *= sh.alpha[r];
            }
            for (int jj = 0; jj < cnt; jj++) {
                const float v = sh.v[jj][st.d];
                ATT_UNROLL
                for (int u = 0; u < ATT_QT; u++) {
                    const int r = st.grp + st.groups * u;
                    if (r < nq) st.acc[u] += sh.p[r][jj] * v;
                }
            }
        }
    }
}

// att_tile_finish publishes the rows' sums (sh.l) for the division; the
// callers then write acc[u] / sh.l[r].
static __device__ __forceinline__ void att_tile_finish(att_tile& sh, const att_tile_state& st) {
    __syncthreads(); // every reader of sh.alpha and sh.p is done
    if ((threadIdx.x & 31) == 0) {
        ATT_UNROLL
        for (int u = 0; u < ATT_QT / ATT_WARPS; u++) sh.l[(threadIdx.x >> 5) + ATT_WARPS * u] = st.l[u];
    }
    __syncthreads();
}

// att_tile_sink folds a head's attention sink sk into the finished rows of
// a tile, after att_tile_finish: as att_sink, each row's sum sh.l[r] gains
// exp(sk - max) after rescaling, and sh.alpha[r] gets the factor by which
// the caller multiplies the row's weighted sums before the division.
static __device__ __forceinline__ void att_tile_sink(att_tile& sh, const att_tile_state& st, float sk) {
    if ((threadIdx.x & 31) == 0) {
        ATT_UNROLL
        for (int u = 0; u < ATT_QT / ATT_WARPS; u++) {
            const int r = (threadIdx.x >> 5) + ATT_WARPS * u;
            const float m = st.m[u];
            const float mn = fmaxf(m, sk);
            const float alpha = (m == mn) ? 1.f : expf(m - mn);
            sh.alpha[r] = alpha;
            sh.l[r] = __fadd_rn(__fmul_rn(st.l[u], alpha), expf(sk - mn));
        }
    }
    __syncthreads();
}

// att_tile_load_q stages rows r < nq of q (rows of stride qd from q0) in
// sh.q, zeros past them.
static __device__ __forceinline__ void att_tile_load_q(att_tile& sh, const float* __restrict__ q0, long long qd,
                                                       int hd, int nq) {
    for (int x = threadIdx.x; x < ATT_QT * hd; x += ATT_THREADS) {
        const int r = x / hd, d = x - r * hd;
        sh.q[r][d] = r < nq ? q0[r * qd + d] : 0.f;
    }
}

// drafter_attend_prefill computes Attend for the rows of prefill-class
// chains (no mask, many new rows: a prompt's prefill, a teacher-forced
// capture) ATT_QT rows at a time, so that each key and value loaded from the
// cache serves ATT_QT rows instead of one: grid (tiles, heads), ATT_THREADS
// threads. tiles holds two ints per tile: its sequence and its first new row
// i0; seqs is drafter_attend's table. Row i0+r sees positions up to
// N+P+i0+r, and with a sliding window (window > 0) only the last window of
// them; softcap (0: none) caps the scores; sinks (null: none) holds each
// head's sink logit, folded into each row once its steps are done
// (att_tile_sink). Each step stages ATT_KT keys and values in shared
// memory; warp w
// scores rows w, w+4, ... (lane = key) with an online softmax per row, then
// each thread adds one value of the head for its rows.
extern "C" __global__ void drafter_attend_prefill(float* __restrict__ out, const float* __restrict__ q,
                                                  const int* __restrict__ tiles, const long long* __restrict__ seqs,
                                                  int layer, int heads, int kvHeads, int hd, int window,
                                                  float softcap, const float* __restrict__ sinks) {
    __shared__ att_tile sh;
    const int si = tiles[2 * blockIdx.x], i0 = tiles[2 * blockIdx.x + 1];
    const int h = blockIdx.y;
    const long long* sq = seqs + (long long)ATT_SEQ * si;
    const int n = (int)sq[2], pend = (int)sq[3], t = (int)sq[4];
    const long long row0 = sq[6] + i0;
    const int nq = min(ATT_QT, t - i0);
    const int g = h / (heads / kvHeads);
    const long long qd = (long long)heads * hd, kvd = (long long)kvHeads * hd;
    const float* K = att_layer(sq, 0, layer) + g * hd;
    const float* V = att_layer(sq, 1, layer) + g * hd;

    att_tile_load_q(sh, q + row0 * qd + (long long)h * hd, qd, hd, nq);
    att_tile_state st;
    att_tile_init(st, hd);
    att_tile_causal(sh, st, K, V, kvd, hd, 1.f, n + pend + i0, nq, window, softcap);
    att_tile_finish(sh, st);
    if (sinks != 0) att_tile_sink(sh, st, sinks[h]);
    if (st.active) {
        ATT_UNROLL
        for (int u = 0; u < ATT_QT; u++) {
            const int r = st.grp + st.groups * u;
            if (r < nq) {
                const float a = sinks != 0 ? st.acc[u] * sh.alpha[r] : st.acc[u];
                out[(row0 + r) * qd + (long long)h * hd + st.d] = a / sh.l[r];
            }
        }
    }
}

// drafter_attend_ttt_tiled computes AttendTTT for ATT_QT rows of one
// sequence per block (grid (tiles, heads), ATT_THREADS threads), heads of at
// most ATT_TILE_MAXD values: the causal part over the sequence's step-0 keys
// as drafter_attend_prefill's, then each row's diagonal keys of steps 1..k,
// ATT_KT steps at a time (lane = step), from global memory. tiles holds three
// ints per tile: the sequence's first row, its length and the tile's first
// row i0 within it; steps holds the addresses of keys[0..k] then vals[0..k].
extern "C" __global__ void drafter_attend_ttt_tiled(float* __restrict__ out, float* __restrict__ lse,
                                                    const float* __restrict__ q, const int* __restrict__ tiles,
                                                    const unsigned long long* __restrict__ steps, int heads,
                                                    int kvHeads, int hd, int k, float scale) {
    __shared__ att_tile sh;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int start = tiles[3 * blockIdx.x], len = tiles[3 * blockIdx.x + 1], i0 = tiles[3 * blockIdx.x + 2];
    const int h = blockIdx.y;
    const int nq = min(ATT_QT, len - i0);
    const int g = h / (heads / kvHeads);
    const long long qd = (long long)heads * hd, kvd = (long long)kvHeads * hd;
    const long long row0 = (long long)start + i0;
    const long long off = (long long)g * hd;

    att_tile_load_q(sh, q + row0 * qd + (long long)h * hd, qd, hd, nq);
    att_tile_state st;
    att_tile_init(st, hd);
    att_tile_causal(sh, st, (const float*)steps[0] + start * kvd + off, (const float*)steps[k + 1] + start * kvd + off,
                    kvd, hd, scale, i0, nq, 0, 0.f);
    for (int m0 = 1; m0 <= k; m0 += ATT_KT) {
        __syncthreads(); // the previous step's readers of sh.p and sh.alpha are done
        const int mm = m0 + lane;
        ATT_UNROLL
        for (int u = 0; u < ATT_QT / ATT_WARPS; u++) {
            const int r = warp + ATT_WARPS * u;
            float s = -INFINITY;
            if (r < nq && mm <= k)
                s = scale * att_dot(sh.q[r], (const float*)steps[mm] + (row0 + r) * kvd + off, hd, false);
            att_tile_update(sh, st, u, s);
        }
        __syncthreads();
        if (st.active) {
            const int cnt = min(ATT_KT, k + 1 - m0);
            ATT_UNROLL
            for (int u = 0; u < ATT_QT; u++) {
                const int r = st.grp + st.groups * u;
                if (r < nq) st.acc[u] *= sh.alpha[r];
            }
            // Row r's value of step m0+c is at vm + r·kvd.
            for (int c = 0; c < cnt; c++) {
                const float* vm = (const float*)steps[k + 1 + m0 + c] + (row0 + st.grp) * kvd + off + st.d;
                ATT_UNROLL
                for (int u = 0; u < ATT_QT; u++) {
                    const int r = st.grp + st.groups * u;
                    if (r < nq) st.acc[u] += sh.p[r][c] * vm[(long long)(st.groups * u) * kvd];
                }
            }
        }
    }
    att_tile_finish(sh, st);
    if (st.active) {
        ATT_UNROLL
        for (int u = 0; u < ATT_QT; u++) {
            const int r = st.grp + st.groups * u;
            if (r < nq) out[(row0 + r) * qd + (long long)h * hd + st.d] = st.acc[u] / sh.l[r];
        }
    }
    if (lane == 0) {
        ATT_UNROLL
        for (int u = 0; u < ATT_QT / ATT_WARPS; u++) {
            const int r = warp + ATT_WARPS * u;
            if (r < nq) lse[(row0 + r) * heads + h] = st.m[u] + logf(st.l[u]);
        }
    }
}

// att_ttt_src locates the keys (and values) of a training-time-test row: row
// r = start+i of its sequence sees the step-0 keys of rows start..r
// (positions j <= i) and then its own keys of steps 1..k (position i+m is
// step m's row r). keys[m] are [*, kvDim] float32, the head's group at column
// offset off.
struct att_ttt_src {
    const unsigned long long* k; // k+1 step addresses
    const unsigned long long* v;
    long long kvd, start, r, off;
    int i;
    __device__ __forceinline__ bool sees(int) const { return true; }
    __device__ __forceinline__ float score(float s) const { return s; }
    __device__ __forceinline__ const float* at(const unsigned long long* s, int j) const {
        if (j <= i) return (const float*)s[0] + (start + j) * kvd + off;
        return (const float*)s[j - i] + r * kvd + off;
    }
    __device__ __forceinline__ const float* key(int j) const { return at(k, j); }
    __device__ __forceinline__ const float* val(int j) const { return at(v, j); }
};

// drafter_attend_ttt computes AttendTTT for one (row, head) per block: grid
// (rows, heads), ATT_THREADS threads. rows holds three ints per row: the row
// r, its sequence's first row and its sequence's end. steps holds the
// addresses of keys[0..k] then vals[0..k]. q is unscaled: scores are
// scale·(q·k). out [*, heads·hd] gets the attention, lse [*, heads] the
// scores' log-sum-exp.
extern "C" __global__ void drafter_attend_ttt(float* __restrict__ out, float* __restrict__ lse,
                                              const float* __restrict__ q, const int* __restrict__ rows,
                                              const unsigned long long* __restrict__ steps, int heads, int kvHeads,
                                              int hd, int k, float scale, int vec) {
    __shared__ float qs[ATT_MAXD] __attribute__((aligned(16)));
    __shared__ float ps[ATT_THREADS];
    __shared__ float comb[ATT_THREADS];
    __shared__ float redA[ATT_WARPS];
    __shared__ float redB[ATT_WARPS];
    const int tid = threadIdx.x;
    const int r = rows[3 * blockIdx.x], start = rows[3 * blockIdx.x + 1];
    const int h = blockIdx.y;
    const int g = h / (heads / kvHeads);
    const long long qd = (long long)heads * hd;

    att_ttt_src src;
    src.k = steps;
    src.v = steps + k + 1;
    src.kvd = (long long)kvHeads * hd;
    src.start = start;
    src.r = r;
    src.off = (long long)g * hd;
    src.i = r - start;

    const float* qr = q + r * qd + (long long)h * hd;
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    __syncthreads();

    const att_lanes ln = att_lanes_of(hd);
    float m = -INFINITY, l = 0.f, a0 = 0.f, a1 = 0.f;
    att_online(src, qs, hd, vec != 0, scale, 0, src.i + k + 1, ln, ps, redA, redB, m, l, a0, a1);
    a0 = att_merge_groups(a0, ln, hd, comb);
    float* o = out + r * qd + (long long)h * hd;
    if (ln.grp == 0) {
        if (ln.d < hd) o[ln.d] = a0 / l;
        if (ln.d + ATT_THREADS < hd) o[ln.d + ATT_THREADS] = a1 / l;
    }
    if (tid == 0) lse[(long long)r * heads + h] = m + logf(l);
}

// drafter_attend_ttt_bwd_rows is AttendTTTBackward's pass over query rows:
// one (row, KV group) per block, grid (rows, kvHeads), ATT_THREADS threads,
// the group's query heads one after another (they share the row's diagonal
// keys and values, whose gradients the block thus adds without atomics).
// Per head it recomputes P = exp(scale·q·k - lse) for the row's keys, forms
// dS = P·(dout·v - D) with D = dout·out (stored in dD [*, heads] for
// drafter_attend_ttt_bwd_keys), adds scale·Σ dS·k to dq, and for the diagonal
// keys of steps 1..k adds scale·dS·q to dkeys[m] and P·dout to dvals[m].
// steps holds keys[0..k], vals[0..k], dkeys[0..k], dvals[0..k].
extern "C" __global__ void drafter_attend_ttt_bwd_rows(float* __restrict__ dq, float* __restrict__ dD,
                                                       const float* __restrict__ dout, const float* __restrict__ out,
                                                       const float* __restrict__ lse, const float* __restrict__ q,
                                                       const int* __restrict__ rows,
                                                       const unsigned long long* __restrict__ steps, int heads,
                                                       int kvHeads, int hd, int k, float scale, int vec) {
    __shared__ float qs[ATT_MAXD] __attribute__((aligned(16)));
    __shared__ float dos[ATT_MAXD] __attribute__((aligned(16)));
    __shared__ float dss[ATT_THREADS];
    __shared__ float comb[ATT_THREADS];
    __shared__ float pdiag[ATT_MAXSTEPS];
    __shared__ float dsdiag[ATT_MAXSTEPS];
    __shared__ float redA[ATT_WARPS];
    const int tid = threadIdx.x;
    const int r = rows[3 * blockIdx.x], start = rows[3 * blockIdx.x + 1];
    const int g = blockIdx.y;
    const int rep = heads / kvHeads;
    const long long qd = (long long)heads * hd;

    att_ttt_src src;
    src.k = steps;
    src.v = steps + k + 1;
    src.kvd = (long long)kvHeads * hd;
    src.start = start;
    src.r = r;
    src.off = (long long)g * hd;
    src.i = r - start;
    const unsigned long long* dks = steps + 2 * (k + 1);
    const unsigned long long* dvs = steps + 3 * (k + 1);
    const int npos = src.i + k + 1;
    const att_lanes ln = att_lanes_of(hd);
    const int d2 = ln.d + ATT_THREADS;

    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const long long o = r * qd + (long long)h * hd;
        float part = 0.f;
        for (int d = tid; d < hd; d += ATT_THREADS) {
            qs[d] = q[o + d];
            dos[d] = dout[o + d];
            part += dout[o + d] * out[o + d];
        }
        const float D = att_block_sum(part, redA); // also publishes qs, dos
        const float L = lse[(long long)r * heads + h];
        if (tid == 0) dD[(long long)r * heads + h] = D;
        float a0 = 0.f, a1 = 0.f;
        for (int t0 = 0; t0 < npos; t0 += ATT_THREADS) {
            const int j = t0 + tid;
            if (j < npos) {
                const float p = expf(scale * att_dot(qs, src.key(j), hd, vec) - L);
                const float ds = p * (att_dot(dos, src.val(j), hd, vec) - D);
                dss[tid] = ds;
                if (j > src.i) {
                    pdiag[j - src.i - 1] = p;
                    dsdiag[j - src.i - 1] = ds;
                }
            }
            __syncthreads();
            if (ln.active) {
                const int cnt = min(ATT_THREADS, npos - t0);
                for (int t = ln.grp; t < cnt; t += ln.groups) {
                    const float* kr = src.key(t0 + t);
                    const float ds = dss[t];
                    if (ln.d < hd) a0 += ds * kr[ln.d];
                    if (d2 < hd) a1 += ds * kr[d2];
                }
            }
            __syncthreads(); // dss is rewritten by the next tile
        }
        a0 = att_merge_groups(a0, ln, hd, comb);
        if (ln.grp == 0) {
            if (ln.d < hd) dq[o + ln.d] += scale * a0;
            if (d2 < hd) dq[o + d2] += scale * a1;
        }
        // The diagonal keys' own gradients: row r of steps 1..k.
        for (int m = 1; m <= k; m++) {
            float* dk = (float*)dks[m] + r * src.kvd + src.off;
            float* dv = (float*)dvs[m] + r * src.kvd + src.off;
            const float ds = scale * dsdiag[m - 1], p = pdiag[m - 1];
            for (int d = tid; d < hd; d += ATT_THREADS) {
                dk[d] += ds * qs[d];
                dv[d] += p * dos[d];
            }
        }
        __syncthreads(); // qs, dos, pdiag and dsdiag are rewritten for the next head
    }
}

// drafter_attend_ttt_bwd_keys is AttendTTTBackward's pass over the step-0
// keys: one (key row, KV group) per block, grid (rows, kvHeads), ATT_THREADS
// threads. Key row j of a sequence is seen by the sequence's rows r >= j; for
// each query head of the group and each such row it recomputes P and dS (dD
// from drafter_attend_ttt_bwd_rows, launched before it on the stream) and adds
// scale·Σ dS·q to dkeys[0][j] and Σ P·dout to dvals[0][j]. rows holds three
// ints per row (the row, its sequence's first row and end); steps as for
// drafter_attend_ttt_bwd_rows.
extern "C" __global__ void drafter_attend_ttt_bwd_keys(const float* __restrict__ dD, const float* __restrict__ dout,
                                                       const float* __restrict__ lse, const float* __restrict__ q,
                                                       const int* __restrict__ rows,
                                                       const unsigned long long* __restrict__ steps, int heads,
                                                       int kvHeads, int hd, int k, float scale, int vec) {
    __shared__ float ks[ATT_MAXD] __attribute__((aligned(16)));
    __shared__ float vs[ATT_MAXD] __attribute__((aligned(16)));
    __shared__ float pss[ATT_THREADS];
    __shared__ float dss[ATT_THREADS];
    __shared__ float comb[ATT_THREADS];
    const int tid = threadIdx.x;
    const int j = rows[3 * blockIdx.x], end = rows[3 * blockIdx.x + 2];
    const int g = blockIdx.y;
    const int rep = heads / kvHeads;
    const long long qd = (long long)heads * hd, kvd = (long long)kvHeads * hd;
    const long long ko = (long long)j * kvd + (long long)g * hd;
    const float* k0 = (const float*)steps[0] + ko;
    const float* v0 = (const float*)steps[k + 1] + ko;
    float* dk0 = (float*)steps[2 * (k + 1)] + ko;
    float* dv0 = (float*)steps[3 * (k + 1)] + ko;
    for (int d = tid; d < hd; d += ATT_THREADS) {
        ks[d] = k0[d];
        vs[d] = v0[d];
    }
    __syncthreads();
    const att_lanes ln = att_lanes_of(hd);
    const int d2 = ln.d + ATT_THREADS;
    float k_0 = 0.f, k_1 = 0.f, v_0 = 0.f, v_1 = 0.f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int r0 = j; r0 < end; r0 += ATT_THREADS) {
            const int r = r0 + tid;
            if (r < end) {
                const long long o = r * qd + (long long)h * hd;
                const float p = expf(scale * att_dot(ks, q + o, hd, vec) - lse[(long long)r * heads + h]);
                pss[tid] = p;
                dss[tid] = p * (att_dot(vs, dout + o, hd, vec) - dD[(long long)r * heads + h]);
            }
            __syncthreads();
            if (ln.active) {
                const int cnt = min(ATT_THREADS, end - r0);
                for (int t = ln.grp; t < cnt; t += ln.groups) {
                    const long long o = (r0 + t) * qd + (long long)h * hd;
                    const float p = pss[t], ds = dss[t];
                    if (ln.d < hd) {
                        k_0 += ds * q[o + ln.d];
                        v_0 += p * dout[o + ln.d];
                    }
                    if (d2 < hd) {
                        k_1 += ds * q[o + d2];
                        v_1 += p * dout[o + d2];
                    }
                }
            }
            __syncthreads(); // pss and dss are rewritten by the next tile
        }
    }
    k_0 = att_merge_groups(k_0, ln, hd, comb);
    v_0 = att_merge_groups(v_0, ln, hd, comb);
    if (ln.grp == 0) {
        if (ln.d < hd) {
            dk0[ln.d] += scale * k_0;
            dv0[ln.d] += v_0;
        }
        if (d2 < hd) {
            dk0[d2] += scale * k_1;
            dv0[d2] += v_1;
        }
    }
}

// ATT_BT is the tile of the tiled backward: query rows and key positions per
// block and step (a smaller step than the forward's: a step stages keys,
// values, queries and their gradients at once in static shared memory).
#define ATT_BT 16

// att_btile is the shared memory of the tiled backward's blocks: a tile of
// ATT_BT rows of two kinds (a, b: queries and output gradients, or keys and
// values), a step of ATT_BT rows of the other two (c, d, padded so that
// threads reading different rows hit different banks), and a step's
// probabilities and score gradients with the rows' lse and D.
struct att_btile {
    float a[ATT_BT][ATT_TILE_MAXD];
    float b[ATT_BT][ATT_TILE_MAXD];
    float c[ATT_BT][ATT_TILE_MAXD + 1];
    float d[ATT_BT][ATT_TILE_MAXD + 1];
    float p[ATT_BT][ATT_BT];
    float ds[ATT_BT][ATT_BT];
    float L[ATT_BT];
    float D[ATT_BT];
};

// att_load_rows stages rows r < nr of two [*, stride] arrays (from x0 and y0)
// into xs and ys (row width hd), zeros past them.
template <int W>
static __device__ __forceinline__ void att_load_rows(float (*xs)[W], float (*ys)[W], const float* __restrict__ x0,
                                                     const float* __restrict__ y0, long long stride, int hd, int nr) {
    for (int x = threadIdx.x; x < ATT_BT * hd; x += ATT_THREADS) {
        const int r = x / hd, e = x - r * hd;
        xs[r][e] = r < nr ? x0[r * stride + e] : 0.f;
        ys[r][e] = r < nr ? y0[r * stride + e] : 0.f;
    }
}

// drafter_attend_ttt_bwd_rows_tiled is drafter_attend_ttt_bwd_rows for
// ATT_BT rows of one sequence per block (grid (tiles, kvHeads), ATT_THREADS
// threads; heads of at most ATT_TILE_MAXD values): per query head of the
// group, D = dout·out and lse per row, then the step-0 keys ATT_BT at a time
// (staged in shared memory) and the diagonal keys of steps 1..k, adding
// scale·Σ dS·k to dq and, for the diagonal keys, scale·dS·q to dkeys[m] and
// P·dout to dvals[m]. tiles holds three ints per tile (the sequence's first
// row, its length, the tile's first row i0 within it); steps holds keys,
// vals, dkeys, dvals [0..k]; dD [*, heads] gets D for the keys pass.
extern "C" __global__ void drafter_attend_ttt_bwd_rows_tiled(float* __restrict__ dq, float* __restrict__ dD,
                                                             const float* __restrict__ dout,
                                                             const float* __restrict__ out,
                                                             const float* __restrict__ lse, const float* __restrict__ q,
                                                             const int* __restrict__ tiles,
                                                             const unsigned long long* __restrict__ steps, int heads,
                                                             int kvHeads, int hd, int k, float scale) {
    __shared__ att_btile sh;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int start = tiles[3 * blockIdx.x], len = tiles[3 * blockIdx.x + 1], i0 = tiles[3 * blockIdx.x + 2];
    const int g = blockIdx.y, rep = heads / kvHeads;
    const int nq = min(ATT_BT, len - i0);
    const long long qd = (long long)heads * hd, kvd = (long long)kvHeads * hd;
    const long long row0 = (long long)start + i0, off = (long long)g * hd;
    const float* K0 = (const float*)steps[0] + start * kvd + off;
    const float* V0 = (const float*)steps[k + 1] + start * kvd + off;
    const int groups = ATT_THREADS / hd, grp = tid / hd, d = tid - grp * hd;
    const bool active = grp < groups;

    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const long long ho = (long long)h * hd;
        __syncthreads(); // the previous head's readers of the tile are done
        att_load_rows<ATT_TILE_MAXD>(sh.a, sh.b, q + row0 * qd + ho, dout + row0 * qd + ho, qd, hd, nq);
        // D and lse of rows warp + ATT_WARPS·u (lanes over the head's values).
        for (int r = warp; r < ATT_BT; r += ATT_WARPS) {
            float part = 0.f;
            if (r < nq) {
                const float* o = out + (row0 + r) * qd + ho;
                const float* dov = dout + (row0 + r) * qd + ho;
                for (int e = lane; e < hd; e += 32) part += dov[e] * o[e];
            }
            const float D = att_warp_sum(part);
            if (lane == 0) {
                sh.D[r] = D;
                sh.L[r] = r < nq ? lse[(row0 + r) * heads + h] : 0.f;
                if (r < nq) dD[(row0 + r) * heads + h] = D;
            }
        }
        float acc[ATT_BT];
        ATT_UNROLL
        for (int u = 0; u < ATT_BT; u++) acc[u] = 0.f;
        const int jEnd = i0 + nq;
        for (int j0 = 0; j0 < jEnd; j0 += ATT_BT) {
            __syncthreads(); // sh.a/b/D/L written; the previous step's readers of c, d, ds done
            att_load_rows<ATT_TILE_MAXD + 1>(sh.c, sh.d, K0 + j0 * kvd, V0 + j0 * kvd, kvd, hd, min(ATT_BT, jEnd - j0));
            __syncthreads();
            for (int x = tid; x < ATT_BT * ATT_BT; x += ATT_THREADS) {
                const int r = x / ATT_BT, jj = x - r * ATT_BT;
                float ds = 0.f;
                if (r < nq && j0 + jj <= i0 + r) {
                    const float p = expf(scale * att_tile_dot(sh.a[r], sh.c[jj], hd) - sh.L[r]);
                    ds = p * (att_tile_dot(sh.b[r], sh.d[jj], hd) - sh.D[r]);
                }
                sh.ds[r][jj] = ds;
            }
            __syncthreads();
            if (active) {
                const int cnt = min(ATT_BT, jEnd - j0);
                for (int jj = 0; jj < cnt; jj++) {
                    const float kv = sh.c[jj][d];
                    ATT_UNROLL
                    for (int u = 0; u < ATT_BT; u++) {
                        const int r = grp + groups * u;
                        if (r < nq) acc[u] += sh.ds[r][jj] * kv;
                    }
                }
            }
        }
        // The diagonal keys, ATT_BT steps at a time: pair (r, c) is row r's
        // key of step m0 + c.
        for (int m0 = 1; m0 <= k; m0 += ATT_BT) {
            const int cnt = min(ATT_BT, k + 1 - m0);
            __syncthreads(); // the previous readers of sh.p and sh.ds are done
            for (int x = tid; x < ATT_BT * ATT_BT; x += ATT_THREADS) {
                const int r = x / ATT_BT, c = x - r * ATT_BT;
                float p = 0.f, ds = 0.f;
                if (r < nq && c < cnt) {
                    const long long o = (row0 + r) * kvd + off;
                    p = expf(scale * att_dot(sh.a[r], (const float*)steps[m0 + c] + o, hd, false) - sh.L[r]);
                    ds = p * (att_dot(sh.b[r], (const float*)steps[k + 1 + m0 + c] + o, hd, false) - sh.D[r]);
                }
                sh.p[r][c] = p;
                sh.ds[r][c] = ds;
            }
            __syncthreads();
            if (active) {
                // Row r's values of step m0+c are at offset o + r·kvd.
                const long long o = (row0 + grp) * kvd + off + d;
                for (int c = 0; c < cnt; c++) {
                    const float* km = (const float*)steps[m0 + c] + o;
                    float* dkm = (float*)steps[2 * (k + 1) + m0 + c] + o;
                    float* dvm = (float*)steps[3 * (k + 1) + m0 + c] + o;
                    ATT_UNROLL
                    for (int u = 0; u < ATT_BT; u++) {
                        const int r = grp + groups * u;
                        if (r < nq) {
                            const long long ro = (long long)(groups * u) * kvd;
                            const float ds = sh.ds[r][c];
                            acc[u] += ds * km[ro];
                            dkm[ro] += scale * ds * sh.a[r][d];
                            dvm[ro] += sh.p[r][c] * sh.b[r][d];
                        }
                    }
                }
            }
        }
        if (active) {
            ATT_UNROLL
            for (int u = 0; u < ATT_BT; u++) {
                const int r = grp + groups * u;
                if (r < nq) dq[(row0 + r) * qd + ho + d] += scale * acc[u];
            }
        }
    }
}

// drafter_attend_ttt_bwd_keys_tiled is drafter_attend_ttt_bwd_keys for
// ATT_BT step-0 key rows of one sequence per block (grid (tiles, kvHeads),
// ATT_THREADS threads; heads of at most ATT_TILE_MAXD values): per query head
// of the group, the sequence's rows that see the tile's keys ATT_BT at a time
// (queries and output gradients staged in shared memory), adding scale·Σ dS·q
// to dkeys[0] and Σ P·dout to dvals[0]. tiles, steps and dD as for
// drafter_attend_ttt_bwd_rows_tiled (which runs first).
extern "C" __global__ void drafter_attend_ttt_bwd_keys_tiled(const float* __restrict__ dD,
                                                             const float* __restrict__ dout,
                                                             const float* __restrict__ lse, const float* __restrict__ q,
                                                             const int* __restrict__ tiles,
                                                             const unsigned long long* __restrict__ steps, int heads,
                                                             int kvHeads, int hd, int k, float scale) {
    __shared__ att_btile sh;
    const int tid = threadIdx.x;
    const int start = tiles[3 * blockIdx.x], len = tiles[3 * blockIdx.x + 1], j0 = tiles[3 * blockIdx.x + 2];
    const int g = blockIdx.y, rep = heads / kvHeads;
    const int nk = min(ATT_BT, len - j0);
    const long long qd = (long long)heads * hd, kvd = (long long)kvHeads * hd;
    const long long key0 = ((long long)start + j0) * kvd + (long long)g * hd;
    const int groups = ATT_THREADS / hd, grp = tid / hd, d = tid - grp * hd;
    const bool active = grp < groups;

    att_load_rows<ATT_TILE_MAXD>(sh.a, sh.b, (const float*)steps[0] + key0, (const float*)steps[k + 1] + key0, kvd, hd,
                                 nk);
    float dk[ATT_BT], dv[ATT_BT];
    ATT_UNROLL
    for (int u = 0; u < ATT_BT; u++) dk[u] = dv[u] = 0.f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const long long ho = (long long)h * hd;
        for (int r0 = j0; r0 < len; r0 += ATT_BT) {
            const int nr = min(ATT_BT, len - r0);
            const long long row0 = (long long)start + r0;
            __syncthreads(); // the previous step's readers of c, d, p, ds, L, D are done
            att_load_rows<ATT_TILE_MAXD + 1>(sh.c, sh.d, q + row0 * qd + ho, dout + row0 * qd + ho, qd, hd, nr);
            if (tid < ATT_BT) {
                sh.L[tid] = tid < nr ? lse[(row0 + tid) * heads + h] : 0.f;
                sh.D[tid] = tid < nr ? dD[(row0 + tid) * heads + h] : 0.f;
            }
            __syncthreads();
            // Pair (jj, rr): key j0+jj seen by query row r0+rr.
            for (int x = tid; x < ATT_BT * ATT_BT; x += ATT_THREADS) {
                const int jj = x / ATT_BT, rr = x - jj * ATT_BT;
                float p = 0.f, ds = 0.f;
                if (jj < nk && rr < nr && r0 + rr >= j0 + jj) {
                    p = expf(scale * att_tile_dot(sh.a[jj], sh.c[rr], hd) - sh.L[rr]);
                    ds = p * (att_tile_dot(sh.b[jj], sh.d[rr], hd) - sh.D[rr]);
                }
                sh.p[jj][rr] = p;
                sh.ds[jj][rr] = ds;
            }
            __syncthreads();
            if (active) {
                for (int rr = 0; rr < nr; rr++) {
                    const float qv = sh.c[rr][d], dov = sh.d[rr][d];
                    ATT_UNROLL
                    for (int u = 0; u < ATT_BT; u++) {
                        const int jj = grp + groups * u;
                        if (jj < nk) {
                            dk[u] += sh.ds[jj][rr] * qv;
                            dv[u] += sh.p[jj][rr] * dov;
                        }
                    }
                }
            }
        }
    }
    if (active) {
        float* dk0 = (float*)steps[2 * (k + 1)] + key0;
        float* dv0 = (float*)steps[3 * (k + 1)] + key0;
        ATT_UNROLL
        for (int u = 0; u < ATT_BT; u++) {
            const int jj = grp + groups * u;
            if (jj < nk) {
                dk0[jj * kvd + d] += scale * dk[u];
                dv0[jj * kvd + d] += dv[u];
            }
        }
    }
}
