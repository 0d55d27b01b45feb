// Decode attention read straight from the paged KV cache, on CPU.
//
// The PyTorch path first gathers each sequence's keys and values into a padded
// (B, Lmax, KVH, D) copy, then runs masked SDPA over it. This kernel reads each
// cached row in place, once per KV head for all G query heads that share it
// (grouped-query attention), and stops at each sequence's own length: no copy,
// no padding, no mask.
//
// q: (B, H, D); k_cache, v_cache: (S, KVH, D) slots; slots: (B, Lmax) slot of
// each position; lens: (B,) positions per sequence. All float32 / int64.
// Returns (B, H, D).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                     torch::Tensor slots, torch::Tensor lens, double scale) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
                  v_cache.scalar_type() == torch::kFloat32,
              "paged_decode_attention: float32 only");
  TORCH_CHECK(slots.scalar_type() == torch::kInt64 && lens.scalar_type() == torch::kInt64,
              "paged_decode_attention: int64 slots and lens");
  TORCH_CHECK(k_cache.stride(2) == 1 && k_cache.stride(1) == k_cache.size(2) &&
                  v_cache.stride(2) == 1 && v_cache.stride(1) == v_cache.size(2),
              "paged_decode_attention: each cache slot must be a contiguous (KVH, D) row");
  TORCH_CHECK(q.size(1) % k_cache.size(1) == 0, "query heads must be a multiple of KV heads");
  q = q.contiguous();
  slots = slots.contiguous();
  lens = lens.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t KVH = k_cache.size(1), Lmax = slots.size(1);
  const int64_t G = H / KVH;
  const int64_t ks = k_cache.stride(0), vs = v_cache.stride(0);
  auto out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float fscale = static_cast<float>(scale);
  at::parallel_for(0, B * KVH, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(G * Lmax);
    std::vector<float> acc(G * D);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / KVH, kvh = task % KVH;
      const int64_t L = lp[b];  // 1 <= L <= Lmax
      const float* qb = qp + (b * H + kvh * G) * D;  // G query heads of this kv head
      // scores[g][l] = q[g] . k[l]
      for (int64_t l = 0; l < L; ++l) {
        const float* kr = kp + sp[b * Lmax + l] * ks + kvh * D;
        for (int64_t g = 0; g < G; ++g) {
          const float* qg = qb + g * D;
          float dot = 0.f;
          for (int64_t d = 0; d < D; ++d) dot += qg[d] * kr[d];
          scores[g * Lmax + l] = dot * fscale;
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* s = scores.data() + g * Lmax;
        float mx = -INFINITY;
        for (int64_t l = 0; l < L; ++l) mx = std::max(mx, s[l]);
        float sum = 0.f;
        for (int64_t l = 0; l < L; ++l) { s[l] = std::exp(s[l] - mx); sum += s[l]; }
        const float inv = 1.f / sum;
        for (int64_t l = 0; l < L; ++l) s[l] *= inv;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t l = 0; l < L; ++l) {
        const float* vr = vp + sp[b * Lmax + l] * vs + kvh * D;
        for (int64_t g = 0; g < G; ++g) {
          const float p = scores[g * Lmax + l];
          float* a = acc.data() + g * D;
          for (int64_t d = 0; d < D; ++d) a[d] += p * vr[d];
        }
      }
      for (int64_t g = 0; g < G; ++g)
        std::copy(acc.begin() + g * D, acc.begin() + (g + 1) * D, op + (b * H + kvh * G + g) * D);
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode_attention", &paged_decode_attention, "decode attention over a paged KV cache");
}
