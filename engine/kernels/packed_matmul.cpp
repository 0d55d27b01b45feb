// Int4Linear's and Int8Linear's own kernels exposed to Python: packed_matmul.h's on CPUs
// with AVX2 and no AVX-512, vnni_matmul.h's on CPUs with AVX-512 VNNI.
#include <torch/extension.h>

#include "packed_matmul.h"
#include "vnni_matmul.h"

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

// x (n, K) float32; q (N / 16, K / 32, 4, 64) uint8 and dm (N / 16, K / 32, 2, 16)
// float16 (vnni_matmul.h's int4 layout) -> (n, N) float32.
torch::Tensor vnni_int4_mm(torch::Tensor x, torch::Tensor q, torch::Tensor dm) {
  check_rows(x);
  const int64_t n = x.size(0), K = x.size(1), G = K / vigil::kInt4Group, N = q.size(0) * 16;
  TORCH_CHECK(vigil::kHasVnni, "built without AVX-512 VNNI");
  TORCH_CHECK(q.dim() == 4 && q.scalar_type() == torch::kUInt8 && q.size(1) == G &&
                  q.size(2) == 4 && q.size(3) == 64 && q.is_contiguous(),
              "q: (N / 16, K / 32, 4, 64) contiguous uint8");
  TORCH_CHECK(dm.dim() == 4 && dm.scalar_type() == torch::kFloat16 && dm.size(0) == N / 16 &&
                  dm.size(1) == G && dm.size(2) == 2 && dm.size(3) == 16 && dm.is_contiguous(),
              "dm: (N / 16, K / 32, 2, 16) contiguous float16");
  x = x.contiguous();
  torch::Tensor y = torch::empty({n, N}, x.options());
#ifdef VIGIL_VNNI
  vigil::vnni_int4_matmul(x.data_ptr<float>(), n, K, q.data_ptr<uint8_t>(),
                          dm.data_ptr<at::Half>(), N, y.data_ptr<float>());
#endif
  return y;
}

// x (n, K) float32; u (N / 16, K / 32, 8, 64) uint8 and d (N / 16, K / 32, 16) float16
// (vnni_matmul.h's int8 layout) -> (n, N) float32.
torch::Tensor vnni_int8_mm(torch::Tensor x, torch::Tensor u, torch::Tensor d) {
  check_rows(x);
  const int64_t n = x.size(0), K = x.size(1), G = K / vigil::kInt4Group, N = u.size(0) * 16;
  TORCH_CHECK(vigil::kHasVnni, "built without AVX-512 VNNI");
  TORCH_CHECK(u.dim() == 4 && u.scalar_type() == torch::kUInt8 && u.size(1) == G &&
                  u.size(2) == 8 && u.size(3) == 64 && u.is_contiguous(),
              "u: (N / 16, K / 32, 8, 64) contiguous uint8");
  TORCH_CHECK(d.dim() == 3 && d.scalar_type() == torch::kFloat16 && d.size(0) == N / 16 &&
                  d.size(1) == G && d.size(2) == 16 && d.is_contiguous(),
              "d: (N / 16, K / 32, 16) contiguous float16");
  x = x.contiguous();
  torch::Tensor y = torch::empty({n, N}, x.options());
#ifdef VIGIL_VNNI
  vigil::vnni_int8_matmul(x.data_ptr<float>(), n, K, u.data_ptr<uint8_t>(),
                          d.data_ptr<at::Half>(), N, y.data_ptr<float>());
#endif
  return y;
}

// Without the GIL while it runs: the worker's event loop (a thread of the same
// process) streams the last step's tokens meanwhile.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_mm", &int4_mm, "int4 weight-only matmul, float32 activations (AVX2)",
        py::call_guard<py::gil_scoped_release>());
  m.def("int8_mm", &int8_mm, "int8 weight-only matmul, float32 activations (AVX2)",
        py::call_guard<py::gil_scoped_release>());
  m.def("vnni_int4_mm", &vnni_int4_mm, "int4 weights, int8 activations (AVX-512 VNNI)",
        py::call_guard<py::gil_scoped_release>());
  m.def("vnni_int8_mm", &vnni_int8_mm, "int8 weights, int8 activations (AVX-512 VNNI)",
        py::call_guard<py::gil_scoped_release>());
  m.attr("has_vnni") = vigil::kHasVnni;
}
