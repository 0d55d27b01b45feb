// Decode attention read straight from the paged KV cache, on CPU.
//
// The PyTorch path first gathers each sequence's keys and values into a padded
// (B, Lmax, KVH, D) copy, then runs masked SDPA over it. This kernel reads each
// cached row in place (decode_attention.h) and stops at each sequence's own
// length: no copy, no padding, no mask.
//
// q: (B, H, D); k_cache, v_cache: (S, KVH, D) slots; slots: (B, Lmax) slot of
// each position; lens: (B,) positions per sequence. All float32 / int64.
// Returns (B, H, D).
#include <torch/extension.h>

#include "decode_attention.h"

torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                     torch::Tensor slots, torch::Tensor lens, double scale) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32 &&
                  v_cache.scalar_type() == torch::kFloat32,
              "paged_decode_attention: float32 only");
  TORCH_CHECK(slots.scalar_type() == torch::kInt64 && lens.scalar_type() == torch::kInt64,
              "paged_decode_attention: int64 slots and lens");
  TORCH_CHECK(k_cache.stride(2) == 1 && k_cache.stride(1) == k_cache.size(2) &&
                  v_cache.stride(2) == 1 && v_cache.stride(1) == v_cache.size(2) &&
                  k_cache.stride(0) == v_cache.stride(0),
              "paged_decode_attention: each cache slot must be a contiguous (KVH, D) row");
  TORCH_CHECK(q.size(1) % k_cache.size(1) == 0, "query heads must be a multiple of KV heads");
  q = q.contiguous();
  slots = slots.contiguous();
  lens = lens.contiguous();
  auto out = torch::empty_like(q);
  vigil::decode_attention(q.data_ptr<float>(), q.size(0), q.size(1), q.size(2),
                          k_cache.data_ptr<float>(), v_cache.data_ptr<float>(), k_cache.size(1),
                          k_cache.stride(0), slots.data_ptr<int64_t>(), slots.size(1),
                          lens.data_ptr<int64_t>(), static_cast<float>(scale),
                          out.data_ptr<float>());
  return out;
}

// Without the GIL while it runs: the worker's event loop (a thread of the same
// process) streams the last step's tokens meanwhile.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode_attention", &paged_decode_attention, "decode attention over a paged KV cache",
        py::call_guard<py::gil_scoped_release>());
}
