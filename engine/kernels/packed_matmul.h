// Weight-only int4 and int8 matmuls for CPUs whose widest vectors are AVX2 (no
// AVX-512): float32 activations, weights unpacked to float32 in registers, each
// unpacked weight used for up to 8 rows at once.
//
// PyTorch's packed kernels (_weight_int4pack_mm_for_cpu, _weight_int8pack_mm) unpack
// the weights again for every row on such a CPU: their time grows in step with the
// rows (the bundled model's int4 linears, AMD EPYC with AVX2: 29 ms at 1 row, 119 at
// 8, 241 at 16). Here unpacked once for up to 8 rows: 26, 68 and 126 ms.
//
// int4 (the caller packs it, Int4Linear): q (N, K / 2) uint8, where byte j of group g
// of row o holds weight 32 g + j in its low nibble and 32 g + 16 + j in its high one;
// dm (N, K / 32, 2) float32, each group's d and m: w = q * d + m (GGUF Q4_1's rule).
// int8 (ATen's layout, Int8Linear): q (N, K) int8, scales (N,) bfloat16: w = q * s.
// x (n, K) and y (n, N) are float32, contiguous; K a multiple of 32.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace vigil {

constexpr int64_t kInt4Group = 32;

#if defined(__AVX2__) && defined(__FMA__)

inline float sum_of(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 unpacked(__m128i nibbles, __m256 d, __m256 m) {  // 8 bytes -> 8 floats
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nibbles)), d, m);
}

// Outputs [o0, o1) for R rows of x, with A accumulators a row.
template <int R, int A>
void int4_outputs(const float* x, int64_t K, const uint8_t* q, const float* dm, int64_t o0,
                  int64_t o1, float* y, int64_t N) {
  const __m128i low_nibble = _mm_set1_epi8(0x0F);
  const int64_t G = K / kInt4Group;
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* qo = q + o * (K / 2);
    const float* dmo = dm + o * G * 2;
    __m256 acc[R][A];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < A; ++a) acc[r][a] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qo + g * 16));
      const __m128i lo = _mm_and_si128(b, low_nibble);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low_nibble);
      const __m256 d = _mm256_set1_ps(dmo[2 * g]), m = _mm256_set1_ps(dmo[2 * g + 1]);
      const __m256 w[4] = {unpacked(lo, d, m), unpacked(_mm_srli_si128(lo, 8), d, m),
                           unpacked(hi, d, m), unpacked(_mm_srli_si128(hi, 8), d, m)};
      const float* xg = x + g * kInt4Group;
      for (int r = 0; r < R; ++r)
        for (int k = 0; k < 4; ++k)
          acc[r][k % A] =
              _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xg + r * K + 8 * k), acc[r][k % A]);
    }
    for (int r = 0; r < R; ++r) {
      __m256 s = acc[r][0];
      for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[r][a]);
      y[r * N + o] = sum_of(s);
    }
  }
}

template <int R, int A>
void int8_outputs(const float* x, int64_t K, const int8_t* q, const at::BFloat16* scales,
                  int64_t o0, int64_t o1, float* y, int64_t N) {
  for (int64_t o = o0; o < o1; ++o) {
    const int8_t* qo = q + o * K;
    __m256 acc[R][A];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < A; ++a) acc[r][a] = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
      __m256 w[4];
      for (int k = 0; k < 4; ++k) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qo + k0 + 8 * k));
        w[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
      }
      for (int r = 0; r < R; ++r)
        for (int k = 0; k < 4; ++k)
          acc[r][k % A] =
              _mm256_fmadd_ps(w[k], _mm256_loadu_ps(x + r * K + k0 + 8 * k), acc[r][k % A]);
    }
    const float s = static_cast<float>(scales[o]);
    for (int r = 0; r < R; ++r) {
      __m256 sum = acc[r][0];
      for (int a = 1; a < A; ++a) sum = _mm256_add_ps(sum, acc[r][a]);
      y[r * N + o] = sum_of(sum) * s;
    }
  }
}

#else  // no AVX2: the same arithmetic, one weight at a time

template <int R, int A>
void int4_outputs(const float* x, int64_t K, const uint8_t* q, const float* dm, int64_t o0,
                  int64_t o1, float* y, int64_t N) {
  const int64_t G = K / kInt4Group;
  for (int64_t o = o0; o < o1; ++o) {
    float acc[R] = {};
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* b = q + o * (K / 2) + g * 16;
      const float d = dm[(o * G + g) * 2], m = dm[(o * G + g) * 2 + 1];
      for (int64_t j = 0; j < 32; ++j) {
        const float w = static_cast<float>(j < 16 ? b[j] & 15 : b[j - 16] >> 4) * d + m;
        for (int r = 0; r < R; ++r) acc[r] += w * x[r * K + g * kInt4Group + j];
      }
    }
    for (int r = 0; r < R; ++r) y[r * N + o] = acc[r];
  }
}

template <int R, int A>
void int8_outputs(const float* x, int64_t K, const int8_t* q, const at::BFloat16* scales,
                  int64_t o0, int64_t o1, float* y, int64_t N) {
  for (int64_t o = o0; o < o1; ++o) {
    float acc[R] = {};
    for (int64_t k = 0; k < K; ++k)
      for (int r = 0; r < R; ++r) acc[r] += static_cast<float>(q[o * K + k]) * x[r * K + k];
    for (int r = 0; r < R; ++r) y[r * N + o] = acc[r] * static_cast<float>(scales[o]);
  }
}

#endif

// y (n, N) = x (n, K) @ W^T, 8 rows at a time; outputs(R, A, x, y) computes all N
// outputs of R rows, each row's FMAs spread over A accumulators (independent chains;
// R * A <= 8 keeps them all in registers).
template <typename Outputs>
void rows_of_eight(const float* x, int64_t n, int64_t K, int64_t N, float* y, Outputs outputs) {
  for (int64_t t = 0; t < n; t += 8) {
    const float* xt = x + t * K;
    float* yt = y + t * N;
    switch (std::min<int64_t>(n - t, 8)) {
      case 1: outputs(std::integral_constant<int, 1>(), std::integral_constant<int, 4>(), xt, yt); break;
      case 2: outputs(std::integral_constant<int, 2>(), std::integral_constant<int, 4>(), xt, yt); break;
      case 3: outputs(std::integral_constant<int, 3>(), std::integral_constant<int, 2>(), xt, yt); break;
      case 4: outputs(std::integral_constant<int, 4>(), std::integral_constant<int, 2>(), xt, yt); break;
      case 5: outputs(std::integral_constant<int, 5>(), std::integral_constant<int, 1>(), xt, yt); break;
      case 6: outputs(std::integral_constant<int, 6>(), std::integral_constant<int, 1>(), xt, yt); break;
      case 7: outputs(std::integral_constant<int, 7>(), std::integral_constant<int, 1>(), xt, yt); break;
      default: outputs(std::integral_constant<int, 8>(), std::integral_constant<int, 1>(), xt, yt); break;
    }
  }
}

inline void int4_matmul(const float* x, int64_t n, int64_t K, const uint8_t* q, const float* dm,
                        int64_t N, float* y) {
  rows_of_eight(x, n, K, N, y, [&](auto R, auto A, const float* xt, float* yt) {
    at::parallel_for(0, N, 64, [&](int64_t o0, int64_t o1) {
      int4_outputs<R(), A()>(xt, K, q, dm, o0, o1, yt, N);
    });
  });
}

inline void int8_matmul(const float* x, int64_t n, int64_t K, const int8_t* q,
                        const at::BFloat16* scales, int64_t N, float* y) {
  rows_of_eight(x, n, K, N, y, [&](auto R, auto A, const float* xt, float* yt) {
    at::parallel_for(0, N, 64, [&](int64_t o0, int64_t o1) {
      int8_outputs<R(), A()>(xt, K, q, scales, o0, o1, yt, N);
    });
  });
}

}  // namespace vigil
