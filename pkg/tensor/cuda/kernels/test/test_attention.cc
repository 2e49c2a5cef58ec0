// Tests of kernels/attention.cu through the CPU-thread simulator: Attend over
// chains, decode rows, draft trees with pending positions and several
// sequences per launch (contexts long enough to split into chunks, head widths
// that are not powers of two and wider than a block), and the
// training-time-test attention and its backward, each against a
// double-precision reference on random inputs. It also checks the property
// speculative decoding relies on: a row's result does not depend on the launch
// it is part of (a tree node that sees a prefix equals the decode step at its
// position, bit for bit, whatever the chunking).

#include "../attention.cu"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace {

int failures = 0;

std::mt19937_64 rng(12345);

std::vector<float> randv(size_t n, double scale) {
    std::normal_distribution<double> nd(0, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = (float)nd(rng);
    return v;
}

// check fails the case unless |got - want| <= tol·scale for every value.
bool check(const std::string& what, const float* got, const std::vector<double>& want,
           const std::vector<double>& scale, double tol) {
    for (size_t i = 0; i < want.size(); i++) {
        double d = std::fabs((double)got[i] - want[i]);
        if (!(d <= tol * scale[i])) {
            std::printf("FAIL %s: value %zu is %.9g, want %.9g (difference %.3g, allowed %.3g)\n", what.c_str(), i,
                        got[i], want[i], d, tol * scale[i]);
            failures++;
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------- Attend

struct Seq {
    int n, t, p;
    std::vector<int> parents; // empty: a chain; else the parents of the p+t nodes
};

struct Cache {
    int cap;
    std::vector<float> k, v; // [cap, kvd]
};

std::vector<unsigned char> ancestors(const std::vector<int>& parents) {
    int t = (int)parents.size();
    std::vector<unsigned char> m((size_t)t * t, 0);
    for (int i = 0; i < t; i++) {
        if (parents[i] >= 0) std::memcpy(&m[(size_t)i * t], &m[(size_t)parents[i] * t], t);
        m[(size_t)i * t + i] = 1;
    }
    return m;
}

// chainRows is attention.go's attChainRows: a chain of this many new rows is
// prefill-class (one block per row and head, never split into chunks).
const int chainRows = 64;

// scalar makes the launches below take the kernels' scalar loads.
bool scalar = false;

// window and softcap are the AttnShape variants of runAttend's launches and
// testAttend's reference (0: off).
int window = 0;
float softcap = 0.f;

// sinks are the heads' attention sinks of runAttend's launches and
// testAttend's reference (empty: off; else at least one per head).
std::vector<float> sinks;

// sinkArg is the launches' sinks argument: null when off.
const float* sinkArg() { return sinks.empty() ? nullptr : sinks.data(); }

// windowStart returns a row's first visible slot under the sliding window
// (attention.go takes it from tensor.WindowStart): for a chain row at
// position p (anc null) max(0, p-window+1); for a tree row with ancestor row
// anc over w slots after n committed ones, n+depth-window+1 (at least 0)
// while that reaches the committed slots, else the slot of its ancestor at
// depth depth-window+1.
int windowStart(const unsigned char* anc, int w, int n, int p) {
    if (window <= 0) return 0;
    if (!anc) return std::max(0, p - window + 1);
    int depth = -1;
    for (int c = 0; c < w; c++) depth += anc[c] != 0;
    int first = depth - window + 1;
    if (first <= 0) return std::max(0, n + depth - window + 1);
    for (int c = 0, k = 0; c < w; c++)
        if (anc[c] && k++ == first) return n + c;
    return n + w;
}

// aligned reports whether every pointer is 16-byte aligned.
bool aligned(std::initializer_list<const void*> ps) {
    for (const void* p : ps)
        if ((uintptr_t)p % 16) return false;
    return true;
}

// layerStride is the bytes between two layers' caches in runAttend's tables.
const long long layerStride = 1 << 20;

// runAttend launches drafter_attend, or drafter_attend_wide for heads wider
// than ATT_MAXD (and the combine when a row spans several chunks) for seqs,
// building the tables as attention.go does, and
// returns out [rows, heads·hd] (rows not covered by a sequence hold 7).
std::vector<float> runAttend(int heads, int kvHeads, int hd, std::vector<Seq>& seqs, std::vector<Cache>& caches,
                             const std::vector<float>& q, int totalRows, const std::vector<int>& row0) {
    int qd = heads * hd;
    std::vector<int> rows;
    std::vector<long long> tab;
    std::vector<unsigned char> masks;
    std::vector<int> tiles;
    int maxChunks = 1, records = 0;
    bool vec = !scalar && hd % 4 == 0 && aligned({q.data()});
    for (size_t b = 0; b < seqs.size(); b++) {
        Seq& s = seqs[b];
        long long moff = -1;
        int w = s.p + s.t;
        std::vector<unsigned char> a;
        if (!s.parents.empty()) {
            a = ancestors(s.parents);
            a.erase(a.begin(), a.begin() + (size_t)s.p * w);
            moff = (long long)masks.size();
            masks.insert(masks.end(), a.begin(), a.end());
        }
        vec = vec && aligned({caches[b].k.data(), caches[b].v.data()});
        // The caches are layer 1 of a layout whose layers lie layerStride
        // bytes apart: the table holds layer 0's addresses (integers only,
        // never dereferenced).
        tab.push_back((long long)((uintptr_t)caches[b].k.data() - layerStride));
        tab.push_back((long long)((uintptr_t)caches[b].v.data() - layerStride));
        tab.push_back(s.n);
        tab.push_back(s.p);
        tab.push_back(s.t);
        tab.push_back(moff);
        tab.push_back(row0[b]);
        tab.push_back(layerStride);
        bool decodeClass = moff >= 0 || s.t < chainRows;
        if (!decodeClass && hd <= ATT_TILE_MAXD) {
            for (int i0 = 0; i0 < s.t; i0 += ATT_QT) tiles.insert(tiles.end(), {(int)b, i0});
            continue;
        }
        for (int i = 0; i < s.t; i++) {
            int limit = s.n + s.p + i + 1;
            if (moff >= 0) {
                limit = s.n;
                for (int c = 0; c < w; c++)
                    if (a[(size_t)i * w + c]) limit = s.n + c + 1;
            }
            int lo = windowStart(moff >= 0 ? &a[(size_t)i * w] : nullptr, w, s.n, limit - 1);
            int nch = (limit - 1) / ATT_CHUNK - lo / ATT_CHUNK + 1, part = -1;
            if (decodeClass && nch > 1) {
                part = records;
                records += nch;
                maxChunks = std::max(maxChunks, nch);
            }
            rows.insert(rows.end(), {(int)b, i, limit, part, lo});
        }
    }
    if (masks.empty()) masks.push_back(0);
    int nrows = (int)rows.size() / ATT_ROW;
    std::vector<float> out((size_t)totalRows * qd, 7.f);
    std::vector<float> part(std::max(1, records * heads * (hd + 2)));
    if (nrows > 0)
        sim::launch(dim3(nrows, heads, maxChunks), dim3(ATT_THREADS, 1, 1), 0,
                    hd > ATT_MAXD ? drafter_attend_wide : drafter_attend, out.data(),
                    q.data(), (const int*)rows.data(), (const long long*)tab.data(),
                    (const unsigned char*)masks.data(), part.data(), 1, heads, kvHeads, hd, (int)vec, softcap,
                    sinkArg());
    if (!tiles.empty())
        sim::launch(dim3(tiles.size() / 2, heads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_prefill, out.data(),
                    q.data(), (const int*)tiles.data(), (const long long*)tab.data(), 1, heads, kvHeads, hd, window,
                    softcap, sinkArg());
    if (records > 0)
        sim::launch(dim3(nrows, heads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_combine, out.data(),
                    (const int*)rows.data(), (const long long*)tab.data(), (const float*)part.data(), heads, hd,
                    sinkArg());
    return out;
}

void testAttend(const char* name, int heads, int kvHeads, int hd, std::vector<Seq> seqs) {
    int qd = heads * hd, kvd = kvHeads * hd, rep = heads / kvHeads;
    std::vector<Cache> caches;
    std::vector<int> row0;
    int rows = 1; // row 0 belongs to no sequence: it must keep its value
    for (auto& s : seqs) {
        Cache c;
        c.cap = s.n + s.p + s.t + 3;
        c.k = randv((size_t)c.cap * kvd, 1);
        c.v = randv((size_t)c.cap * kvd, 1);
        // Positions past the ones a row may see hold NaN: a kernel that
        // reads them (rather than skipping them) fails.
        for (int j = s.n + s.p + s.t; j < c.cap; j++)
            for (int x = 0; x < kvd; x++) c.k[(size_t)j * kvd + x] = c.v[(size_t)j * kvd + x] = NAN;
        caches.push_back(std::move(c));
        row0.push_back(rows);
        rows += s.t;
    }
    std::vector<float> q = randv((size_t)rows * qd, 0.5);
    std::vector<float> out = runAttend(heads, kvHeads, hd, seqs, caches, q, rows, row0);

    std::vector<double> want((size_t)rows * qd, 7.0), scale((size_t)rows * qd, 1.0);
    for (size_t b = 0; b < seqs.size(); b++) {
        Seq& s = seqs[b];
        int w = s.p + s.t;
        std::vector<unsigned char> anc;
        if (!s.parents.empty()) anc = ancestors(s.parents);
        for (int i = 0; i < s.t; i++) {
            int row = row0[b] + i;
            // The row's position and, per tree slot, its depth: a chain row
            // at n+p+i sees slots within window of it; a tree row at
            // n+depth sees the committed slots within window of it and its
            // ancestors of depth > depth-window.
            int depth = -1;
            std::vector<int> slotDepth(w, -1);
            if (!anc.empty())
                for (int c = 0; c < w; c++)
                    if (anc[(size_t)(s.p + i) * w + c]) slotDepth[c] = ++depth;
            int pos = anc.empty() ? s.n + s.p + i : s.n + depth;
            for (int h = 0; h < heads; h++) {
                int off = h / rep * hd;
                std::vector<double> sc;
                std::vector<int> ks;
                for (int c = 0; c < s.n + w; c++) {
                    if (c >= s.n) {
                        if (anc.empty() ? c > s.n + s.p + i : !anc[(size_t)(s.p + i) * w + c - s.n]) continue;
                    }
                    int cpos = (c < s.n || anc.empty()) ? c : s.n + slotDepth[c - s.n];
                    if (window > 0 && pos - cpos >= window) continue;
                    double x = 0;
                    for (int d = 0; d < hd; d++)
                        x += (double)q[(size_t)row * qd + h * hd + d] * caches[b].k[(size_t)c * kvd + off + d];
                    if (softcap != 0) x = softcap * std::tanh(x / softcap);
                    sc.push_back(x);
                    ks.push_back(c);
                }
                double mx = -INFINITY, sum = 0;
                for (double x : sc) mx = std::max(mx, x);
                if (!sinks.empty()) {
                    // The sink: one more score, without a value.
                    mx = std::max(mx, (double)sinks[h]);
                    sum = std::exp(sinks[h] - mx);
                }
                for (double& x : sc) sum += (x = std::exp(x - mx));
                for (int d = 0; d < hd; d++) {
                    double o = 0, a = 0;
                    for (size_t j = 0; j < ks.size(); j++) {
                        double p = sc[j] / sum * caches[b].v[(size_t)ks[j] * kvd + off + d];
                        o += p;
                        a += std::fabs(p);
                    }
                    want[(size_t)row * qd + h * hd + d] = o;
                    scale[(size_t)row * qd + h * hd + d] = std::max(a, 1e-3);
                }
            }
        }
    }
    if (check(std::string("Attend ") + name, out.data(), want, scale, 2e-5))
        std::printf("ok Attend %s%s window %d softcap %g%s\n", name, scalar ? " scalar" : "", window, softcap,
                    sinks.empty() ? "" : " sinks");
}

// testAttendSame checks that rows score bit for bit the same whatever the
// launch: a decode step at position n+d of a sequence, the same node inside a
// chain-shaped verification tree, inside a bushier tree whose other nodes are
// masked, and beside a long sequence that splits the launch into chunks.
void testAttendSame(int heads, int kvHeads, int hd, int n) {
    int qd = heads * hd, kvd = kvHeads * hd;
    const int t = 5;
    Cache c;
    c.cap = n + 2 * t + 1;
    c.k = randv((size_t)c.cap * kvd, 1);
    c.v = randv((size_t)c.cap * kvd, 1);
    std::vector<float> q = randv((size_t)t * qd, 0.5);
    // Decode steps: row d alone, seeing positions [0, n+d].
    std::vector<float> dec((size_t)t * qd);
    for (int d = 0; d < t; d++) {
        std::vector<Seq> s{{n + d, 1, 0, {}}};
        std::vector<Cache> cs{c};
        std::vector<float> qr(q.begin() + (size_t)d * qd, q.begin() + (size_t)(d + 1) * qd);
        std::vector<float> o = runAttend(heads, kvHeads, hd, s, cs, qr, 1, {0});
        std::copy(o.begin(), o.end(), dec.begin() + (size_t)d * qd);
    }
    auto same = [&](const char* what, const std::vector<float>& got, size_t at, const std::vector<int>& nodes) {
        for (int d : nodes) {
            if (std::memcmp(&got[at + (size_t)d * qd], &dec[(size_t)d * qd], sizeof(float) * qd) != 0) {
                std::printf("FAIL Attend same bits %s n=%d: node %d differs from its decode step\n", what, n, d);
                failures++;
                return;
            }
        }
        std::printf("ok Attend same bits %s n=%d hd=%d%s window %d softcap %g%s\n", what, n, hd,
                    scalar ? " scalar" : "", window, softcap, sinks.empty() ? "" : " sinks");
    };
    {
        std::vector<Seq> s{{n, t, 0, {}}};
        std::vector<Cache> cs{c};
        same("chain", runAttend(heads, kvHeads, hd, s, cs, q, t, {0}), 0, {0, 1, 2, 3, 4});
    }
    {
        std::vector<Seq> s{{n, t, 0, {-1, 0, 1, 2, 3}}};
        std::vector<Cache> cs{c};
        same("chain tree", runAttend(heads, kvHeads, hd, s, cs, q, t, {0}), 0, {0, 1, 2, 3, 4});
    }
    {
        // Nodes 0, 1, 2 form a prefix chain; 3 and 4 fork (and are not checked).
        std::vector<Seq> s{{n, t, 0, {-1, 0, 1, 0, 3}}};
        std::vector<Cache> cs{c};
        same("forked tree", runAttend(heads, kvHeads, hd, s, cs, q, t, {0}), 0, {0, 1, 2});
    }
    {
        // Pending positions: nodes 0..2 cached already, 3 and 4 new.
        std::vector<Seq> s{{n, 2, 3, {-1, 0, 1, 2, 3}}};
        std::vector<Cache> cs{c};
        std::vector<float> qn(q.begin() + (size_t)3 * qd, q.end());
        std::vector<float> got = runAttend(heads, kvHeads, hd, s, cs, qn, 2, {0});
        std::vector<float> full((size_t)t * qd, 0.f);
        std::copy(got.begin(), got.end(), full.begin() + (size_t)3 * qd);
        same("pending tree", full, 0, {3, 4});
    }
    {
        // Beside a sequence long enough to split the launch into chunks.
        Cache big;
        big.cap = 2 * ATT_CHUNK + 50;
        big.k = randv((size_t)big.cap * kvd, 1);
        big.v = randv((size_t)big.cap * kvd, 1);
        std::vector<Seq> s{{big.cap - 1, 1, 0, {}}, {n, t, 0, {}}};
        std::vector<Cache> cs{big, c};
        std::vector<float> qq = randv((size_t)qd, 0.5);
        qq.insert(qq.end(), q.begin(), q.end());
        same("beside a chunked row", runAttend(heads, kvHeads, hd, s, cs, qq, t + 1, {0, 1}), qd, {0, 1, 2, 3, 4});
    }
}

// ------------------------------------------------------ training-time test

struct TTT {
    int heads, kvHeads, hd, rows, k;
    std::vector<std::pair<int, int>> spans; // (start, n)
    std::vector<std::vector<float>> keys, vals;
    std::vector<float> q;
};

// tttRef computes the forward (out, lse) and the gradients of sum(out·dout)
// (dq, dkeys, dvals) in double.
void tttRef(const TTT& c, const std::vector<float>& dout, std::vector<double>& out, std::vector<double>& outScale,
            std::vector<double>& lse, std::vector<double>& dq, std::vector<std::vector<double>>& dk,
            std::vector<std::vector<double>>& dv) {
    int hd = c.hd, qd = c.heads * hd, kvd = c.kvHeads * hd, rep = c.heads / c.kvHeads;
    double scale = (double)(float)(1 / std::sqrt((double)hd));
    out.assign((size_t)c.rows * qd, 7.0);
    outScale.assign((size_t)c.rows * qd, 1.0);
    lse.assign((size_t)c.rows * c.heads, 7.0);
    dq.assign((size_t)c.rows * qd, 0.0);
    dk.assign(c.k + 1, std::vector<double>((size_t)c.rows * kvd, 0.0));
    dv.assign(c.k + 1, std::vector<double>((size_t)c.rows * kvd, 0.0));
    for (auto [start, n] : c.spans) {
        for (int i = 0; i < n; i++) {
            int r = start + i;
            for (int h = 0; h < c.heads; h++) {
                int off = h / rep * hd;
                int np = i + 1 + c.k;
                std::vector<int> step(np), krow(np);
                for (int j = 0; j < np; j++) {
                    step[j] = j <= i ? 0 : j - i;
                    krow[j] = j <= i ? start + j : r;
                }
                const float* qv = &c.q[(size_t)r * qd + h * hd];
                std::vector<double> s(np), p(np);
                double mx = -INFINITY;
                for (int j = 0; j < np; j++) {
                    double x = 0;
                    for (int d = 0; d < hd; d++) x += (double)qv[d] * c.keys[step[j]][(size_t)krow[j] * kvd + off + d];
                    s[j] = scale * x;
                    mx = std::max(mx, s[j]);
                }
                double sum = 0;
                for (int j = 0; j < np; j++) sum += (p[j] = std::exp(s[j] - mx));
                for (int j = 0; j < np; j++) p[j] /= sum;
                lse[(size_t)r * c.heads + h] = mx + std::log(sum);
                std::vector<double> o(hd, 0.0);
                for (int d = 0; d < hd; d++) {
                    double a = 0;
                    for (int j = 0; j < np; j++) {
                        double x = p[j] * c.vals[step[j]][(size_t)krow[j] * kvd + off + d];
                        o[d] += x;
                        a += std::fabs(x);
                    }
                    out[(size_t)r * qd + h * hd + d] = o[d];
                    outScale[(size_t)r * qd + h * hd + d] = std::max(a, 1e-3);
                }
                const float* dov = &dout[(size_t)r * qd + h * hd];
                double D = 0;
                for (int d = 0; d < hd; d++) D += (double)dov[d] * o[d];
                for (int j = 0; j < np; j++) {
                    const float* kv = &c.keys[step[j]][(size_t)krow[j] * kvd + off];
                    const float* vv = &c.vals[step[j]][(size_t)krow[j] * kvd + off];
                    double dp = 0;
                    for (int d = 0; d < hd; d++) dp += (double)dov[d] * vv[d];
                    double ds = p[j] * (dp - D);
                    for (int d = 0; d < hd; d++) {
                        dq[(size_t)r * qd + h * hd + d] += scale * ds * kv[d];
                        dk[step[j]][(size_t)krow[j] * kvd + off + d] += scale * ds * qv[d];
                        dv[step[j]][(size_t)krow[j] * kvd + off + d] += p[j] * dov[d];
                    }
                }
            }
        }
    }
}

// gradCheck fails unless got - before is within tol of want, relative to
// want's largest magnitude (as the conformance suite's gradients are).
bool gradCheck(const std::string& what, const std::vector<float>& got, const std::vector<float>& before,
               const std::vector<double>& want, double tol) {
    double top = 0;
    for (double x : want) top = std::max(top, std::fabs(x));
    for (size_t i = 0; i < want.size(); i++) {
        double d = std::fabs((double)got[i] - before[i] - want[i]);
        if (!(d <= tol * top)) {
            std::printf("FAIL %s: value %zu is %.9g + %.9g, want + %.9g (difference %.3g, allowed %.3g)\n",
                        what.c_str(), i, before[i], (double)got[i] - before[i], want[i], d, tol * top);
            failures++;
            return false;
        }
    }
    return true;
}

void testTTT(const char* name, int heads, int kvHeads, int hd, std::vector<std::pair<int, int>> spans, int rows,
             int k, bool tiled) {
    TTT c{heads, kvHeads, hd, rows, k, spans, {}, {}, {}};
    int qd = heads * hd, kvd = kvHeads * hd;
    for (int m = 0; m <= k; m++) {
        c.keys.push_back(randv((size_t)rows * kvd, 1));
        c.vals.push_back(randv((size_t)rows * kvd, 1));
    }
    c.q = randv((size_t)rows * qd, 1);
    std::vector<float> dout = randv((size_t)rows * qd, 1);
    float scale = (float)(1 / std::sqrt((double)hd));

    std::vector<int> rtab;
    for (auto [start, n] : spans)
        for (int i = 0; i < n; i++) {
            rtab.push_back(start + i);
            rtab.push_back(start);
            rtab.push_back(start + n);
        }
    int nrows = (int)rtab.size() / 3;
    std::vector<float> out((size_t)rows * qd, 7.f), lse((size_t)rows * heads, 7.f);
    std::vector<float> dq0 = randv((size_t)rows * qd, 0.1), dq = dq0;
    std::vector<std::vector<float>> dk0, dv0, dk, dv;
    for (int m = 0; m <= k; m++) {
        dk0.push_back(randv((size_t)rows * kvd, 0.1));
        dv0.push_back(randv((size_t)rows * kvd, 0.1));
    }
    dk = dk0;
    dv = dv0;
    std::vector<unsigned long long> steps;
    for (int m = 0; m <= k; m++) steps.push_back((uintptr_t)c.keys[m].data());
    for (int m = 0; m <= k; m++) steps.push_back((uintptr_t)c.vals[m].data());
    for (int m = 0; m <= k; m++) steps.push_back((uintptr_t)dk[m].data());
    for (int m = 0; m <= k; m++) steps.push_back((uintptr_t)dv[m].data());
    std::vector<float> dD((size_t)rows * heads, 0.f);
    int vec = !scalar && hd % 4 == 0;

    if (tiled) {
        // The tiles of attention.go's tiled path: (start, length, first row).
        std::vector<int> ftab, btab;
        for (auto [start, n] : spans) {
            for (int i0 = 0; i0 < n; i0 += ATT_QT) ftab.insert(ftab.end(), {start, n, i0});
            for (int i0 = 0; i0 < n; i0 += ATT_BT) btab.insert(btab.end(), {start, n, i0});
        }
        sim::launch(dim3(ftab.size() / 3, heads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_ttt_tiled,
                    out.data(), lse.data(), (const float*)c.q.data(), (const int*)ftab.data(),
                    (const unsigned long long*)steps.data(), heads, kvHeads, hd, k, scale);
        sim::launch(dim3(btab.size() / 3, kvHeads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_ttt_bwd_rows_tiled,
                    dq.data(), dD.data(), (const float*)dout.data(), (const float*)out.data(),
                    (const float*)lse.data(), (const float*)c.q.data(), (const int*)btab.data(),
                    (const unsigned long long*)steps.data(), heads, kvHeads, hd, k, scale);
        sim::launch(dim3(btab.size() / 3, kvHeads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_ttt_bwd_keys_tiled,
                    (const float*)dD.data(), (const float*)dout.data(), (const float*)lse.data(),
                    (const float*)c.q.data(), (const int*)btab.data(), (const unsigned long long*)steps.data(), heads,
                    kvHeads, hd, k, scale);
    } else {
        sim::launch(dim3(nrows, heads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_ttt, out.data(), lse.data(),
                    (const float*)c.q.data(), (const int*)rtab.data(), (const unsigned long long*)steps.data(), heads,
                    kvHeads, hd, k, scale, vec);
        sim::launch(dim3(nrows, kvHeads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_ttt_bwd_rows, dq.data(),
                    dD.data(), (const float*)dout.data(), (const float*)out.data(), (const float*)lse.data(),
                    (const float*)c.q.data(), (const int*)rtab.data(), (const unsigned long long*)steps.data(), heads,
                    kvHeads, hd, k, scale, vec);
        sim::launch(dim3(nrows, kvHeads, 1), dim3(ATT_THREADS, 1, 1), 0, drafter_attend_ttt_bwd_keys,
                    (const float*)dD.data(), (const float*)dout.data(), (const float*)lse.data(),
                    (const float*)c.q.data(), (const int*)rtab.data(), (const unsigned long long*)steps.data(), heads,
                    kvHeads, hd, k, scale, vec);
    }

    std::vector<double> wout, wscale, wlse, wdq;
    std::vector<std::vector<double>> wdk, wdv;
    tttRef(c, dout, wout, wscale, wlse, wdq, wdk, wdv);
    std::string n = std::string("AttendTTT ") + name + " k=" + std::to_string(k);
    n += tiled ? " tiled" : vec ? "" : " scalar";
    bool ok = check(n + " out", out.data(), wout, wscale, 2e-5);
    std::vector<double> ones(wlse.size(), 1.0);
    for (size_t i = 0; i < wlse.size(); i++) ones[i] = std::max(1.0, std::fabs(wlse[i]));
    ok = check(n + " lse", lse.data(), wlse, ones, 2e-5) && ok;
    ok = gradCheck(n + " dq", dq, dq0, wdq, 2e-5) && ok;
    for (int m = 0; m <= k; m++) {
        ok = gradCheck(n + " dkeys[" + std::to_string(m) + "]", dk[m], dk0[m], wdk[m], 2e-5) && ok;
        ok = gradCheck(n + " dvals[" + std::to_string(m) + "]", dv[m], dv0[m], wdv[m], 2e-5) && ok;
    }
    if (ok) std::printf("ok %s\n", n.c_str());
}

} // namespace

int main() {
    // The conformance suite's shapes and sequences, then wider and odder
    // heads, long contexts that split into chunks, prefill-class chains
    // longer than a chunk, and trees; all with vector loads, then some with
    // scalar ones.
    for (int pass = 0; pass < 2; pass++) {
        scalar = pass == 1;
        if (!scalar) {
            testAttend("decode", 4, 2, 16, {{10, 1, 0, {}}});
            testAttend("prefill and decode", 4, 2, 16, {{0, 5, 0, {}}, {7, 1, 0, {}}});
            testAttend("long chain", 4, 2, 16, {{3, 150, 0, {}}});
            testAttend("tree and chain", 4, 2, 16, {{20, 6, 0, {-1, 0, 0, 1, 3, -1}}, {4, 3, 0, {}}});
            testAttend("pending trees", 4, 2, 16,
                       {{5, 1, 3, {-1, 0, 1, 2}}, {8, 1, 3, {-1, -1, 0, 1}},
                        {12, 4, 6, {-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}}});
            testAttend("hd 160", 2, 1, 160, {{129, 3, 0, {}}, {1, 2, 0, {-1, -1}}});
            testAttend("chunked tree", 2, 2, 32, {{ATT_CHUNK - 2, 4, 2, {-1, 0, 1, 1, 0, 4}}});
            testAttend("prefill past a chunk", 2, 1, 32, {{2 * ATT_CHUNK + 5, 70, 0, {}}, {ATT_CHUNK, 2, 0, {}}});
            testAttend("prefill hd 128", 4, 1, 128, {{40, 81, 0, {}}, {0, 64, 0, {}}});
            testAttend("prefill hd 40", 6, 2, 40, {{7, 100, 0, {}}, {3, 1, 0, {}}});
            testAttend("prefill hd 18, pending", 2, 2, 18, {{10, 70, 3, {}}});
            testAttend("prefill hd 160", 2, 1, 160, {{5, 66, 0, {}}});
        }
        testAttend("hd 40, 3 groups", 6, 2, 40, {{33, 7, 0, {-1, 0, 1, 1, 2, 4, 0}}, {130, 1, 0, {}}});
        testAttend("hd 18", 3, 1, 18, {{40, 3, 0, {}}, {ATT_CHUNK + 1, 1, 0, {}}});
        testAttend("chunked decode", 2, 1, 64,
                   {{4 * ATT_CHUNK + 37, 1, 0, {}}, {ATT_CHUNK - 1, 1, 0, {}}, {5, 2, 0, {}}});
        testAttendSame(4, 2, 16, 10);
        testAttendSame(2, 1, 64, ATT_CHUNK - 2);
        // DeepSeek-V3's absorbed attention: one KV head of 576 values
        // (drafter_attend_wide): decode over several chunks, trees with
        // pending nodes, and chains past attChainRows (which wide heads run
        // a row per block, not in tiles); then heads just past ATT_MAXD and
        // of a width no multiple of 4 or of the block.
        testAttend("hd 576 decode", 3, 1, 576, {{2 * ATT_CHUNK + 9, 1, 0, {}}, {10, 1, 0, {}}});
        testAttend("hd 576 trees", 2, 1, 576,
                   {{20, 6, 0, {-1, 0, 0, 1, 3, -1}}, {ATT_CHUNK - 2, 4, 2, {-1, 0, 1, 1, 0, 4}}});
        if (!scalar) testAttend("hd 576 chain", 2, 1, 576, {{ATT_CHUNK + 5, 70, 0, {}}, {0, 66, 0, {}}});
        testAttend("hd 257", 2, 1, 257, {{40, 3, 0, {}}, {ATT_CHUNK + 1, 1, 0, {}}});
        testAttend("hd 388", 2, 2, 388, {{5, 2, 0, {-1, 0}}, {3, 1, 0, {}}});
        testAttendSame(2, 1, 576, ATT_CHUNK - 2);

        // Gemma-2/3's variants: softcaps small enough to saturate tanh,
        // windows that end in the committed positions, in a tree's own
        // slots, or past everything, over chunked decode rows, trees with
        // pending nodes and prefill tiles whose windows start past their
        // first keys.
        for (auto [w, cap] : std::vector<std::pair<int, float>>{{0, 0.75f}, {5, 0.f}, {1, 0.f}, {37, 0.75f}, {300, 2.f}}) {
            window = w;
            softcap = cap;
            testAttend("window decode", 4, 2, 16, {{10, 1, 0, {}}, {0, 1, 0, {}}, {7, 5, 0, {}}});
            testAttend("window chunked decode", 2, 1, 64,
                       {{2 * ATT_CHUNK + 88, 1, 0, {}}, {ATT_CHUNK + 3, 1, 0, {}}, {ATT_CHUNK - 2, 3, 0, {}}});
            testAttend("window trees", 4, 2, 16,
                       {{20, 6, 0, {-1, 0, 0, 1, 3, -1}}, {12, 4, 6, {-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}},
                        {ATT_CHUNK + 40, 2, 3, {-1, 0, 1, 2, 2}}});
            if (!scalar) {
                testAttend("window prefill", 4, 2, 16, {{3, 150, 0, {}}, {2 * ATT_CHUNK + 5, 70, 0, {}}});
                testAttend("window prefill hd 160", 2, 1, 160, {{40, 66, 0, {}}});
            }
            testAttend("window hd 576", 2, 1, 576,
                       {{ATT_CHUNK + 3, 1, 0, {}}, {12, 4, 6, {-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}}});
            testAttendSame(4, 2, 16, 10);
            testAttendSame(2, 1, 64, 2 * ATT_CHUNK - 2);
        }
        window = 0;
        softcap = 0.f;

        // gpt-oss's attention sinks (one that takes most of a row's weight,
        // ones near the scores, one as good as none), alone and with windows
        // and softcaps: a row of one block, chunked rows merged by the
        // combine, trees, prefill tiles and wide prefill rows, and the
        // same-bits property.
        sinks = {6.f, -0.4f, 1.3f, -40.f, -2.5f, 0.9f};
        for (auto [w, cap] : std::vector<std::pair<int, float>>{{0, 0.f}, {0, 0.75f}, {5, 0.f}, {300, 2.f}}) {
            window = w;
            softcap = cap;
            testAttend("sinks decode", 4, 2, 16, {{10, 1, 0, {}}, {0, 1, 0, {}}, {7, 5, 0, {}}});
            testAttend("sinks chunked decode", 2, 1, 64,
                       {{4 * ATT_CHUNK + 37, 1, 0, {}}, {ATT_CHUNK + 3, 1, 0, {}}, {ATT_CHUNK - 2, 3, 0, {}}});
            testAttend("sinks trees", 6, 2, 16,
                       {{20, 6, 0, {-1, 0, 0, 1, 3, -1}}, {12, 4, 6, {-1, -1, 0, 1, 2, 3, 4, 5, 4, 0}},
                        {ATT_CHUNK + 40, 2, 3, {-1, 0, 1, 2, 2}}});
            testAttend("sinks hd 160", 2, 1, 160, {{129, 3, 0, {}}, {1, 2, 0, {-1, -1}}});
            if (!scalar) {
                testAttend("sinks prefill", 6, 2, 16, {{3, 150, 0, {}}, {2 * ATT_CHUNK + 5, 70, 0, {}}});
                testAttend("sinks prefill hd 40", 6, 2, 40, {{7, 100, 0, {}}, {3, 1, 0, {}}});
                testAttend("sinks prefill hd 160", 2, 1, 160, {{40, 66, 0, {}}});
            }
            testAttendSame(4, 2, 16, 10);
            testAttendSame(2, 1, 64, 2 * ATT_CHUNK - 2);
        }
        sinks.clear();
        window = 0;
        softcap = 0.f;

        for (int tiled = 0; tiled < 2; tiled++) {
            if (tiled && scalar) continue;
            testTTT("suite", 4, 2, 16, {{0, 5}, {5, 1}, {7, 11}, {18, 7}}, 25, 0, tiled);
            testTTT("suite", 4, 2, 16, {{0, 5}, {5, 1}, {7, 11}, {18, 7}}, 25, 2, tiled);
            testTTT("hd 40", 6, 3, 40, {{1, 9}, {10, 140}}, 151, 1, tiled);
            testTTT("hd 18", 2, 2, 18, {{0, 4}, {5, 3}}, 9, 2, tiled);
            if (!scalar) testTTT("hd 128, 34 steps", 2, 1, 128, {{0, 37}, {37, 16}}, 53, 34, tiled);
        }
        if (!scalar) testTTT("hd 160", 2, 1, 160, {{0, 3}, {3, 6}}, 9, 3, false);
    }
    if (failures) {
        std::printf("%d failures\n", failures);
        return 1;
    }
    return 0;
}
