// Weight-only int4 and int8 matmuls for CPUs with AVX-512 VNNI: the activations are
// quantized to int8 per group of 32 (as llama.cpp's Q8_1 does), and each group's dot
// products run as exact integer sums, 64 multiply-adds an instruction (vpdpbusd: u8
// weights by s8 activations), where a bfloat16 dot product does 32 and PyTorch's packed
// int4 kernel unpacks each weight to a float first.
//
// For the weights w = q d + m of a group (GGUF Q4_1's rule) and activations
// x ~ xq s (xq in -127..127, s = max |x| / 127 of the group):
//
//   sum_k w_k x_k ~ d s sum_k q_k xq_k + m s sum_k xq_k
//
// so each output of each row costs, per group, one integer sum (8 instructions for 16
// outputs) and two fused multiply-adds to scale it. int8 weights (w = q d per group of
// 32, symmetric: GGUF Q8_0's rule) are held as u = q + 128, and
// sum_k q_k xq_k = sum_k u_k xq_k - 128 sum_k xq_k.
//
// Layouts (packed once at load, vnni_pack_* in packed_matmul.cpp): outputs in blocks of
// 16, one per 32-bit lane of a vector; a lane holds 4 consecutive weights of its output.
//   int4  q (N / 16, K / 32, 4, 64) uint8: in chunk c of group g, lane i's byte j holds
//         weight 32 g + 8 c + j of output 16 b + i in its low nibble and 32 g + 8 c + 4 + j
//         in its high one; dm (N / 16, K / 32, 2, 16) float16: the group's d, then m.
//   int8  u (N / 16, K / 32, 8, 64) uint8: in chunk j of group g, lane i holds weights
//         32 g + 4 j .. + 3 of output 16 b + i, plus 128; d (N / 16, K / 32, 16) float16.
// x (n, K) and y (n, N) float32, contiguous; K a multiple of 32, N of 16.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define VIGIL_VNNI 1
#include <immintrin.h>
#endif

namespace vigil {

constexpr int64_t kVnniGroup = 32;
constexpr int64_t kVnniBlock = 16;  // outputs a vector holds

#ifdef VIGIL_VNNI
constexpr bool kHasVnni = true;

// Rows of x as int8, per group of 32: xq, s (the group's scale) and s * sum xq.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> scale, scaled_sum;
  std::vector<int32_t> sum;

  QuantizedRows(const float* x, int64_t n, int64_t K)
      : q(n * K), scale(n * K / kVnniGroup), scaled_sum(n * K / kVnniGroup),
        sum(n * K / kVnniGroup) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n * K / kVnniGroup; ++i) {
      const float* xg = x + i * kVnniGroup;
      const __m512 a = _mm512_loadu_ps(xg), b = _mm512_loadu_ps(xg + 16);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, b)));
      const float s = amax / 127.f;
      const __m512 inv = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
      const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv));  // round to nearest
      const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q.data() + i * kVnniGroup),
                       _mm512_cvtsepi32_epi8(qa));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q.data() + i * kVnniGroup + 16),
                       _mm512_cvtsepi32_epi8(qb));
      const int32_t total = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
      scale[i] = s;
      sum[i] = total;
      scaled_sum[i] = s * static_cast<float>(total);
    }
  }
};

// Weights of one group of one block, as 8 vectors of u8 (vector j: weights 4 j .. 4 j + 3).
struct Int4Weights {
  static constexpr int64_t kGroupBytes = 256;
  static void load(const uint8_t* p, __m512i w[8]) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i b = _mm512_loadu_si512(p + 64 * c);
      w[2 * c] = _mm512_and_si512(b, low);
      w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low);
    }
  }
};

struct Int8Weights {
  static constexpr int64_t kGroupBytes = 512;
  static void load(const uint8_t* p, __m512i w[8]) {
    for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(p + 64 * j);
  }
};

// sum over the group of u8 weights times s8 activations, 16 outputs, one row; A
// independent accumulators so that a single row does not wait on one chain.
template <int A>
inline __m512i group_dot(const __m512i w[8], const int8_t* xq) {
  __m512i acc[A];
  for (int a = 0; a < A; ++a) acc[a] = _mm512_setzero_si512();
  for (int j = 0; j < 8; ++j) {
    const __m512i xj = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xq + 4 * j));
    acc[j % A] = _mm512_dpbusd_epi32(acc[j % A], w[j], xj);
  }
  for (int a = 1; a < A; ++a) acc[0] = _mm512_add_epi32(acc[0], acc[a]);
  return acc[0];
}

// Outputs of blocks [b0, b1) for R rows: per group the weights' d (and for int4 m)
// from `scales`; for int8 the correction -128 sum xq.
template <typename Weights, int R, int A>
void vnni_block_rows(const QuantizedRows& xr, int64_t row0, int64_t K, const uint8_t* q,
                     const c10::Half* scales, int64_t b0, int64_t b1, float* y, int64_t N) {
  constexpr bool kInt4 = std::is_same_v<Weights, Int4Weights>;
  constexpr int64_t kScales = kInt4 ? 2 : 1;  // vectors of 16 float16 per group
  const int64_t G = K / kVnniGroup;
  for (int64_t b = b0; b < b1; ++b) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const uint8_t* qb = q + b * G * Weights::kGroupBytes;
    for (int64_t g = 0; g < G; ++g) {
      __m512i w[8];
      Weights::load(qb + g * Weights::kGroupBytes, w);
      const c10::Half* dm = scales + (b * G + g) * kScales * kVnniBlock;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dm)));
      __m512 m = _mm512_setzero_ps();
      if constexpr (kInt4)
        m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dm + 16)));
      for (int r = 0; r < R; ++r) {
        const int64_t i = (row0 + r) * G + g;
        __m512i dot = group_dot<A>(w, xr.q.data() + i * kVnniGroup);
        if constexpr (!kInt4) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * xr.sum[i]));
        const __m512 ds = _mm512_mul_ps(d, _mm512_set1_ps(xr.scale[i]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), ds, acc[r]);
        if constexpr (kInt4) acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(xr.scaled_sum[i]), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + (row0 + r) * N + b * kVnniBlock, acc[r]);
  }
}

// y (n, N) = x (n, K) @ W^T, up to 8 rows at a time (the weights of a block, a few KB,
// stay in cache for the next 8).
template <typename Weights>
void vnni_matmul(const float* x, int64_t n, int64_t K, const uint8_t* q,
                 const c10::Half* scales, int64_t N, float* y) {
  const QuantizedRows xr(x, n, K);
  at::parallel_for(0, N / kVnniBlock, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t t = 0; t < n; t += 8) {
      const auto run = [&](auto R, auto A) {
        vnni_block_rows<Weights, R(), A()>(xr, t, K, q, scales, b0, b1, y, N);
      };
      using std::integral_constant;
      switch (std::min<int64_t>(n - t, 8)) {
        case 1: run(integral_constant<int, 1>(), integral_constant<int, 4>()); break;
        case 2: run(integral_constant<int, 2>(), integral_constant<int, 2>()); break;
        case 3: run(integral_constant<int, 3>(), integral_constant<int, 2>()); break;
        case 4: run(integral_constant<int, 4>(), integral_constant<int, 1>()); break;
        case 5: run(integral_constant<int, 5>(), integral_constant<int, 1>()); break;
        case 6: run(integral_constant<int, 6>(), integral_constant<int, 1>()); break;
        case 7: run(integral_constant<int, 7>(), integral_constant<int, 1>()); break;
        default: run(integral_constant<int, 8>(), integral_constant<int, 1>()); break;
      }
    }
  });
}

inline void vnni_int4_matmul(const float* x, int64_t n, int64_t K, const uint8_t* q,
                             const c10::Half* dm, int64_t N, float* y) {
  vnni_matmul<Int4Weights>(x, n, K, q, dm, N, y);
}

inline void vnni_int8_matmul(const float* x, int64_t n, int64_t K, const uint8_t* u,
                             const c10::Half* d, int64_t N, float* y) {
  vnni_matmul<Int8Weights>(x, n, K, u, d, N, y);
}

#else
constexpr bool kHasVnni = false;
#endif

}  // namespace vigil
