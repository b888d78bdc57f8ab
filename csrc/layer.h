// jaxgru native CPU lowering: what one layer call is (shared by the runtime and the per-ISA
// kernels). Plain data: every pointer is owned by XLA (operands, results) or by the call's
// scratch (panels, states); nothing here is global, so concurrent calls never share state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jaxgru_cpu {

// The 11 ONNX activations, in the order of jaxgru/_src/activations.py (NAMES); the id passed
// by the Python side is Activation.kind_id. tests/test_cpu_backend.py checks this list against
// activations.NAMES, so the two cannot drift apart.
// ACTIVATIONS: Relu Tanh Sigmoid Affine LeakyRelu ThresholdedRelu ScaledTanh HardSigmoid Elu Softsign Softplus
enum Act : int32_t {
  kRelu = 0, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid,
  kElu, kSoftsign, kSoftplus, kNumActs
};

struct Activation {
  int32_t id = kSigmoid;
  float alpha = 0.f, beta = 0.f;
};

constexpr int kBlock = 16;  // hidden units per panel / register tile column block
// Floats (4 KiB) between the last row of a row group and the first of the next in the per-row
// scratch (Layer::row_at, proj_at): no 4 KiB page then holds two groups' rows, and the cores'
// prefetchers, which stay within a page, never fetch lines another group's core writes.
constexpr int64_t kGroupGap = 1024;

// One direction's scratch and constants.
struct Dir {
  bool reversed = false;
  Activation act[3];      // f, g[, h]
  float* wpanel = nullptr;   // nb x [I][G][16]: W packed per block of 16 hidden units
  float* rpanel = nullptr;   // nb x [H][Gr][16]: R (GRU lbr=0: only the z, r rows)
  float* rhpanel = nullptr;  // GRU lbr=0: nb x [H][1][16], the h rows of R
  float* bx = nullptr;       // [G][Hp]: the bias added to X.W^T (Rb folded in except GRU lbr=1 h)
  float* bh = nullptr;       // [Hp]: GRU lbr=1, Rbh (inside r*(H.Rh^T + Rbh))
  float* peep = nullptr;     // [3][Hp]: LSTM peepholes i, o, f
  // X.W^T + bx, a chunk of steps a slot: [ring][group][chunk][nb][group rows][G][16], each
  // group's part of a slot kGroupGap floats past the one before (Layer::proj_at); null where
  // the steps make their own (Layer::fused)
  float* proj = nullptr;
  // The per-row buffers, "[N][Hp]": row n's Hp floats at Layer::row_at[n] (groups kGroupGap apart).
  float* h[2] = {nullptr, nullptr};  // [N][Hp] each: the hidden state, double-buffered by step
  float* c = nullptr;        // [N][Hp]: LSTM cell state (tile-local: updated in place)
  float* z = nullptr;        // [N][Hp]: GRU lbr=0, z between the two phases of a step
  float* rh = nullptr;       // [N][Hp]: GRU lbr=0, r*H, the operand of the second phase
  // backward
  float* rtpanel = nullptr;  // R's columns, Layer::rt_block
  float* dh[2] = {nullptr, nullptr};  // [N][Hp] each: the cotangent of H, double-buffered
  float* dc = nullptr;       // [N][Hp]: LSTM, the cotangent of C (tile-local)
  float* ghz = nullptr;      // [N][Hp]: the part of dH_prev that is not a matmul
  float* dah = nullptr;      // [N][Hp]: GRU lbr=0, d(a_h), the operand of d(r*H) = dah . Rh
  float* dg = nullptr;       // [N][G*H]: the step's d(X.W^T + b), the operand of dG . R
  float* dgh = nullptr;      // [N][H]: GRU lbr=1, the step's dgh (the h gate's part of dG . R)
  // [row tile][block][G + 1][16]: per unit of the elementwise phase, its rows' sums over the
  // steps of d(X.W^T + b) per gate and (GRU lbr=1) of dgh; summed over row tiles at the end,
  // they are the bias gradients (a unit runs one step at a time, so no two threads add at once)
  float* dsum = nullptr;
  // native dR (Layer::dr): per row group, H_prev of the current chunk of steps packed by the
  // elementwise phase, [group][nb][rchunk][group rows][16] (the panel of dR's tiles, the steps
  // ascending), and dR's running sum over the chunks, [group][G*H][Hp]
  float* hpack = nullptr;
  float* racc = nullptr;
};

struct Layer {
  int cell = 0;  // 0 GRU, 1 LSTM
  int64_t L = 0, N = 0, I = 0, H = 0, D = 1;
  int G = 3;        // gates
  int64_t Hp = 0;   // H rounded up to kBlock
  int64_t nb = 0;   // blocks of kBlock hidden units
  int K = 0;        // residual blocks of H per step (0: no residuals)
  bool lbr = false, input_forget = false, peepholes = false, ragged = false;
  // The GRU at linear_before_reset=0: its h gate's product takes r * H_prev, so each step (forward,
  // tangent, backward) runs as two phases, and R's z, r rows pack apart from its h rows
  bool gru0() const { return cell == 0 && !lbr; }
  // gates of a step phase's panel of R: all G, or GRU lbr=0's z, r (its first phase) and h (its second)
  int phase_gates(bool first) const { return gru0() ? (first ? 2 : 1) : G; }
  float clip = 0.f;  // <= 0: no clip
  // forward, H a multiple of kBlock, and N = 1 with L < kRowsMaxSteps or L * N <= kFewRows: the
  // steps read R's rows (gemv_rows), unpacked; with L * N <= kFewRows and I a multiple of kBlock,
  // the projection reads W's rows
  bool r_rows = false, w_rows = false;
  int64_t chunk = 1;  // steps per input-projection chunk
  int64_t ring = 1;   // chunks of projections held at once: chunk c in slot c % ring (pipelined calls: ~4 MiB)
  // No helper projecting ahead, and 8 rows or more a step or chunks of one step (plan_threads):
  // each unit of a step makes its own rows' X.W^T + bx (run_step_t); no projection phases, no Dir::proj.
  bool fused = false;
  // Blocks a unit of a forward step's phase (kStep, kStepB) makes: 1, or all of them where one
  // thread runs the steps of a chain of one row alone (plan_threads; run_step_wide)
  int64_t step_blocks = 1;
  // operands (time-major, float32) and results
  const float *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *p = nullptr;
  const float *h0 = nullptr, *c0 = nullptr;
  const int32_t* lens = nullptr;  // clipped to [0, L] by the caller (Python)
  float *y = nullptr, *yh = nullptr, *yc = nullptr, *res = nullptr;
  // backward (processing order, [D][L][N][.]): the cotangent of Y per step and the forward's
  // residuals; the states before each step are read where the forward left them (h_before,
  // c_before: y, h0, c0, res); results d(X.W^T + b) and, GRU lbr=1, the h gate's d(H.Rh^T + Rbh)
  // (its z, r gates' are d(X.W^T + b)'s), both transposed: [D][G*H or H][L][N], so the weight
  // gradients' GEMMs over steps and batch (XLA's, native.py) read them without a copy; the
  // cotangents of the initial states
  bool backward = false;
  const float *gy = nullptr, *dhT = nullptr, *dcT = nullptr;
  float *dgx = nullptr, *dgh = nullptr, *dh0 = nullptr, *dc0 = nullptr;
  int rows_bwd = 1;  // rows per tile of the elementwise phase (dsum's row tiles)
  // The backward's dH = dG . R (kBwdMat): its reduction runs over mat_k() rows of R (LSTM: G*H;
  // GRU: the z, r rows, and lbr=1 the h rows too, paired with dgh), split into `kparts` parts, one
  // phase each (plan_bwd_product); its panels hold rt_blocks blocks per row (2: pairs), and its
  // units, as dR's (run_bwd_rgrad), make that many blocks.
  int64_t rt_blocks = 1;
  int64_t kparts = 1;
  int64_t mat_k() const { return cell == 1 ? G * H : (lbr ? 3 * H : 2 * H); }
  // rows [*k0, *k1) of R in part `part` (whole 16-row groups)
  void mat_part(int64_t part, int64_t* k0, int64_t* k1) const {
    const int64_t groups = (mat_k() + kBlock - 1) / kBlock;
    *k0 = part * groups / kparts * kBlock;
    *k1 = part + 1 == kparts ? mat_k() : (part + 1) * groups / kparts * kBlock;
  }
  // rtpanel: R's columns of rt_blocks blocks per row, [G*H][16 * rt_blocks] per group of blocks;
  // block j's columns start at rt_block(d, j), its rows rt_ld() floats apart
  int64_t rt_ld() const { return rt_blocks * kBlock; }
  int64_t rtpanel_floats() const { return (nb + rt_blocks - 1) / rt_blocks * G * H * rt_ld(); }
  float* rt_block(int d, int64_t j) const {
    return dir[d].rtpanel + (j / rt_blocks) * G * H * rt_ld() + (j % rt_blocks) * kBlock;
  }
  // dR = sum over steps and rows of dG^T . H_prev, [D][G*H][H], computed by the call (GRU lbr=1:
  // its h rows from dgh) in chunks of `rchunk` steps, so the XLA program holds no copy of H_prev
  // for it (null: XLA computes it, GRU lbr=0, whose h rows pair with r*H_prev)
  float* dr = nullptr;
  int64_t rchunk = 1;
  // tangent (processing order, [D][L][N][.]; tangent.inc): the part of each step's gate
  // tangents that does not depend on the carried tangents (ex: d(X.W^T + b) + H_prev.dR^T
  // [+ the peepholes' tangents times C]; GRU lbr=1: without the h gate's H_prev.dRh^T + dRbh,
  // which is exh, multiplied by r), the forward's residuals (res), states before each step
  // (hp; LSTM: cp) and R; the tangents of the initial states in h0 / c0, dY per step into dy
  // (processing order), the last states' tangents into yh / yc. The carried dH, dC use the
  // forward's h / c buffers, GRU lbr=0's dz and dr*H + r*dH its z / rh, R the forward's panels.
  bool tangent = false;
  const float *ex = nullptr, *exh = nullptr, *hp = nullptr, *cp = nullptr;
  float* dy = nullptr;
  Dir dir[2];

  int64_t len(int64_t n) const { return ragged ? lens[n] : L; }
  // the input projections' chunks: how many, and chunk k's steps (the last may be shorter)
  int64_t chunks() const { return (L + chunk - 1) / chunk; }
  int64_t chunk_steps(int64_t k) const { return L - k * chunk < chunk ? L - k * chunk : chunk; }
  // whether a helper projects ahead of the steps (a ring of several chunks: work_pipelined)
  bool pipelined() const { return ring > 1; }
  // Dir::proj (floats): one block of a step's projections of a row group, all blocks of the step,
  // a group's part of a slot (its chunk of steps, and the gap before the next group's), chunk k's
  // slot (k % ring), and step t's place in its group's part (row n of block j at
  // j * proj_block() + proj_at[n] from there). One group (every call before plan_threads sets
  // `groups`, and every pipelined call): [ring][chunk][nb][N][G][16].
  int64_t proj_block() const { return group_rows_max() * G * kBlock; }
  int64_t proj_step() const { return nb * proj_block(); }
  int64_t proj_step_bytes() const { return static_cast<int64_t>(sizeof(float)) * proj_step(); }
  int64_t proj_group() const { return chunk * proj_step() + (groups > 1 ? kGroupGap : 0); }
  int64_t proj_slot(int64_t k) const { return (k % ring) * groups * proj_group(); }
  int64_t proj_of_step(int64_t t) const { return proj_slot(t / chunk) + (t % chunk) * proj_step(); }
  // Where row n's part of the per-row scratch is (Call::row_offsets, filled by prepare): row_at[n]
  // in the [N][Hp] buffers (Dir::h, c, z, rh, dh, dc, ghz, dah), proj_at[n] in a group's block
  // of a step's projections (with its group's offset in the slot). Within a group the rows are
  // consecutive; each group after the first starts kGroupGap floats later. Against rows side by
  // side (Zen 4, two threads; the LSTM forward at L = 1000, H = 64 in a build that made one group
  // per core): two groups of 8 rows took 0.90x the time, two groups of one row 0.95-0.96x
  // (still 1.15x one row's time alone: a quarter of that is Y's rows side by side, XLA's layout;
  // the rest was not found). The plans' own groups (N = 64, H = 128: two groups of 32 rows): the
  // LSTM forward 0.89-0.99x, the GRU's 0.99x; the training steps at N = 16 moved within their noise.
  const int64_t* row_at = nullptr;
  const int64_t* proj_at = nullptr;
  int64_t row_floats() const { return N * Hp + (groups - 1) * kGroupGap; }  // one [N][Hp] buffer
  // time index that processing step t of direction d reads / writes for batch row n
  int64_t time_of(int d, int64_t t, int64_t n) const {
    int64_t l = len(n);
    if (t >= l) return t;  // padding: identity (Y there is zero)
    return dir[d].reversed ? l - 1 - t : t;
  }
  // row n of X ([L][N][I]) that processing step t of direction d reads
  const float* x_row(int d, int64_t t, int64_t n) const { return x + (time_of(d, t, n) * N + n) * I; }
  // backward: the hidden state before processing step t < len(n) of direction d, row n: h0 at
  // t = 0, else Y ([L][D][N][H], time order) at the time of step t - 1
  const float* h_before(int d, int64_t t, int64_t n) const {
    if (t == 0) return h0 + (d * N + n) * H;
    return y + ((time_of(d, t - 1, n) * D + d) * N + n) * H;
  }
  // Row groups: the batch rows split into `groups` ranges, each run as its own chain of phases
  // (rows never depend on other rows, so the threads of different groups never meet per step).
  // Row tiles are numbered group by group, tiles_per_group of them each (a group with fewer rows
  // leaves its last numbers unused); within a group its rows are split as evenly as they go
  // (N = 32 on 6-row tiles: 5,5,5,5,6,6 rather than 6,6,6,6,6,2, whose 2-row tile ran at a
  // fraction of the rate of the others).
  int64_t groups = 1;
  void group_rows(int64_t g, int64_t* lo, int64_t* hi) const {
    *lo = g * N / groups;
    *hi = (g + 1) * N / groups;
  }
  int64_t tiles_in_group(int64_t g, int rows) const {
    if (const int64_t* t = row_table(rows)) return t[1 + g];
    int64_t lo, hi;
    group_rows(g, &lo, &hi);
    return (hi - lo + rows - 1) / rows;
  }
  int64_t tiles_per_group(int rows) const {
    if (const int64_t* t = row_table(rows)) return t[0];
    return ((N + groups - 1) / groups + rows - 1) / rows;
  }
  // rows [*n0, *n1) of row tile rt of tiles of at most `rows` rows
  void tile_rows(int64_t rt, int rows, int64_t* n0, int64_t* n1) const {
    if (const int64_t* t = row_table(rows)) {
      *n0 = t[1 + groups + 2 * rt];
      *n1 = t[2 + groups + 2 * rt];
      return;
    }
    const int64_t tpg = tiles_per_group(rows), g = rt / tpg, i = rt % tpg, nt = tiles_in_group(g, rows);
    int64_t lo, hi;
    group_rows(g, &lo, &hi);
    *n0 = i < nt ? lo + i * (hi - lo) / nt : hi;
    *n1 = i < nt ? lo + (i + 1) * (hi - lo) / nt : hi;
  }
  // The three above, tabled per tile height once the groups are set (table_rows): each unit of a
  // step asked them again, ~10 integer divisions a unit (64-bit idiv, 10-18 cycles each): ~9%
  // of the epilogue's samples at batch 1 (LSTM H = 64, perf). A table holds tiles_per_group, each
  // group's tile count, then {n0, n1} per row tile; heights not tabled are computed.
  static constexpr int kTabledRows = 8;
  const int64_t* row_tables[kTabledRows + 1] = {};
  const int64_t* row_table(int rows) const { return rows >= 1 && rows <= kTabledRows ? row_tables[rows] : nullptr; }
  int64_t row_table_size(int rows) const { return 1 + groups + 2 * groups * tiles_per_group(rows); }
  // fill `out` (row_table_size(rows) entries) with the table of `rows`, and use it from now on
  void table_rows(int rows, int64_t* out) {
    row_tables[rows] = nullptr;
    const int64_t tpg = tiles_per_group(rows);
    out[0] = tpg;
    for (int64_t g = 0; g < groups; ++g) out[1 + g] = tiles_in_group(g, rows);
    for (int64_t rt = 0; rt < groups * tpg; ++rt)
      tile_rows(rt, rows, out + 1 + groups + 2 * rt, out + 2 + groups + 2 * rt);
    row_tables[rows] = out;
  }
  // backward: the row tiles of its elementwise phase, and unit (rt, j)'s G + 1 sums (Dir::dsum)
  int64_t bwd_row_tiles() const { return groups * tiles_per_group(rows_bwd); }
  // native dR: the rows of a group's H_prev panel, and block j's panel of group g
  int64_t group_rows_max() const { return (N + groups - 1) / groups; }
  float* hpack_of(int d, int64_t g, int64_t j) const {
    return dir[d].hpack + ((g * nb + j) * rchunk) * group_rows_max() * kBlock;
  }
  // the row of dG^T ([D][G*H][L][N], or dgh's for GRU lbr=1's h rows) paired with dR's row gh
  const float* dg_row(int d, int64_t gh) const {
    if (dgh && gh >= 2 * H) return dgh + (d * H + gh - 2 * H) * L * N;
    return dgx + (d * G * H + gh) * L * N;
  }
  float* dsum_of(int d, int64_t rt, int64_t j) const { return dir[d].dsum + (rt * nb + j) * (G + 1) * kBlock; }
  // LSTM backward: the cell state before step t: c0 at t = 0, else C of step t - 1 (the last of
  // the residuals' K blocks)
  const float* c_before(int d, int64_t t, int64_t n) const {
    if (t == 0) return c0 + (d * N + n) * H;
    return res + ((d * L + t - 1) * N + n) * K * H + (K - 1) * H;
  }
};

// Phases of one chain's work (a direction's row group), in order. Every phase is a set of
// independent units.
enum PhaseKind : int32_t { kPack = 0, kProject, kStep, kStepB,
                           kBwdPack, kBwdElem, kBwdRh, kBwdMat, kBwdRGrad,
                           kTanPack, kTanStep, kTanStepB };

// The per-ISA kernels: row counts of each tile and the one entry point that runs a unit.
struct Kernels {
  const char* name;
  int rows_proj;           // rows (batch x step) per input-projection tile
  int rows_step[2][2];     // [cell][phase] rows per recurrence tile (GRU lbr=0 has 2 phases)
  int rows_bwd;            // rows per backward matmul tile (of bwd_blocks 16-unit blocks)
  int bwd_blocks;          // blocks per tile of the backward's dH = dG . R and dR, 1 or 2 (Layer::rt_blocks)
  int group_tiles;         // full step tiles a row group of the inference forward holds at least
  // Run unit `unit` of phase (kind, arg) of direction d, row group `group`. `rows` is the
  // tile's row count.
  void (*run)(const Layer& layer, int d, int kind, int64_t arg, int64_t group, int64_t unit, int rows);
};

const Kernels& kernels_avx512();
const Kernels& kernels_avx2();
const Kernels& kernels_generic();

}  // namespace jaxgru_cpu
