// Decode attention read straight from a paged KV cache: the core that
// paged_attention.cpp exposes to Python and the fused decode step of
// int4_decode.cpp runs inside each layer.
//
// q: (B, H, D) contiguous; k_cache, v_cache: slots of (KVH, D) contiguous rows,
// `slot_stride` floats apart; slots: (B, Lmax) slot of each position; lens: (B,)
// positions per sequence (1 <= L <= Lmax); out: (B, H, D). Each cached row is read
// once for all H query heads (G = H / KVH of them share each KV head).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace vigil {

inline void decode_attention(const float* qp, int64_t B, int64_t H, int64_t D, const float* kp,
                             const float* vp, int64_t KVH, int64_t slot_stride, const int64_t* sp,
                             int64_t Lmax, const int64_t* lp, float scale, float* op) {
  const int64_t G = H / KVH;
  const int64_t row = KVH * D;  // one slot: every KV head's keys (or values), contiguous
  // One task per sequence: each slot's whole row is read once, for all heads, and the
  // next slot's is prefetched, since the slots are a gather the hardware cannot predict.
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(H * Lmax);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t L = lp[b];
      const int64_t* slot = sp + b * Lmax;
      const float* qb = qp + b * H * D;
      float* ob = op + b * H * D;
      for (int64_t l = 0; l < L; ++l) {  // scores[h][l] = q[h] . k[l]
        if (l + 1 < L)
          for (int64_t c = 0; c < row; c += 16) __builtin_prefetch(kp + slot[l + 1] * slot_stride + c);
        const float* kr = kp + slot[l] * slot_stride;
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = qb + h * D;
          const float* kh = kr + (h / G) * D;
          float dot = 0.f;
          for (int64_t d = 0; d < D; ++d) dot += qh[d] * kh[d];
          scores[h * Lmax + l] = dot * scale;
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        float* s = scores.data() + h * Lmax;
        float mx = -INFINITY;
        for (int64_t l = 0; l < L; ++l) mx = std::max(mx, s[l]);
        float sum = 0.f;
        for (int64_t l = 0; l < L; ++l) {
          s[l] = std::exp(s[l] - mx);
          sum += s[l];
        }
        const float inv = 1.f / sum;
        for (int64_t l = 0; l < L; ++l) s[l] *= inv;
      }
      std::fill(ob, ob + H * D, 0.f);
      for (int64_t l = 0; l < L; ++l) {
        if (l + 1 < L)
          for (int64_t c = 0; c < row; c += 16) __builtin_prefetch(vp + slot[l + 1] * slot_stride + c);
        const float* vr = vp + slot[l] * slot_stride;
        for (int64_t h = 0; h < H; ++h) {
          const float p = scores[h * Lmax + l];
          const float* vh = vr + (h / G) * D;
          float* oh = ob + h * D;
          for (int64_t d = 0; d < D; ++d) oh[d] += p * vh[d];
        }
      }
    }
  });
}

}  // namespace vigil
