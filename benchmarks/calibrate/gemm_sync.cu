// Hopper (sm_90a) microbenchmark of Triton 3.6's GEMM main loop, one cause at a time (issue 25).
//
// Triton's `matmul` loop (examples/gemm.py, SASS of the CPU compile) per trip: BAR.SYNC; mbarrier wait for
// the stage's TMA; WARPGROUP.ARRIVE; the trip's HGMMAs; BAR.SYNC; arrive.expect_tx; BAR.SYNC; TMA loads of
// the trip num_stages - 1 ahead; BAR.SYNC. At 4 warps the HGMMAs are one warp group's 8 x 64x128x16 (two
// accumulators) and one `WARPGROUP.DEPBAR.LE gsb0, 0x1` (the previous trip's wait: pipelined); at 8 warps
// ptxas serializes them (C7515): each warp group issues 4 HGMMA, each followed by `DEPBAR.LE gsb0, 0x0`.
// This kernel runs that loop with each element switchable, so the cost of each can be measured:
//
//   NWG      warp groups (4 warps each) issuing wgmma
//   N        wgmma instruction N (128 or 256; the B tile is N rows x 64 K)
//   ACC      64-row accumulators per warp group (A tile rows = NWG x ACC x 64)
//   SERIAL   1: commit + wait_group 0 after every wgmma (ptxas's serialized pipeline); 0: the trip's wgmmas
//            back to back, then one commit and wait_group 0 (a wgmma group kept in flight across the loop's
//            back-edge, Triton's 4-warp wait_group 1, makes nvcc's code serialize: ptxas C7514, so the
//            4-warp pipeline itself is timed as Triton's own kernel by run_gemm_sync.py)
//   SYNCS    CTA-wide bar.sync per trip, 0..4, at Triton's places
//   LOADS    1: TMA loads of the trip's A and B tiles from an L2-resident matrix over `stages` buffers
//            (issued num_stages - 1 trips ahead, as Triton does); 0: no loads, operands stay in place
//
// Build:  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o gemm_sync gemm_sync.cu
// Run:    ./gemm_sync        (one JSON object; run_gemm_sync.py builds, runs and keeps it)
//
// Timings are %clock64 differences on each CTA's own SM; cycles per trip = the CTA's span / trips, the
// median over CTAs. CTAs per SM is the grid over the SMs (each case checks with %smid how many ran on
// each SM and that the occupancy allows them at once).

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "wgmma_m64n128k16.cuh"
#include "wgmma_m64n256k16.cuh"

#define CK(x)                                                                                            \
  do {                                                                                                   \
    cudaError_t err_ = (x);                                                                              \
    if (err_ != cudaSuccess) {                                                                           \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(err_)); \
      exit(2);                                                                                           \
    }                                                                                                    \
  } while (0)

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
__device__ __forceinline__ uint32_t saddr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count) : "memory");
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
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(saddr(bar))
      : "memory");
}
__device__ __forceinline__ void cta_sync() { asm volatile("bar.sync 0;" ::: "memory"); }
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;
  d |= static_cast<uint64_t>(1024 >> 4) << 32;  // 8 rows x 128 B
  d |= static_cast<uint64_t>(1) << 62;          // 128-byte swizzle
  return d;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int W>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(W) : "memory");
}
template <int N>
__device__ __forceinline__ void mma(float (&d)[N / 2], uint64_t da, uint64_t db) {
  if constexpr (N == 128) {
    wgmma_m64n128k16_ss(d, da, db);
  } else {
    wgmma_m64n256k16_ss(d, da, db);
  }
}
template <int N>
__device__ __forceinline__ void pin(float (&d)[N / 2]) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

constexpr int ROWS = 4096;  // the L2-resident operand matrix: fp16 [ROWS, COLS] = 4 MiB
constexpr int COLS = 512;
constexpr int BOX_ROWS = 64;  // each TMA box: 64 rows x 64 fp16 (128 B) = 8 KB, 128-byte swizzle

template <int NWG, int N, int ACC, int SERIAL, int SYNCS, int LOADS>
__global__ void __launch_bounds__(NWG * 128) k_loop(const __grid_constant__ CUtensorMap map, int trips, int stages,
                                                    unsigned long long* cyc, unsigned* sm, float* sink) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  constexpr int A_BYTES = NWG * ACC * 64 * 128;
  constexpr int B_BYTES = N * 128;
  constexpr int STAGE = A_BYTES + B_BYTES;
  constexpr int BOXES = STAGE / (BOX_ROWS * 128);
  __shared__ uint64_t full[4];  // up to 4 stages
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // Operand tiles with finite fp16 data (the loads overwrite them when LOADS).
  __half* h = reinterpret_cast<__half*>(smem);
  for (int i = threadIdx.x; i < stages * STAGE / 2; i += blockDim.x) h[i] = __float2half(((i * 37) & 255) / 256.0f);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t base = saddr(smem);
  auto issue = [&](int trip) {  // one thread: the stage's loads, as Triton's elected thread does
    const int s = trip % stages;
    mbar_arrive_expect_tx(&full[s], STAGE);
    for (int b = 0; b < BOXES; ++b) {
      const int row = static_cast<int>((blockIdx.x * 13u + trip * 3u + b * 7u) % (ROWS / BOX_ROWS)) * BOX_ROWS;
      tma_load_2d(base + s * STAGE + b * BOX_ROWS * 128, &map, (trip % (COLS / 64)) * 64, row, &full[s]);
    }
  };
  if (LOADS && threadIdx.x == 0)
    for (int t = 0; t < stages - 1 && t < trips; ++t) issue(t);
  float d[ACC][N / 2];
#pragma unroll
  for (int a = 0; a < ACC; ++a)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[a][i] = 0.0f;
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int t = 0; t < trips; ++t) {
    const int s = t % stages;
    if (SYNCS >= 1) cta_sync();
    if (LOADS) mbar_wait(&full[s], (t / stages) & 1);
    const uint32_t a0 = base + s * STAGE + wg * ACC * 8192;
    const uint32_t b0 = base + s * STAGE + A_BYTES;
#pragma unroll
    for (int a = 0; a < ACC; ++a) pin<N>(d[a]);
    wgmma_fence();
#pragma unroll
    for (int a = 0; a < ACC; ++a) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        mma<N>(d[a], wgmma_desc(a0 + a * 8192 + k * 32), wgmma_desc(b0 + k * 32));
        if (SERIAL) {
          wgmma_commit();
          pin<N>(d[a]);
          wgmma_wait<0>();
          wgmma_fence();
        }
      }
    }
    if (!SERIAL) {
      wgmma_commit();
#pragma unroll
      for (int a = 0; a < ACC; ++a) pin<N>(d[a]);
      wgmma_wait<0>();
    }
    if (SYNCS >= 2) cta_sync();
    if (SYNCS >= 3) cta_sync();
    if (LOADS && threadIdx.x == 0 && t + stages - 1 < trips) issue(t + stages - 1);
    if (SYNCS >= 4) cta_sync();
  }
  wgmma_wait<0>();
  __syncthreads();
  const unsigned long long t1 = clk();
  float acc = 0.0f;
#pragma unroll
  for (int a = 0; a < ACC; ++a)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc += d[a][i];
  if (acc == 1234.5f) *sink = acc;
  if (threadIdx.x == 0) {
    cyc[2 * blockIdx.x] = t0;
    cyc[2 * blockIdx.x + 1] = t1;
    sm[blockIdx.x] = smid();
  }
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static CUtensorMap g_map;
static float* g_sink;
static int g_nsm;
static bool g_first = true;

template <int NWG, int N, int ACC, int SERIAL, int SYNCS, int LOADS>
static void run_case(const char* name, int ctas_per_sm, int stages, int trips, bool one_cta = false) {
  auto kern = k_loop<NWG, N, ACC, SERIAL, SYNCS, LOADS>;
  constexpr int STAGE = NWG * ACC * 64 * 128 + N * 128;
  const int threads = NWG * 128;
  const int dyn = stages * STAGE + 1024;  // the stages' buffers and the 1024-byte alignment
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn);
  int occ = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, threads, dyn);
  const int grid = one_cta ? 1 : g_nsm * ctas_per_sm;
  printf("%s{\"name\":\"%s\",\"warp_groups\":%d,\"instr_n\":%d,\"acc_per_wg\":%d,\"serial\":%d,\"syncs\":%d,"
         "\"loads\":%d,\"stages\":%d,\"ctas_per_sm\":%d,\"grid\":%d,\"trips\":%d,\"stage_bytes\":%d,"
         "\"tc_cycles_per_trip\":%d,\"smem_per_cta\":%d,\"occupancy\":%d",
         g_first ? "" : ",", name, NWG, N, ACC, SERIAL, SYNCS, LOADS, stages, one_cta ? 1 : ctas_per_sm, grid, trips,
         STAGE, NWG * ACC * 4 * (N / 2), dyn, occ);
  g_first = false;
  if (e != cudaSuccess || occ < (one_cta ? 1 : ctas_per_sm)) {
    printf(",\"error\":\"%s\"}", e != cudaSuccess ? cudaGetErrorString(e) : "occupancy below ctas_per_sm");
    cudaGetLastError();
    fflush(stdout);
    return;
  }
  unsigned long long* d_cyc;
  unsigned* d_sm;
  CK(cudaMalloc(&d_cyc, sizeof(unsigned long long) * 2 * grid));
  CK(cudaMalloc(&d_sm, sizeof(unsigned) * grid));
  kern<<<grid, threads, dyn>>>(g_map, std::min(trips, 50), stages, d_cyc, d_sm, g_sink);  // warm-up
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  kern<<<grid, threads, dyn>>>(g_map, trips, stages, d_cyc, d_sm, g_sink);
  CK(cudaEventRecord(e1));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<unsigned long long> cyc(2 * grid);
  std::vector<unsigned> sm(grid);
  CK(cudaMemcpy(cyc.data(), d_cyc, sizeof(unsigned long long) * 2 * grid, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sm.data(), d_sm, sizeof(unsigned) * grid, cudaMemcpyDeviceToHost));
  CK(cudaFree(d_cyc));
  CK(cudaFree(d_sm));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::vector<double> per;
  std::map<unsigned, int> count;
  for (int b = 0; b < grid; ++b) {
    per.push_back(static_cast<double>(cyc[2 * b + 1] - cyc[2 * b]) / trips);
    count[sm[b]] += 1;
  }
  std::sort(per.begin(), per.end());
  int most = 0, least = 1 << 30;
  for (auto& kv : count) {
    most = std::max(most, kv.second);
    least = std::min(least, kv.second);
  }
  const double med = per[per.size() / 2];
  const double k = one_cta ? 1.0 : ctas_per_sm;
  const double clock_ghz = (per.back() * trips) / (ms * 1e6);
  printf(",\"cycles_per_trip\":{\"min\":%.1f,\"median\":%.1f,\"max\":%.1f},\"sms_used\":%zu,"
         "\"ctas_on_an_sm\":[%d,%d],\"event_ms\":%.4f,\"clock_ghz_from_slowest\":%.3f,"
         "\"tc_busy\":%.3f,\"load_bytes_per_cycle_per_sm\":%.2f}",
         per.front(), med, per.back(), count.size(), least, most, ms, clock_ghz,
         k * NWG * ACC * 4 * (N / 2) / med, LOADS ? k * STAGE / med : 0.0);
  fflush(stdout);
}

int main() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&g_nsm, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaMalloc(&g_sink, sizeof(float)));
  void* data;
  CK(cudaMalloc(&data, size_t(ROWS) * COLS * 2));
  CK(cudaMemset(data, 0x3C, size_t(ROWS) * COLS * 2));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (fn == nullptr || q != cudaDriverEntryPointSuccess) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 3;
  }
  const cuuint64_t dims[2] = {COLS, ROWS};
  const cuuint64_t strides[1] = {COLS * 2};
  const cuuint32_t box[2] = {64, BOX_ROWS};
  const cuuint32_t estr[2] = {1, 1};
  CUresult r = reinterpret_cast<EncodeTiled>(fn)(&g_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, data, dims, strides, box,
                                                 estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    return 3;
  }
  printf("{\"test\":\"gemm_sync\",\"sms\":%d,\"cases\":[", g_nsm);
  // --- (a) serialized wgmma, no loads: one warp group vs two, with and without the per-trip bar.sync
  //           <NWG, N, ACC, SERIAL, SYNCS, LOADS>
  run_case<1, 128, 1, 1, 0, 0>("ser_wg1_n128", 1, 2, 2000);
  run_case<2, 128, 1, 1, 0, 0>("ser_wg2_n128_nosync", 1, 2, 2000);
  run_case<2, 128, 1, 1, 1, 0>("ser_wg2_n128_sync1", 1, 2, 2000);
  run_case<2, 128, 1, 1, 4, 0>("ser_wg2_n128_sync4", 1, 2, 2000);
  run_case<1, 256, 1, 1, 0, 0>("ser_wg1_n256", 1, 2, 1000);
  run_case<2, 256, 1, 1, 0, 0>("ser_wg2_n256_nosync", 1, 2, 1000);
  run_case<2, 256, 1, 1, 4, 0>("ser_wg2_n256_sync4", 1, 2, 1000);
  run_case<2, 128, 2, 1, 4, 0>("ser_wg2_acc2_n128_sync4", 1, 2, 1000);
  run_case<2, 128, 1, 0, 4, 0>("pipe_wg2_n128_sync4", 1, 2, 2000);
  run_case<1, 128, 2, 0, 4, 0>("pipe_wg1_acc2_n128_sync4", 1, 2, 2000);
  run_case<1, 128, 2, 0, 4, 0>("pipe_wg1_acc2_n128_sync4_k2", 2, 2, 2000);
  run_case<2, 128, 1, 1, 4, 0>("ser_wg2_n128_sync4_k2", 2, 2, 2000);
  // --- (b) with TMA loads from L2: Triton's loops (8 warps serialized, 4 warps pipelined) and variants
  run_case<2, 128, 1, 1, 4, 1>("L_ser_wg2_n128_sync4_s4", 1, 4, 1000);
  run_case<2, 128, 1, 1, 4, 1>("L_ser_wg2_n128_sync4_s3", 1, 3, 1000);
  run_case<2, 128, 1, 1, 0, 1>("L_ser_wg2_n128_nosync_s3", 1, 3, 1000);
  run_case<2, 128, 1, 0, 4, 1>("L_pipe_wg2_n128_sync4_s3", 1, 3, 1000);
  run_case<2, 128, 1, 1, 4, 1>("L_ser_wg2_n128_sync4_s3_k2", 2, 3, 1000);
  run_case<2, 128, 1, 1, 4, 1>("L_ser_wg2_n128_sync4_s4_onecta", 1, 4, 1000, true);
  run_case<2, 256, 1, 1, 4, 1>("L_ser_wg2_n256_sync4_s3", 1, 3, 600);
  run_case<2, 256, 1, 1, 0, 1>("L_ser_wg2_n256_nosync_s3", 1, 3, 600);
  run_case<2, 256, 1, 0, 4, 1>("L_pipe_wg2_n256_sync4_s3", 1, 3, 600);
  run_case<2, 256, 1, 1, 4, 1>("L_ser_wg2_n256_sync4_s3_onecta", 1, 3, 600, true);
  run_case<2, 128, 2, 1, 4, 1>("L_ser_wg2_acc2_n128_sync4_s3", 1, 3, 600);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s2_k1", 1, 2, 1000);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s2_k2", 2, 2, 1000);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s2_k3", 3, 2, 1000);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s3_k1", 1, 3, 1000);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s3_k2", 2, 3, 1000);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s4_k1", 1, 4, 1000);
  run_case<1, 128, 2, 0, 4, 1>("L_pipe_wg1_acc2_n128_s3_onecta", 1, 3, 1000, true);
  run_case<1, 128, 1, 0, 4, 1>("L_pipe_wg1_n128_s3_k1", 1, 3, 1000);
  run_case<1, 128, 1, 0, 4, 1>("L_pipe_wg1_n128_s3_k2", 2, 3, 1000);
  run_case<1, 128, 1, 0, 4, 1>("L_pipe_wg1_n128_s3_k3", 3, 3, 1000);
  run_case<1, 128, 1, 0, 4, 1>("L_pipe_wg1_n128_s3_k4", 4, 3, 1000);
  run_case<1, 128, 2, 0, 4, 0>("pipe_wg1_acc2_n128_k3", 3, 2, 2000);
  printf("]}\n");
  return 0;
}
