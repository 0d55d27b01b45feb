// packed_matmul.h exposed to Python: Int4Linear's and Int8Linear's kernels on CPUs with
// AVX2 and no AVX-512.
#include <torch/extension.h>

#include "packed_matmul.h"

namespace {

void check_rows(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x: (n, K) float32");
  TORCH_CHECK(x.size(1) % vigil::kInt4Group == 0, "K must be a multiple of 32");
}

}  // namespace

// x (n, K) float32, q (N, K / 2) uint8, dm (N, K / 32, 2) float32 -> (n, N) float32.
torch::Tensor int4_mm(torch::Tensor x, torch::Tensor q, torch::Tensor dm) {
  check_rows(x);
  const int64_t n = x.size(0), K = x.size(1), N = q.size(0);
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == torch::kUInt8 && q.size(1) == K / 2 &&
                  q.is_contiguous(),
              "q: (N, K / 2) contiguous uint8");
  TORCH_CHECK(dm.dim() == 3 && dm.scalar_type() == torch::kFloat32 && dm.size(0) == N &&
                  dm.size(1) == K / vigil::kInt4Group && dm.size(2) == 2 && dm.is_contiguous(),
              "dm: (N, K / 32, 2) contiguous float32");
  x = x.contiguous();
  torch::Tensor y = torch::empty({n, N}, x.options());
  vigil::int4_matmul(x.data_ptr<float>(), n, K, q.data_ptr<uint8_t>(), dm.data_ptr<float>(), N,
                     y.data_ptr<float>());
  return y;
}

// x (n, K) float32, q (N, K) int8, scales (N,) bfloat16 -> (n, N) float32.
torch::Tensor int8_mm(torch::Tensor x, torch::Tensor q, torch::Tensor scales) {
  check_rows(x);
  const int64_t n = x.size(0), K = x.size(1), N = q.size(0);
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == torch::kInt8 && q.size(1) == K &&
                  q.is_contiguous(),
              "q: (N, K) contiguous int8");
  TORCH_CHECK(scales.dim() == 1 && scales.scalar_type() == torch::kBFloat16 &&
                  scales.size(0) == N && scales.is_contiguous(),
              "scales: (N,) contiguous bfloat16");
  x = x.contiguous();
  torch::Tensor y = torch::empty({n, N}, x.options());
  vigil::int8_matmul(x.data_ptr<float>(), n, K, q.data_ptr<int8_t>(),
                     scales.data_ptr<at::BFloat16>(), N, y.data_ptr<float>());
  return y;
}

// Without the GIL while it runs: the worker's event loop (a thread of the same
// process) streams the last step's tokens meanwhile.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_mm", &int4_mm, "int4 weight-only matmul, float32 activations (AVX2)",
        py::call_guard<py::gil_scoped_release>());
  m.def("int8_mm", &int8_mm, "int8 weight-only matmul, float32 activations (AVX2)",
        py::call_guard<py::gil_scoped_release>());
}
