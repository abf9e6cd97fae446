// Memory-bound loops on Hopper: what pointer loads (LDG) from HBM get at a given number of bytes in flight
// per SM, and how much of a row that a CTA reads twice (two sibling loops) L2 still holds the second time.
//
// Built and run by run_membound.py (nvcc -O3 -arch sm_90a); prints one JSON object.
//
// stream: grid = 132 x k CTAs of T threads; each thread issues `depth` independent coalesced loads of
//   `width` bytes (LDG.E.128 / LDG.E.U16), then uses them, then the next batch; every CTA reads its own
//   contiguous part of a 2 GiB buffer once (no reuse). Bytes in flight per SM = k T depth width. Time by
//   cudaEvent over the kernel (best of 5); the SM clock from clock64 of CTA 0 over the same kernel.
// rows:  one CTA per row of R bytes (16384 rows x R), `k` CTAs per SM forced by dynamic shared memory;
//   pass 1 reads the row (reduces it), pass 2 reads it again (and, with `store`, writes it to a second
//   buffer); pass-1-only and pass-2-without-rereading variants give the times of the parts.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

template <int WIDTH, int DEPTH>
__global__ void stream_kernel(const char* __restrict__ buf, size_t per_cta, unsigned long long* out,
                              long long* clk) {
  long long t0 = clock64();
  const char* base = buf + (size_t)blockIdx.x * per_cta;
  const size_t batch = (size_t)blockDim.x * WIDTH * DEPTH;
  unsigned acc = 0;
  for (size_t off = 0; off + batch <= per_cta; off += batch) {
    if (WIDTH == 16) {
      uint4 v[DEPTH];
#pragma unroll
      for (int d = 0; d < DEPTH; ++d)
        v[d] = *reinterpret_cast<const uint4*>(base + off + ((size_t)d * blockDim.x + threadIdx.x) * 16);
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) acc ^= v[d].x + v[d].y + v[d].z + v[d].w;
    } else {
      unsigned short v[DEPTH];
#pragma unroll
      for (int d = 0; d < DEPTH; ++d)
        v[d] = *reinterpret_cast<const unsigned short*>(base + off + ((size_t)d * blockDim.x + threadIdx.x) * 2);
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) acc ^= v[d];
    }
  }
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads
  if (blockIdx.x == 0 && threadIdx.x == 0) { clk[0] = clock64() - t0; }
}

// mode 0: pass 1 only; 1: pass 1 + pass 2 re-read; 2: pass 1 + pass 2 re-read + store; 3: pass 1 + store
// of values not re-read (the store traffic alone). Each thread has 4 independent 16-B loads in flight per
// batch (row16 a multiple of 4 x blockDim.x).
__global__ void rows_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int row16, int mode,
                            unsigned long long* out) {
  extern __shared__ char pad[];
  const uint4* r = x + (size_t)blockIdx.x * row16;
  uint4* w = y + (size_t)blockIdx.x * row16;
  const int n = blockDim.x;
  unsigned acc = 0;
  for (int i = threadIdx.x; i < row16; i += 4 * n) {
    uint4 v0 = r[i], v1 = r[i + n], v2 = r[i + 2 * n], v3 = r[i + 3 * n];
    acc += (v0.x ^ v0.y ^ v0.z ^ v0.w) + (v1.x ^ v1.y ^ v1.z ^ v1.w) + (v2.x ^ v2.y ^ v2.z ^ v2.w) +
           (v3.x ^ v3.y ^ v3.z ^ v3.w);
  }
  if (threadIdx.x == 0) pad[0] = (char)acc;
  __syncthreads();
  unsigned s = pad[0];
  if (mode == 1 || mode == 2) {
    for (int i = threadIdx.x; i < row16; i += 4 * n) {
      uint4 v0 = r[i], v1 = r[i + n], v2 = r[i + 2 * n], v3 = r[i + 3 * n];
      if (mode == 2) {
        v0.x += s; v1.x += s; v2.x += s; v3.x += s;
        w[i] = v0; w[i + n] = v1; w[i + 2 * n] = v2; w[i + 3 * n] = v3;
      } else {
        acc += (v0.x ^ v0.y ^ v0.z ^ v0.w) + (v1.x ^ v1.y ^ v1.z ^ v1.w) + (v2.x ^ v2.y ^ v2.z ^ v2.w) +
           (v3.x ^ v3.y ^ v3.z ^ v3.w);
      }
    }
  } else if (mode == 3) {
    for (int i = threadIdx.x; i < row16; i += n) w[i] = make_uint4(s, i, acc, 0);
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <int WIDTH, int DEPTH>
void run_stream(const char* buf, size_t total, int sms, int k, int threads, unsigned long long* out,
                long long* clk, bool first) {
  int ctas = sms * k;
  size_t per_cta = std::min(total / ctas, (size_t)threads * WIDTH * DEPTH * 4096);  // <= 4096 batches
  per_cta -= per_cta % ((size_t)threads * WIDTH * DEPTH);
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  float best = 1e30f; long long best_clk = 0;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaEventRecord(a));
    stream_kernel<WIDTH, DEPTH><<<ctas, threads>>>(buf, per_cta, out, clk);
    CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    long long c; CK(cudaMemcpy(&c, clk, sizeof c, cudaMemcpyDeviceToHost));
    if (rep > 0 && ms < best) { best = ms; best_clk = c; }
  }
  double bytes = (double)per_cta * ctas;
  double inflight = (double)k * threads * WIDTH * DEPTH;
  printf("%s{\"width\": %d, \"depth\": %d, \"ctas_per_sm\": %d, \"threads\": %d, \"warps_per_sm\": %d, "
         "\"inflight_bytes_per_sm\": %.0f, \"bytes\": %.0f, \"ms\": %.5f, \"gb_per_s\": %.1f, "
         "\"cta0_cycles\": %lld}", first ? "" : ",\n  ", WIDTH, DEPTH, k, threads, k * threads / 32,
         inflight, bytes, best, bytes / best / 1e6, best_clk);
  CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
}

int main() {
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int l2 = 0; CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const size_t total = (size_t)2 << 30;
  char* buf; CK(cudaMalloc(&buf, total + (64 << 20)));
  CK(cudaMemset(buf, 1, total + (64 << 20)));
  unsigned long long* out; CK(cudaMalloc(&out, 64));
  long long* clk; CK(cudaMalloc(&clk, 64));
  printf("{\"sms\": %d, \"l2_bytes\": %d,\n \"stream\": [\n  ", sms, l2);
  bool first = true;
  const int ks[] = {1, 2, 4, 8, 16};
  for (int threads : {128, 256, 512}) {
    for (int k : ks) {
      if (k * threads > 2048) continue;
      run_stream<16, 1>(buf, total, sms, k, threads, out, clk, first); first = false;
      run_stream<16, 2>(buf, total, sms, k, threads, out, clk, false);
      run_stream<16, 4>(buf, total, sms, k, threads, out, clk, false);
      run_stream<16, 8>(buf, total, sms, k, threads, out, clk, false);
      run_stream<2, 1>(buf, total, sms, k, threads, out, clk, false);
      run_stream<2, 4>(buf, total, sms, k, threads, out, clk, false);
    }
  }
  printf("\n ],\n \"rows\": [\n  ");
  first = true;
  uint4* y; CK(cudaMalloc(&y, (size_t)1 << 30));
  cudaFuncSetAttribute(rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int row_kb : {16, 32, 48, 64, 128}) {
    for (int k : {1, 2, 4, 8, 16}) {
      int threads = 256;
      if (k * threads > 2048) continue;
      size_t row = (size_t)row_kb << 10;
      int rows = (int)(((size_t)1 << 30) / row);
      int smem = k == 1 ? 200 * 1024 : (228 * 1024) / k - 2048;
      float t[4];
      for (int mode = 0; mode < 4; ++mode) {
        float best = 1e30f;
        for (int rep = 0; rep < 4; ++rep) {
          CK(cudaEventRecord(a));
          rows_kernel<<<rows, threads, smem>>>(reinterpret_cast<const uint4*>(buf), y, (int)(row / 16), mode, out);
          CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
          float ms; CK(cudaEventElapsedTime(&ms, a, b));
          if (rep > 0) best = std::min(best, ms);
        }
        t[mode] = best;
      }
      int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, rows_kernel, threads, smem));
      printf("%s{\"row_bytes\": %zu, \"ctas_per_sm\": %d, \"rows\": %d, \"resident_row_bytes\": %.0f, "
             "\"ms_pass1\": %.5f, \"ms_reread\": %.5f, \"ms_reread_store\": %.5f, \"ms_store\": %.5f}",
             first ? "" : ",\n  ", row, occ, rows, (double)occ * sms * row, t[0], t[1], t[2], t[3]);
      first = false;
    }
  }
  printf("\n ]\n}\n");
  CK(cudaGetLastError());
  return 0;
}
