// Dependent-chain latencies of the SASS instructions the generated Gluon FA kernels issue per loop trip
// (FFMA, FMNMX, MUFU.EX2, SHFL.BFLY, F2FP, LDS, BAR.SYNC, mbarrier try_wait / arrive), on one SM.
// Each test runs a chain of REPS dependent instructions in one warp (or the named barrier over 128 / 256
// threads) between two clock64 reads and prints JSON: cycles per instruction = (t1 - t0) / REPS.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o latency latency.cu
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define REPS 1024
#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); return 1; } } while (0)

__device__ __forceinline__ long long clk() { long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory"); return t; }

__global__ void k_ffma(float* out, long long* cyc, float a) {
  float x = a + threadIdx.x; long long t0 = clk();
  #pragma unroll
  for (int i = 0; i < REPS; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(x) : "f"(a));
  long long t1 = clk(); out[threadIdx.x] = x; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
__global__ void k_fmax(float* out, long long* cyc, float a) {
  float x = a + threadIdx.x; long long t0 = clk();
  #pragma unroll
  for (int i = 0; i < REPS; ++i) asm volatile("max.f32 %0, %0, %1;" : "+f"(x) : "f"(a));
  long long t1 = clk(); out[threadIdx.x] = x; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
__global__ void k_ex2(float* out, long long* cyc, float a) {
  float x = a * 1e-3f * threadIdx.x; long long t0 = clk();
  #pragma unroll
  for (int i = 0; i < REPS; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x));
  long long t1 = clk(); out[threadIdx.x] = x; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
__global__ void k_shfl(float* out, long long* cyc, float a) {
  float x = a + threadIdx.x; long long t0 = clk();
  #pragma unroll
  for (int i = 0; i < REPS; ++i) asm volatile("shfl.sync.bfly.b32 %0, %0, 1, 0x1f, 0xffffffff;" : "+f"(x));
  long long t1 = clk(); out[threadIdx.x] = x; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
__global__ void k_cvt(float* out, long long* cyc, float a) {
  unsigned x = __float_as_uint(a + threadIdx.x); long long t0 = clk();
  #pragma unroll
  for (int i = 0; i < REPS; ++i) asm volatile("cvt.rn.f16x2.f32 %0, %0, %0;" : "+r"(x));
  long long t1 = clk(); out[threadIdx.x] = __uint_as_float(x); if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
__global__ void k_lds(float* out, long long* cyc, float a) {
  __shared__ unsigned ring[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) ring[i] = ((i + 33) % 1024) * 4;
  __syncthreads();
  unsigned base = (unsigned)__cvta_generic_to_shared(ring);
  unsigned p = threadIdx.x * 4; long long t0 = clk();
  #pragma unroll
  for (int i = 0; i < REPS; ++i) { unsigned v; asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(base + p)); p = v; }
  long long t1 = clk(); out[threadIdx.x] = (float)p; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
// bar.sync over the block's threads (128: one warp group, 256: two), REPS times.
__global__ void k_bar(float* out, long long* cyc, float a) {
  long long t0 = clk();
  for (int i = 0; i < REPS; ++i) asm volatile("bar.sync 1, %0;" :: "r"(blockDim.x) : "memory");
  long long t1 = clk(); out[threadIdx.x] = a; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
// try_wait.parity on an mbarrier whose phase has completed: the wait's own latency (the test adds a
// dependent selp so the next wait's address depends on the last's result: subtract one ALU op).
__global__ void k_trywait(float* out, long long* cyc, float a) {
  __shared__ __align__(8) unsigned long long bar;
  unsigned addr = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(addr));
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(addr) : "memory");
  }
  __syncthreads();
  unsigned off = 0; long long t0 = clk();
  for (int i = 0; i < REPS; ++i) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 0, 1, p; }"
                 : "=r"(ok) : "r"(addr + off) : "memory");
    off = ok * 8u;  // 0 when the phase is complete (always): keeps the address chain dependent
  }
  long long t1 = clk(); out[threadIdx.x] = a + off; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}
// one warp: arrive on a count-1 mbarrier, then try_wait for the phase it completes, REPS times (round trip
// of an arrive becoming visible to a waiter on the same SM).
__global__ void k_arrive_wait(float* out, long long* cyc, float a) {
  __shared__ __align__(8) unsigned long long bar;
  unsigned addr = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(addr));
  __syncthreads();
  long long t0 = clk();
  if (threadIdx.x == 0) {
    for (int i = 0; i < REPS; ++i) {
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(addr) : "memory");
      asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }"
                   :: "r"(addr), "r"((unsigned)(i & 1)) : "memory");
    }
  }
  long long t1 = clk(); out[threadIdx.x] = a; if (threadIdx.x == 0) cyc[0] = t1 - t0;
}

typedef void (*Kern)(float*, long long*, float);
int main() {
  struct { const char* name; Kern k; int threads; } tests[] = {
    {"ffma", k_ffma, 32}, {"fmax", k_fmax, 32}, {"ex2", k_ex2, 32}, {"shfl_bfly", k_shfl, 32},
    {"cvt_f16x2", k_cvt, 32}, {"lds_chase", k_lds, 32}, {"bar_sync_128", k_bar, 128},
    {"bar_sync_256", k_bar, 256}, {"trywait_done_plus_selp", k_trywait, 32},
    {"arrive_then_wait", k_arrive_wait, 32}, {"ffma_4warps", k_ffma, 128}, {"ex2_4warps", k_ex2, 128},
  };
  float* out; long long* cyc; CHECK(cudaMalloc(&out, 1024 * sizeof(float))); CHECK(cudaMalloc(&cyc, 8));
  printf("{\"reps\": %d, \"cycles_per_op\": {", REPS);
  int n = sizeof(tests) / sizeof(tests[0]);
  for (int t = 0; t < n; ++t) {
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      tests[t].k<<<1, tests[t].threads>>>(out, cyc, 1.0001f);
      cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", tests[t].name, cudaGetErrorString(e)); best = -1; break; }
      long long c; CHECK(cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost));
      if (c / (double)REPS < best) best = c / (double)REPS;
    }
    printf("%s\"%s\": %.2f", t ? ", " : "", tests[t].name, best);
    fflush(stdout);
  }
  printf("}}\n");
  return 0;
}
