// Hopper (sm_90a) microbenchmarks for twill's machine model: Tensor Core (wgmma) throughput and latency,
// MUFU ex2 throughput, TMA load latency and bandwidth, barrier latencies, the register -> SMEM ->
// register hand-off between warp groups, and the cost of warp divergence against predication.
//
// Build:  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o calib microbench.cu
// Run:    ./calib wgmma | wgmma_serial | mufu | tma | sync | diverge | contend   (one JSON object per call)
//
// Every timing is read in-kernel with %clock64 (SM clock cycles; the counter is per SM, so only differences
// taken on one SM are used). Host-side CUDA events give wall time for the throughput runs as a cross-check.
// run_calibration.py builds this file, runs each test under a time limit and writes the JSON results.

#include <cuda.h>
#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "wgmma_m64n128k16.cuh"

#define CK(x)                                                                                        \
  do {                                                                                               \
    cudaError_t err_ = (x);                                                                          \
    if (err_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(err_)); \
      exit(2);                                                                                       \
    }                                                                                                \
  } while (0)

#define CK_LAUNCH()                  \
  do {                               \
    CK(cudaGetLastError());          \
    CK(cudaDeviceSynchronize());     \
  } while (0)

// ------------------------------------------------------------------------------------------------ helpers
__device__ __forceinline__ unsigned long long clk() {
  unsigned long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t(1023));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(saddr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}" ::"r"(saddr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(saddr(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// ------------------------------------------------------------------------------------------------ wgmma
// Shared memory: B tile [128 (N) x 128 (K)] fp16 = 32 KB, then per warp group NACC A tiles [64 (M) x 128 (K)]
// fp16 = 16 KB each. Both K-major with the 128-byte swizzle: a tile is two column blocks of 64 K-elements
// (128 B per row), each [rows x 128 B], and a K-step of 16 elements advances the descriptor by 32 B.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);  // start address
  d |= static_cast<uint64_t>(1) << 16;                 // leading byte offset (unused for swizzled K-major)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;         // stride byte offset: 8 rows x 128 B
  d |= static_cast<uint64_t>(1) << 62;                 // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// One tile GEMM per loop step: every warp group computes NACC accumulators of [64 x 128] over K = 128
// (8 wgmma m64n128k16 each). WAIT_EACH = 1 waits for every tile (latency); 0 keeps one tile in flight;
// 2 commits and waits after every single wgmma instruction: the serialized wgmma pipeline that ptxas emits
// when a kernel has too few registers for it (C7511), so each instruction pays its whole latency.
// NACC = 2 is only used with WAIT_EACH >= 1: with one tile in flight ptxas serializes its wgmmas (C7514).
// The empty asm statements pin the accumulators around the asynchronous region (CUTLASS's
// warpgroup_fence_operand), so the compiler cannot move accumulator reads into it.
template <int NACC, int WAIT_EACH>
__global__ void __launch_bounds__(256, 1) k_wgmma(int tiles, unsigned long long* cyc, unsigned* sm, float* sink) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align1024(smem_raw);
  const int nwg = blockDim.x / 128;
  const int wg = threadIdx.x / 128;
  const int bytes = 32768 + nwg * NACC * 16384;
  __half* h = reinterpret_cast<__half*>(smem);
  for (int i = threadIdx.x; i < bytes / 2; i += blockDim.x) {
    h[i] = __float2half((static_cast<float>(hash32(i * 7919u + blockIdx.x) & 0xFFFF) / 32768.0f) - 1.0f);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t b_base = saddr(smem);
  const uint32_t a_base = b_base + 32768 + wg * NACC * 16384;
  float d[NACC][64];
#pragma unroll
  for (int a = 0; a < NACC; ++a)
#pragma unroll
    for (int i = 0; i < 64; ++i) d[a][i] = 0.0f;
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int t = 0; t < tiles; ++t) {
#pragma unroll
    for (int a = 0; a < NACC; ++a)
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[a][i])::"memory");
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint64_t db = wgmma_desc(b_base + (s >> 2) * 16384 + (s & 3) * 32);
#pragma unroll
      for (int a = 0; a < NACC; ++a) {
        const uint64_t da = wgmma_desc(a_base + a * 16384 + (s >> 2) * 8192 + (s & 3) * 32);
        wgmma_m64n128k16_ss(d[a], da, db);
        if (WAIT_EACH == 2) {
          wgmma_commit();
#pragma unroll
          for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[a][i])::"memory");
          wgmma_wait<0>();
          wgmma_fence();
        }
      }
    }
    if (WAIT_EACH != 2) wgmma_commit();
#pragma unroll
    for (int a = 0; a < NACC; ++a)
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[a][i])::"memory");
    if (WAIT_EACH == 2) {
      // every instruction was waited for above
    } else if (WAIT_EACH) {
      wgmma_wait<0>();
    } else {
      wgmma_wait<1>();
    }
  }
  wgmma_wait<0>();
  __syncthreads();
  const unsigned long long t1 = clk();
  float acc = 0.0f;
#pragma unroll
  for (int a = 0; a < NACC; ++a)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += d[a][i];
  atomicAdd(sink, acc);
  if (threadIdx.x == 0) {
    cyc[2 * blockIdx.x] = t0;
    cyc[2 * blockIdx.x + 1] = t1;
    sm[blockIdx.x] = smid();
  }
}

// ------------------------------------------------------------------------------------------------ MUFU
// Each thread runs 8 independent chains x <- ex2(-x) (x stays in (0, 1]); FTZ selects ex2.approx.ftz.f32
// (one MUFU.EX2) or ex2.approx.f32, the form Triton emits for tl.math.exp2.
template <int FTZ>
__global__ void k_mufu(int iters, unsigned long long* cyc, unsigned* sm, float* sink) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = 0.25f + 0.01f * ((threadIdx.x + j) & 31);
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float y;
        if (FTZ) {
          asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(-x[j]));
        } else {
          asm volatile("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(-x[j]));
        }
        x[j] = y;
      }
    }
  }
  __syncthreads();
  const unsigned long long t1 = clk();
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc += x[j];
  if (acc == 12345.0f) *sink = acc;
  if (threadIdx.x == 0) {
    cyc[2 * blockIdx.x] = t0;
    cyc[2 * blockIdx.x + 1] = t1;
    sm[blockIdx.x] = smid();
  }
}

// ------------------------------------------------------------------------------------------------ TMA
// Thread 0 of each CTA keeps DEPTH loads of BOXES boxes [128 rows x 64 fp16] (16 KB each, 128-byte swizzle)
// in flight on a ring of mbarriers and records, per load, the cycles from issue to the observed completion.
// mode 0: a pseudo-random 128-row tile of a 1 GiB tensor (mostly HBM); mode 1: 4 tiles per CTA, reused (L2).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int col, int row,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(saddr(bar))
      : "memory");
}

__global__ void __launch_bounds__(128, 1)
    k_tma(const __grid_constant__ CUtensorMap map, int boxes, int depth, int nloads, int mode, int ntiles,
          unsigned* lat, unsigned long long* span, unsigned* sm) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align1024(smem_raw);
  __shared__ uint64_t bars[8];
  __shared__ unsigned long long issued[8];
  if (threadIdx.x == 0) {
    for (int s = 0; s < depth; ++s) mbar_init(&bars[s], 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const uint32_t base = saddr(smem);
  const uint32_t stage_bytes = boxes * 16384;
  auto row_of = [&](int i) -> int {
    if (mode == 0) return static_cast<int>(hash32(static_cast<uint32_t>(i) * 2654435761u + blockIdx.x * 40503u) %
                                           static_cast<uint32_t>(ntiles)) * 128;
    return static_cast<int>((blockIdx.x * 4 + (i & 3)) % ntiles) * 128;
  };
  auto issue = [&](int s, int i) {
    const int row = row_of(i);
    issued[s] = clk();
    mbar_arrive_expect_tx(&bars[s], stage_bytes);
    for (int b = 0; b < boxes; ++b) tma_load_2d(base + s * stage_bytes + b * 16384, &map, b * 64, row, &bars[s]);
  };
  uint32_t phase = 0;  // bit s: parity of stage s
  const unsigned long long start = clk();
  for (int i = 0; i < depth && i < nloads; ++i) issue(i, i);
  for (int i = 0; i < nloads; ++i) {
    const int s = i % depth;
    mbar_wait(&bars[s], (phase >> s) & 1u);
    const unsigned long long t = clk();
    phase ^= 1u << s;
    lat[static_cast<size_t>(blockIdx.x) * nloads + i] = static_cast<unsigned>(t - issued[s]);
    if (i + depth < nloads) issue(s, i + depth);
  }
  span[blockIdx.x] = clk() - start;
  sm[blockIdx.x] = smid();
}

// One warp group (thread `tid` of 128) stores V4 16-byte vectors per thread from registers to the SMEM at
// `buf` (STS.128; `tag` varies the data), or loads them back (LDS.128) and folds them into one word.
template <int V4>
__device__ __forceinline__ void sts_tile(uint32_t buf, int tid, unsigned tag) {
#pragma unroll
  for (int j = 0; j < V4; ++j) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(buf + (j * 128 + tid) * 16), "r"(tag),
                 "r"(tag ^ tid), "r"(j), "r"(tid)
                 : "memory");
  }
}

template <int V4>
__device__ __forceinline__ unsigned lds_tile(uint32_t buf, int tid) {
  unsigned acc = 0;
#pragma unroll
  for (int j = 0; j < V4; ++j) {
    unsigned a, b, c, e;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(e)
                 : "r"(buf + (j * 128 + tid) * 16)
                 : "memory");
    acc ^= a + b + c + e;
  }
  return acc;
}

// ------------------------------------------------------------------------------------------------ barriers
// Two warp groups ping-pong. Warp group 0 writes BYTES from registers to SMEM and signals; warp group 1 waits,
// reads the BYTES into registers and signals back. One round trip = write + signal + read + signal.
// MODE 0: named barriers (bar.arrive / bar.sync, 256 threads); MODE 1: mbarriers, one elected thread
// arrives after a warp-group bar.sync (the Triton/CUTLASS pattern); MODE 2: mbarriers, all 128 threads
// arrive (count 128); MODE 3: __syncthreads() only (bar.sync 0 over 256 threads, BYTES ignored).
template <int BYTES, int MODE>
__global__ void __launch_bounds__(256, 1) k_pingpong(int iters, int warm, unsigned long long* out, unsigned* sink) {
  constexpr int V4 = BYTES / (16 * 128);  // 16-byte vectors per thread
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align1024(smem_raw);
  __shared__ uint64_t full, empty;
  const int tid = threadIdx.x & 127;
  const int wg = threadIdx.x >> 7;
  const uint32_t buf = saddr(smem);
  if (threadIdx.x == 0) {
    const uint32_t count = MODE == 2 ? 128 : 1;
    mbar_init(&full, count);
    mbar_init(&empty, count);
    mbar_fence_init();
  }
  __syncthreads();
  unsigned acc = 0;
  unsigned long long t0 = 0;
  if (MODE == 3) {
    for (int i = 0; i < iters + warm; ++i) {
      if (i == warm) t0 = clk();
      __syncthreads();
    }
  } else if (wg == 0) {
    for (int i = 0; i < iters + warm; ++i) {
      if (i == warm) t0 = clk();
      sts_tile<V4>(buf, tid, i);
      if (MODE == 0) {
        named_arrive(1, 256);
        named_sync(2, 256);
      } else {
        if (MODE == 1) {
          named_sync(3, 128);
          if (tid == 0) mbar_arrive(&full);
        } else {
          mbar_arrive(&full);
        }
        mbar_wait(&empty, i & 1);
      }
    }
  } else {
    for (int i = 0; i < iters + warm; ++i) {
      if (MODE == 0) {
        named_sync(1, 256);
      } else {
        mbar_wait(&full, i & 1);
      }
      acc ^= lds_tile<V4>(buf, tid);
      if (MODE == 0) {
        named_arrive(2, 256);
      } else if (MODE == 1) {
        named_sync(4, 128);
        if (tid == 0) mbar_arrive(&empty);
      } else {
        mbar_arrive(&empty);
      }
    }
  }
  const unsigned long long t1 = clk();
  if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
  if (acc == 0xDEADBEEFu) *sink = acc;
}

// ------------------------------------------------------------------------------------------------ divergence
// One warp; lane l takes path l % K of K structurally distinct paths (different constants, so the compiler
// cannot merge them), each a loop of `reps` x 32 dependent FFMAs. Divergent paths run one after the other, so
// the warp's time should grow as K x one path (seed 003: T(k) ~ s k). MASKED computes one path on every lane
// and keeps the result on the lanes with l % K == 0 (a predicated select): no serialization.
template <int P>
__device__ __forceinline__ float ffma_chain(float x, int reps) {
  constexpr float a = 1.0f - (P + 1) * 1.0e-6f;
  constexpr float b = (P + 1) * 1.0e-7f;
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int j = 0; j < 32; ++j) x = fmaf(x, a, b);
  }
  return x;
}

template <int P, int K>
__device__ __forceinline__ float dispatch(int path, float x, int reps) {
  if constexpr (P == K) {
    return x;
  } else {
    if (path == P) return ffma_chain<P>(x, reps);
    return dispatch<P + 1, K>(path, x, reps);
  }
}

template <int K, int MASKED>
__global__ void k_diverge(int reps, unsigned long long* out, float* sink) {
  const int lane = threadIdx.x & 31;
  float x = 1.0f + lane * 1.0e-3f;
  __syncwarp();
  const unsigned long long t0 = clk();
  if (MASKED) {
    const float y = ffma_chain<0>(x, reps);
    x = (lane % K == 0) ? y : x;
  } else {
    x = dispatch<0, K>(lane % K, x, reps);
  }
  __syncwarp();
  const unsigned long long t1 = clk();
  if (x == 12345.0f) *sink = x;
  if (threadIdx.x == 0) *out = t1 - t0;
}

// ------------------------------------------------------------------------------------------------ host
static int num_sms() {
  int dev = 0, n = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

static std::string json_u64_list(const std::vector<unsigned long long>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Per-SM busy span: max end - min start over the CTAs that ran on each SM (clock64 is per SM).
static std::vector<unsigned long long> per_sm_span(const std::vector<unsigned long long>& cyc,
                                                   const std::vector<unsigned>& sm, int nsm) {
  std::vector<unsigned long long> lo(nsm, ~0ull), hi(nsm, 0);
  for (size_t b = 0; b < sm.size(); ++b) {
    const unsigned s = sm[b];
    if (s >= static_cast<unsigned>(nsm)) continue;
    lo[s] = std::min(lo[s], cyc[2 * b]);
    hi[s] = std::max(hi[s], cyc[2 * b + 1]);
  }
  std::vector<unsigned long long> out;
  for (int s = 0; s < nsm; ++s)
    if (hi[s] > 0) out.push_back(hi[s] - lo[s]);
  return out;
}

template <typename K>
static void run_timed(K kernel, int grid, int block, int smem, std::vector<unsigned long long>& cyc,
                      std::vector<unsigned>& sm, float& ms, const std::function<void(unsigned long long*, unsigned*)>& launch) {
  (void)kernel;
  (void)block;
  (void)smem;
  unsigned long long* d_cyc;
  unsigned* d_sm;
  CK(cudaMalloc(&d_cyc, sizeof(unsigned long long) * 2 * grid));
  CK(cudaMalloc(&d_sm, sizeof(unsigned) * grid));
  launch(d_cyc, d_sm);  // warm-up
  CK_LAUNCH();
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  launch(d_cyc, d_sm);
  CK(cudaEventRecord(e1));
  CK_LAUNCH();
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cyc.resize(2 * grid);
  sm.resize(grid);
  CK(cudaMemcpy(cyc.data(), d_cyc, sizeof(unsigned long long) * 2 * grid, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sm.data(), d_sm, sizeof(unsigned) * grid, cudaMemcpyDeviceToHost));
  CK(cudaFree(d_cyc));
  CK(cudaFree(d_sm));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

template <int NACC, int WAIT_EACH>
static void wgmma_case(const char* name, int grid, int nwg, int tiles, float* sink, bool first) {
  const int smem = 32768 + nwg * NACC * 16384 + 1024;
  auto kern = k_wgmma<NACC, WAIT_EACH>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<unsigned long long> cyc;
  std::vector<unsigned> sm;
  float ms = 0;
  run_timed(kern, grid, nwg * 128, smem, cyc, sm, ms, [&](unsigned long long* c, unsigned* s) {
    kern<<<grid, nwg * 128, smem>>>(tiles, c, s, sink);
  });
  std::vector<unsigned long long> spans;
  for (int b = 0; b < grid; ++b) spans.push_back(cyc[2 * b + 1] - cyc[2 * b]);
  const double flops_per_cta = 2.0 * 64 * 128 * 128 * NACC * nwg * static_cast<double>(tiles);
  std::sort(spans.begin(), spans.end());
  const unsigned long long med = spans[spans.size() / 2];
  printf("%s{\"name\":\"%s\",\"grid\":%d,\"warpgroups\":%d,\"acc_per_wg\":%d,\"wait_each_tile\":%d,\"tiles\":%d,"
         "\"tile\":\"%dx128x128 per warp group\",\"flop_per_cta\":%.0f,\"cycles_per_cta\":%s,\"event_ms\":%.6f,"
         "\"median_cycles_per_tile_step\":%.3f,\"flop_per_cycle_per_sm\":%.3f,\"tflops_event\":%.3f}",
         first ? "" : ",", name, grid, nwg, NACC, WAIT_EACH, tiles, 64 * NACC, flops_per_cta, json_u64_list(spans).c_str(),
         ms, static_cast<double>(med) / tiles, flops_per_cta / static_cast<double>(med),
         flops_per_cta * grid / (ms * 1e-3) / 1e12);
}

// Serialized wgmma (WAIT_EACH = 2): one CTA, so the cycles per instruction are its latency alone.
static void test_wgmma_serial() {
  float* sink;
  CK(cudaMalloc(&sink, sizeof(float)));
  printf("{\"test\":\"wgmma_serial\",\"sms\":%d,\"instructions_per_tile_step\":\"8 x acc_per_wg\",\"cases\":[",
         num_sms());
  wgmma_case<1, 2>("wg1_m64_serial_one_cta", 1, 1, 1000, sink, true);
  wgmma_case<2, 2>("wg1_m128_serial_one_cta", 1, 1, 500, sink, false);
  wgmma_case<1, 2>("wg2_m64_each_serial_one_cta", 1, 2, 1000, sink, false);
  printf("]}\n");
  CK(cudaFree(sink));
}

static void test_wgmma() {
  const int nsm = num_sms();
  float* sink;
  CK(cudaMalloc(&sink, sizeof(float)));
  printf("{\"test\":\"wgmma\",\"sms\":%d,\"cases\":[", nsm);
  wgmma_case<1, 0>("wg1_m64_all_sms", nsm, 1, 4000, sink, true);
  wgmma_case<1, 0>("wg2_m64_each_all_sms", nsm, 2, 4000, sink, false);
  wgmma_case<1, 0>("wg1_m64_one_cta", 1, 1, 4000, sink, false);
  wgmma_case<1, 0>("wg2_m64_each_one_cta", 1, 2, 4000, sink, false);
  wgmma_case<1, 1>("wg1_m64_wait_each_one_cta", 1, 1, 2000, sink, false);
  wgmma_case<1, 1>("wg2_m64_each_wait_each_one_cta", 1, 2, 2000, sink, false);
  wgmma_case<2, 1>("wg1_m128_wait_each_one_cta", 1, 1, 1000, sink, false);
  printf("]}\n");
  CK(cudaFree(sink));
}

template <int FTZ>
static void mufu_case(const char* name, int ctas_per_sm, int block, int iters, float* sink, bool first) {
  const int nsm = num_sms();
  const int grid = nsm * ctas_per_sm;
  std::vector<unsigned long long> cyc;
  std::vector<unsigned> sm;
  float ms = 0;
  auto kern = k_mufu<FTZ>;
  run_timed(kern, grid, block, 0, cyc, sm, ms, [&](unsigned long long* c, unsigned* s) {
    kern<<<grid, block>>>(iters, c, s, sink);
  });
  std::vector<unsigned long long> spans = per_sm_span(cyc, sm, nsm);
  std::sort(spans.begin(), spans.end());
  const unsigned long long med = spans[spans.size() / 2];
  // ex2 per SM: threads per SM x iterations x 32 (4 x 8 chains)
  const double ops_per_sm = static_cast<double>(ctas_per_sm) * block * iters * 32.0;
  printf("%s{\"name\":\"%s\",\"ftz\":%d,\"ctas_per_sm\":%d,\"block\":%d,\"iters\":%d,\"ex2_per_sm\":%.0f,"
         "\"median_sm_cycles\":%llu,\"min_sm_cycles\":%llu,\"max_sm_cycles\":%llu,\"ex2_per_cycle_per_sm\":%.4f,"
         "\"event_ms\":%.6f,\"gex2_per_s_event\":%.3f}",
         first ? "" : ",", name, FTZ, ctas_per_sm, block, iters, ops_per_sm, med, spans.front(), spans.back(),
         ops_per_sm / static_cast<double>(med), ms, ops_per_sm * nsm / (ms * 1e-3) / 1e9);
}

static void test_mufu() {
  float* sink;
  CK(cudaMalloc(&sink, sizeof(float)));
  printf("{\"test\":\"mufu\",\"cases\":[");
  mufu_case<1>("ex2_ftz_2048_threads_per_sm", 2, 1024, 2000, sink, true);
  mufu_case<0>("ex2_2048_threads_per_sm", 2, 1024, 2000, sink, false);
  mufu_case<1>("ex2_ftz_256_threads_per_sm", 1, 256, 4000, sink, false);
  mufu_case<1>("ex2_ftz_128_threads_per_sm", 1, 128, 4000, sink, false);
  printf("]}\n");
  CK(cudaFree(sink));
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static void tma_case(const char* name, const CUtensorMap& map, int ntiles, int grid, int boxes, int depth,
                     int nloads, int mode, bool first) {
  const int smem = depth * boxes * 16384 + 1024;
  CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned* d_lat;
  unsigned long long* d_span;
  unsigned* d_sm;
  CK(cudaMalloc(&d_lat, sizeof(unsigned) * grid * nloads));
  CK(cudaMalloc(&d_span, sizeof(unsigned long long) * grid));
  CK(cudaMalloc(&d_sm, sizeof(unsigned) * grid));
  k_tma<<<grid, 128, smem>>>(map, boxes, depth, nloads, mode, ntiles, d_lat, d_span, d_sm);  // warm-up
  CK_LAUNCH();
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  k_tma<<<grid, 128, smem>>>(map, boxes, depth, nloads, mode, ntiles, d_lat, d_span, d_sm);
  CK(cudaEventRecord(e1));
  CK_LAUNCH();
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<unsigned> lat(static_cast<size_t>(grid) * nloads);
  std::vector<unsigned long long> span(grid);
  CK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * lat.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(span.data(), d_span, sizeof(unsigned long long) * grid, cudaMemcpyDeviceToHost));
  // Drop each CTA's first 4 loads (cold descriptor and TLB) from the distribution.
  std::vector<unsigned> kept;
  for (int b = 0; b < grid; ++b)
    for (int i = 4; i < nloads; ++i) kept.push_back(lat[static_cast<size_t>(b) * nloads + i]);
  std::vector<unsigned> sorted = kept;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) { return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()))]; };
  double mean = 0;
  for (unsigned v : sorted) mean += v;
  mean /= sorted.size();
  std::sort(span.begin(), span.end());
  const double bytes_per_cta = static_cast<double>(nloads) * boxes * 16384;
  const unsigned long long span_med = span[span.size() / 2];
  // A sample of at most 4000 raw latencies (every k-th of the kept values, in issue order).
  std::string sample = "[";
  const size_t stride = std::max<size_t>(1, kept.size() / 4000);
  for (size_t i = 0, n = 0; i < kept.size(); i += stride, ++n) sample += (n ? "," : "") + std::to_string(kept[i]);
  sample += "]";
  printf("%s{\"name\":\"%s\",\"grid\":%d,\"bytes_per_load\":%d,\"boxes\":%d,\"depth\":%d,\"loads_per_cta\":%d,"
         "\"source\":\"%s\",\"samples\":%zu,\"min\":%u,\"p10\":%u,\"median\":%u,\"mean\":%.1f,\"p90\":%u,\"p99\":%u,"
         "\"max\":%u,\"median_cta_span_cycles\":%llu,\"bytes_per_cycle_per_sm\":%.3f,\"event_ms\":%.6f,"
         "\"gb_per_s_event\":%.2f,\"latency_sample\":%s}",
         first ? "" : ",", name, grid, boxes * 16384, boxes, depth, nloads, mode == 0 ? "hbm_random_1GiB" : "l2_reused",
         sorted.size(), sorted.front(), pct(0.10), pct(0.50), mean, pct(0.90), pct(0.99), sorted.back(), span_med,
         bytes_per_cta / static_cast<double>(span_med), ms, bytes_per_cta * grid / (ms * 1e-3) / 1e9, sample.c_str());
  CK(cudaFree(d_lat));
  CK(cudaFree(d_span));
  CK(cudaFree(d_sm));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

static void test_tma() {
  const int nsm = num_sms();
  const size_t cols = 128, rows = (size_t(1) << 30) / (cols * 2);  // 1 GiB of fp16 [rows, 128]
  void* data;
  CK(cudaMalloc(&data, rows * cols * 2));
  CK(cudaMemset(data, 0x3C, rows * cols * 2));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (fn == nullptr || q != cudaDriverEntryPointSuccess) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    exit(3);
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * 2};
  const cuuint32_t box[2] = {64, 128};
  const cuuint32_t estr[2] = {1, 1};
  CUresult r = reinterpret_cast<EncodeTiled>(fn)(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, data, dims, strides, box,
                                                 estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    exit(3);
  }
  const int ntiles = static_cast<int>(rows / 128);
  printf("{\"test\":\"tma\",\"sms\":%d,\"cases\":[", nsm);
  tma_case("16KB_idle_hbm", map, ntiles, 1, 1, 1, 2000, 0, true);
  tma_case("32KB_idle_hbm", map, ntiles, 1, 2, 1, 2000, 0, false);
  tma_case("16KB_idle_l2", map, ntiles, 1, 1, 1, 2000, 1, false);
  tma_case("32KB_idle_l2", map, ntiles, 1, 2, 1, 2000, 1, false);
  tma_case("16KB_all_sms_hbm", map, ntiles, nsm, 1, 1, 500, 0, false);
  tma_case("32KB_all_sms_hbm", map, ntiles, nsm, 2, 1, 500, 0, false);
  tma_case("32KB_all_sms_l2", map, ntiles, nsm, 2, 1, 500, 1, false);
  tma_case("32KB_all_sms_hbm_depth4", map, ntiles, nsm, 2, 4, 500, 0, false);
  tma_case("32KB_all_sms_l2_depth4", map, ntiles, nsm, 2, 4, 500, 1, false);
  tma_case("32KB_one_cta_l2_depth4", map, ntiles, 1, 2, 4, 2000, 1, false);
  tma_case("32KB_one_cta_hbm_depth4", map, ntiles, 1, 2, 4, 2000, 0, false);
  printf("]}\n");
  CK(cudaFree(data));
}

template <int BYTES, int MODE>
static void pingpong_case(const char* kind, int iters, unsigned* sink, bool first) {
  auto kern = k_pingpong<BYTES, MODE>;
  const int smem = (BYTES > 0 ? BYTES : 16) + 1024;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned long long* d_out;
  CK(cudaMalloc(&d_out, sizeof(unsigned long long)));
  std::vector<unsigned long long> rts;
  for (int rep = 0; rep < 5; ++rep) {
    kern<<<1, 256, smem>>>(iters, 200, d_out, sink);
    CK_LAUNCH();
    unsigned long long total = 0;
    CK(cudaMemcpy(&total, d_out, sizeof(total), cudaMemcpyDeviceToHost));
    rts.push_back(total);
  }
  std::sort(rts.begin(), rts.end());
  printf("%s{\"barrier\":\"%s\",\"mode\":%d,\"bytes\":%d,\"iters\":%d,\"total_cycles_per_rep\":%s,"
         "\"median_round_trip_cycles\":%.3f}",
         first ? "" : ",", kind, MODE, BYTES, iters, json_u64_list(rts).c_str(),
         static_cast<double>(rts[rts.size() / 2]) / iters);
  CK(cudaFree(d_out));
}

static void test_sync() {
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  const int it = 4000;
  printf("{\"test\":\"sync\",\"cases\":[");
  pingpong_case<0, 3>("syncthreads_256", it, sink, true);
  pingpong_case<0, 0>("named", it, sink, false);
  pingpong_case<0, 1>("mbarrier_elected", it, sink, false);
  pingpong_case<0, 2>("mbarrier_all128", it, sink, false);
  pingpong_case<2048, 0>("named", it, sink, false);
  pingpong_case<4096, 0>("named", it, sink, false);
  pingpong_case<8192, 0>("named", it, sink, false);
  pingpong_case<16384, 0>("named", it, sink, false);
  pingpong_case<32768, 0>("named", it, sink, false);
  pingpong_case<2048, 1>("mbarrier_elected", it, sink, false);
  pingpong_case<8192, 1>("mbarrier_elected", it, sink, false);
  pingpong_case<32768, 1>("mbarrier_elected", it, sink, false);
  pingpong_case<2048, 2>("mbarrier_all128", it, sink, false);
  pingpong_case<4096, 2>("mbarrier_all128", it, sink, false);
  pingpong_case<8192, 2>("mbarrier_all128", it, sink, false);
  pingpong_case<16384, 2>("mbarrier_all128", it, sink, false);
  pingpong_case<32768, 2>("mbarrier_all128", it, sink, false);
  printf("]}\n");
  CK(cudaFree(sink));
}

template <int K, int MASKED>
static void diverge_case(int reps, float* sink, bool first) {
  unsigned long long* d_out;
  CK(cudaMalloc(&d_out, sizeof(unsigned long long)));
  std::vector<unsigned long long> v;
  for (int rep = 0; rep < 6; ++rep) {
    k_diverge<K, MASKED><<<1, 32>>>(reps, d_out, sink);
    CK_LAUNCH();
    unsigned long long c = 0;
    CK(cudaMemcpy(&c, d_out, sizeof(c), cudaMemcpyDeviceToHost));
    if (rep > 0) v.push_back(c);  // the first launch warms the instruction cache
  }
  std::sort(v.begin(), v.end());
  printf("%s{\"paths\":%d,\"masked\":%d,\"ffma_per_path\":%d,\"cycles\":%s,\"median_cycles\":%llu}", first ? "" : ",",
         K, MASKED, reps * 32, json_u64_list(v).c_str(), v[v.size() / 2]);
  CK(cudaFree(d_out));
}

static void test_diverge() {
  float* sink;
  CK(cudaMalloc(&sink, sizeof(float)));
  const int reps = 64;
  printf("{\"test\":\"diverge\",\"cases\":[");
  diverge_case<1, 0>(reps, sink, true);
  diverge_case<2, 0>(reps, sink, false);
  diverge_case<3, 0>(reps, sink, false);
  diverge_case<4, 0>(reps, sink, false);
  diverge_case<8, 0>(reps, sink, false);
  diverge_case<16, 0>(reps, sink, false);
  diverge_case<32, 0>(reps, sink, false);
  diverge_case<2, 1>(reps, sink, false);
  diverge_case<32, 1>(reps, sink, false);
  printf("]}\n");
  CK(cudaFree(sink));
}

// ------------------------------------------------------------------------------------------------ contention
// Do a hand-off between warp groups and another warp group's shared-memory traffic share the SMEM ports?
// Warp groups 0 and 1 ping-pong BYTES through SMEM with named barriers (as k_pingpong MODE 0) for `iters`
// round trips; warp group 2 streams STS + LDS over its own 16 KB region. MODE 0: the hand-off alone;
// MODE 1: both at once (warp group 2 runs until warp group 0 is done and reports its bytes and cycles);
// MODE 2: warp group 2 alone, for `iters` passes. If the ports are one shared resource, the round trip
// grows under traffic by about the time the traffic takes from it (twill reserves the hand-off's bytes on
// the `smem` unit, docs/model.md §2); if not, it stays put.
template <int BYTES, int MODE>
__global__ void __launch_bounds__(384, 1) k_contend(int iters, unsigned long long* out, unsigned* sink) {
  constexpr int V4 = BYTES / (16 * 128);
  constexpr int NOISE_V4 = 16384 / (16 * 128);
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align1024(smem_raw);
  __shared__ volatile int done;
  const int tid = threadIdx.x & 127;
  const int wg = threadIdx.x >> 7;
  const uint32_t buf = saddr(smem);
  const uint32_t noise = saddr(smem + (BYTES > 0 ? BYTES : 0));
  if (threadIdx.x == 0) done = 0;
  __syncthreads();
  unsigned acc = 0;
  const unsigned long long t0 = clk();
  if (wg == 0 && MODE != 2) {
    for (int i = 0; i < iters; ++i) {
      sts_tile<V4>(buf, tid, i);
      named_arrive(1, 256);
      named_sync(2, 256);
    }
    if (tid == 0) {
      out[0] = clk() - t0;
      done = 1;
    }
  } else if (wg == 1 && MODE != 2) {
    for (int i = 0; i < iters; ++i) {
      named_sync(1, 256);
      acc ^= lds_tile<V4>(buf, tid);
      named_arrive(2, 256);
    }
  } else if (wg == 2 && MODE != 0) {
    unsigned long long passes = 0;
    while (MODE == 2 ? passes < static_cast<unsigned long long>(iters) : done == 0) {
      sts_tile<NOISE_V4>(noise, tid, static_cast<unsigned>(passes));
      acc ^= lds_tile<NOISE_V4>(noise, tid);
      ++passes;
    }
    if (tid == 0) {
      out[1] = clk() - t0;
      out[2] = passes * 2 * 16384;  // bytes through the ports (written and read)
    }
  }
  if (acc == 0xDEADBEEFu) *sink = acc;
}

template <int BYTES>
static void contend_case(int iters, unsigned* sink, bool first) {
  unsigned long long* d_out;
  CK(cudaMalloc(&d_out, 3 * sizeof(unsigned long long)));
  const int smem = BYTES + 16384 + 1024;
  double med[3][3];
  auto run = [&](auto kern, int mode, int n) {
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    std::vector<unsigned long long> a, b, c;
    for (int rep = 0; rep < 5; ++rep) {
      CK(cudaMemset(d_out, 0, 3 * sizeof(unsigned long long)));
      kern<<<1, 384, smem>>>(n, d_out, sink);
      CK_LAUNCH();
      unsigned long long h[3];
      CK(cudaMemcpy(h, d_out, sizeof(h), cudaMemcpyDeviceToHost));
      a.push_back(h[0]);
      b.push_back(h[1]);
      c.push_back(h[2]);
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::sort(c.begin(), c.end());
    med[mode][0] = static_cast<double>(a[2]);
    med[mode][1] = static_cast<double>(b[2]);
    med[mode][2] = static_cast<double>(c[2]);
  };
  run(k_contend<BYTES, 0>, 0, iters);
  run(k_contend<BYTES, 1>, 1, iters);
  run(k_contend<BYTES, 2>, 2, iters);
  printf("%s{\"bytes\":%d,\"iters\":%d,\"round_trip_alone\":%.3f,\"round_trip_with_traffic\":%.3f,"
         "\"traffic_bytes_per_cycle_alone\":%.3f,\"traffic_bytes_per_cycle_during_handoffs\":%.3f,"
         "\"handoff_bytes_per_cycle\":%.3f}",
         first ? "" : ",", BYTES, iters, med[0][0] / iters, med[1][0] / iters, med[2][2] / med[2][1],
         med[1][2] / med[1][1], 2.0 * BYTES * iters / med[0][0]);
  CK(cudaFree(d_out));
}

static void test_contend() {
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  printf("{\"test\":\"contend\",\"cases\":[");
  contend_case<8192>(2000, sink, true);
  contend_case<16384>(2000, sink, false);
  contend_case<32768>(2000, sink, false);
  printf("]}\n");
  CK(cudaFree(sink));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s wgmma|wgmma_serial|mufu|tma|sync|diverge|contend\n", argv[0]);
    return 1;
  }
  const std::string t = argv[1];
  if (t == "wgmma") {
    test_wgmma();
  } else if (t == "wgmma_serial") {
    test_wgmma_serial();
  } else if (t == "mufu") {
    test_mufu();
  } else if (t == "tma") {
    test_tma();
  } else if (t == "sync") {
    test_sync();
  } else if (t == "diverge") {
    test_diverge();
  } else if (t == "contend") {
    test_contend();
  } else {
    fprintf(stderr, "unknown test %s\n", t.c_str());
    return 1;
  }
  fflush(stdout);
  return 0;
}
