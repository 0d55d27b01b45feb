// Every decoder layer of a Llama decode step in one call, for `--quantization int4`
// on CPU.
//
// At a handful of rows a step's matmuls are small (about 4 ms of int4 weights at one
// row) and the rest of the step is dispatch: about 25 PyTorch ops a layer, each a
// Python call, over 30 layers. Here a layer is
//
//   x += o(attention(rope(qkv(norm1(x)))));  x += down(silu(gate) * up(norm2(x)))
//
// with the norms, RoPE, the KV writes, the decode attention (decode_attention.h),
// SiLU and the residual adds as plain loops over the rows, and each linear one call
// of the int4 kernel its Int4Linear uses (model/packed.py): ATen's packed one
// (_weight_int4pack_mm_for_cpu, bfloat16 activations), packed_matmul.h's (AVX2, float32
// activations) or vnni_matmul.h's (int8 activations); the same kernel and weights as
// the Python path, so the same numbers up to float rounding. A linear may be int8 in
// vnni_matmul.h's layout too (a GGUF file's 5-8-bit tensors beside its 4-bit ones, or
// --quantization int8). RoPE is the rotate-half form: x * cos + roll(x, D / 2) * sin_signed.
//
// x (n, C) float32 is updated in place and returned; the final norm and the head stay
// in Python. cos, sin_signed: (n, D). kv: (layers, 2, S, KVH, D) float32, contiguous.
// slot_mapping (n,): where each row's K/V goes; slots (n, Lmax), lens (n,): each row's
// context, its new token included. norms: 2 per layer (input, post-attention);
// linears: 2 tensors (packed weight, scales) for each of qkv, o, gate_up and down, per
// layer, as Int4Linear (or, VNNI's, Int8Linear) holds them.
#include <torch/extension.h>

#include <cmath>
#include <vector>

#include "decode_attention.h"
#include "packed_matmul.h"
#include "vnni_matmul.h"

namespace {

void rms_norm(const float* x, int64_t n, int64_t C, const float* w, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * C;
    float ss = 0.f;
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float inv = 1.f / std::sqrt(ss / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; ++c) out[t * C + c] = xr[c] * inv * w[c];
  }
}

// The three layouts of packed.pack_int4, told apart by the scales' dtype, and VNNI's
// of packed.pack_int8, by the scales' rank (3 where int4's have 4).
enum class Layout { kAten, kAvx2, kVnni, kVnniInt8 };

struct Linear {
  torch::Tensor packed, scales;
  Layout layout;
  int64_t in_features, out_features;

  Linear(const torch::Tensor& packed_, const torch::Tensor& scales_, int64_t i)
      : packed(packed_), scales(scales_) {
    TORCH_CHECK(packed.scalar_type() == torch::kUInt8, "linear ", i, ": packed uint8 weights");
    const auto dtype = scales.scalar_type();
    if (dtype == torch::kFloat32) {  // q (N, K / 2), dm (N, K / 32, 2): read raw, so checked
      layout = Layout::kAvx2;
      TORCH_CHECK(scales.dim() == 3 && scales.size(2) == 2, "linear ", i, ": (N, K / 32, 2) scales");
      out_features = scales.size(0);
      in_features = scales.size(1) * vigil::kInt4Group;
      TORCH_CHECK(scales.is_contiguous() && packed.is_contiguous() && packed.dim() == 2 &&
                      packed.size(0) == out_features && packed.size(1) == in_features / 2,
                  "linear ", i, ": (N, K / 2) uint8 and (N, K / 32, 2) float32, contiguous");
    } else if (dtype == torch::kFloat16 && scales.dim() == 3) {  // VNNI int8: checked whole
      layout = Layout::kVnniInt8;
      TORCH_CHECK(vigil::kHasVnni, "linear ", i, ": VNNI weights, and no VNNI in this build");
      TORCH_CHECK(scales.size(2) == 16 && scales.is_contiguous(),
                  "linear ", i, ": (N / 16, K / 32, 16) contiguous float16 scales");
      out_features = scales.size(0) * 16;
      in_features = scales.size(1) * vigil::kInt4Group;
      TORCH_CHECK(packed.dim() == 4 && packed.size(0) == scales.size(0) &&
                      packed.size(1) == scales.size(1) && packed.size(2) == 8 &&
                      packed.size(3) == 64 && packed.is_contiguous(),
                  "linear ", i, ": (N / 16, K / 32, 8, 64) contiguous uint8 weights");
    } else if (dtype == torch::kFloat16) {  // vnni_matmul.h's: checked whole too
      layout = Layout::kVnni;
      TORCH_CHECK(vigil::kHasVnni, "linear ", i, ": VNNI weights, and no VNNI in this build");
      TORCH_CHECK(scales.dim() == 4 && scales.size(2) == 2 && scales.size(3) == 16 &&
                      scales.is_contiguous(),
                  "linear ", i, ": (N / 16, K / 32, 2, 16) contiguous float16 scales");
      out_features = scales.size(0) * 16;
      in_features = scales.size(1) * vigil::kInt4Group;
      TORCH_CHECK(packed.dim() == 4 && packed.size(0) == scales.size(0) &&
                      packed.size(1) == scales.size(1) && packed.size(2) == 4 &&
                      packed.size(3) == 64 && packed.is_contiguous(),
                  "linear ", i, ": (N / 16, K / 32, 4, 64) contiguous uint8 weights");
    } else {  // ATen's packing, (K / 32, N, 2) bfloat16 scales: ATen checks the rest
      layout = Layout::kAten;
      TORCH_CHECK(dtype == torch::kBFloat16 && scales.dim() == 3 && scales.size(2) == 2,
                  "linear ", i, ": scales must be float32, float16 or bfloat16");
      out_features = scales.size(1);
      in_features = scales.size(0) * vigil::kInt4Group;
    }
  }

  // in (n, K) float32 -> out (n, N) float32. ATen's kernel takes its rows in
  // `scratch`, an (n, K) bfloat16 tensor: converted here, so that it costs no more
  // PyTorch ops than the one matmul.
  void operator()(const float* in, int64_t n, torch::Tensor& scratch, float* out) const {
    if (layout == Layout::kAvx2) {
      vigil::int4_matmul(in, n, in_features, packed.data_ptr<uint8_t>(), scales.data_ptr<float>(),
                         out_features, out);
      return;
    }
#ifdef VIGIL_VNNI
    if (layout == Layout::kVnni) {
      vigil::vnni_int4_matmul(in, n, in_features, packed.data_ptr<uint8_t>(),
                              scales.data_ptr<at::Half>(), out_features, out);
      return;
    }
    if (layout == Layout::kVnniInt8) {
      vigil::vnni_int8_matmul(in, n, in_features, packed.data_ptr<uint8_t>(),
                              scales.data_ptr<at::Half>(), out_features, out);
      return;
    }
#endif
    at::BFloat16* rows = scratch.data_ptr<at::BFloat16>();
    for (int64_t i = 0; i < n * in_features; ++i) rows[i] = static_cast<at::BFloat16>(in[i]);
    const torch::Tensor y =
        at::_weight_int4pack_mm_for_cpu(scratch, packed, vigil::kInt4Group, scales);
    const at::BFloat16* yp = y.data_ptr<at::BFloat16>();
    for (int64_t i = 0; i < n * out_features; ++i) out[i] = static_cast<float>(yp[i]);
  }
};

}  // namespace

torch::Tensor decode_layers(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                            torch::Tensor kv, torch::Tensor slot_mapping, torch::Tensor slots,
                            torch::Tensor lens, std::vector<torch::Tensor> norms,
                            std::vector<torch::Tensor> linears, int64_t H, int64_t KVH,
                            double eps) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x: (n, C) contiguous float32");
  TORCH_CHECK(kv.dim() == 5 && kv.scalar_type() == torch::kFloat32 && kv.is_contiguous() &&
                  kv.size(1) == 2 && kv.size(3) == KVH,
              "kv: (layers, 2, S, KVH, D) contiguous float32");
  const int64_t n = x.size(0), C = x.size(1), L = kv.size(0), S = kv.size(2), D = kv.size(4);
  TORCH_CHECK(cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32 &&
                  cos.is_contiguous() && sin.is_contiguous() && cos.numel() == n * D &&
                  sin.numel() == n * D,
              "cos, sin: (n, D) contiguous float32");
  TORCH_CHECK(slot_mapping.scalar_type() == torch::kInt64 && slot_mapping.numel() == n &&
                  slots.scalar_type() == torch::kInt64 && slots.dim() == 2 &&
                  slots.size(0) == n && lens.scalar_type() == torch::kInt64 && lens.numel() == n,
              "slot_mapping (n,), slots (n, Lmax), lens (n,): int64");
  TORCH_CHECK(norms.size() == static_cast<size_t>(2 * L) &&
                  linears.size() == static_cast<size_t>(8 * L),
              "2 norms and 4 linears (2 tensors each) per layer");
  TORCH_CHECK(H % KVH == 0 && D % 2 == 0, "query heads must be a multiple of KV heads");
  slot_mapping = slot_mapping.contiguous();
  slots = slots.contiguous();
  lens = lens.contiguous();
  const int64_t Lmax = slots.size(1);
  const int64_t* slot_of = slot_mapping.data_ptr<int64_t>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  for (int64_t t = 0; t < n; ++t) {
    TORCH_CHECK(slot_of[t] >= 0 && slot_of[t] < S, "slot_mapping out of range");
    TORCH_CHECK(lp[t] >= 1 && lp[t] <= Lmax, "lens out of range");
    for (int64_t l = 0; l < lp[t]; ++l)
      TORCH_CHECK(sp[t * Lmax + l] >= 0 && sp[t * Lmax + l] < S, "slots out of range");
  }

  // Each linear's shape, from its scales, checked against the model's shapes so a
  // wrong weight list fails here, not as a wild read.
  const int64_t QKV = (H + 2 * KVH) * D;
  std::vector<Linear> w;
  for (int64_t i = 0; i < 4 * L; ++i) w.emplace_back(linears[2 * i], linears[2 * i + 1], i);
  const int64_t I2 = w[2].out_features, I = I2 / 2;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t widths[4] = {QKV, C, I2, C};
    const int64_t inputs[4] = {C, H * D, C, I};
    for (int64_t j = 0; j < 4; ++j)
      TORCH_CHECK(w[4 * l + j].out_features == widths[j] && w[4 * l + j].in_features == inputs[j],
                  "layer ", l, ": linear ", j, " does not match the model's shapes");
    for (int64_t j = 0; j < 2; ++j)
      TORCH_CHECK(norms[2 * l + j].scalar_type() == torch::kFloat32 &&
                      norms[2 * l + j].is_contiguous() && norms[2 * l + j].numel() == C,
                  "layer ", l, ": norm weights must be (C,) float32");
  }

  // Each linear's input and output, float32; and the input as ATen's kernel takes it.
  std::vector<float> h(n * C), a(n * H * D), act(n * I), qkv(n * QKV), gu(n * I2), proj(n * C);
  std::vector<float> q(n * H * D);
  const auto bf16 = x.options().dtype(torch::kBFloat16);
  torch::Tensor h16 = torch::empty({n, C}, bf16), a16 = torch::empty({n, H * D}, bf16),
                act16 = torch::empty({n, I}, bf16);
  float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* snp = sin.data_ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const float feps = static_cast<float>(eps);
  const int64_t half = D / 2, slot_stride = KVH * D;
  auto add_proj_to_x = [&]() {
    for (int64_t i = 0; i < n * C; ++i) xp[i] += proj[i];
  };

  for (int64_t l = 0; l < L; ++l) {
    float* k_cache = kv.data_ptr<float>() + 2 * l * S * slot_stride;
    float* v_cache = k_cache + S * slot_stride;
    rms_norm(xp, n, C, norms[2 * l].data_ptr<float>(), feps, h.data());
    w[4 * l](h.data(), n, h16, qkv.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = qkv.data() + t * QKV;
      const float* c = cp + t * D;
      const float* s = snp + t * D;
      float* k_slot = k_cache + slot_of[t] * slot_stride;
      for (int64_t head = 0; head < H + KVH; ++head) {  // queries, then keys: rotated
        const float* v = row + head * D;
        float* dst = head < H ? q.data() + (t * H + head) * D : k_slot + (head - H) * D;
        for (int64_t d = 0; d < half; ++d) dst[d] = v[d] * c[d] + v[d + half] * s[d];
        for (int64_t d = half; d < D; ++d) dst[d] = v[d] * c[d] + v[d - half] * s[d];
      }
      float* v_slot = v_cache + slot_of[t] * slot_stride;
      for (int64_t i = 0; i < KVH * D; ++i) v_slot[i] = row[(H + KVH) * D + i];
    }
    vigil::decode_attention(q.data(), n, H, D, k_cache, v_cache, KVH, slot_stride, sp, Lmax, lp,
                            scale, a.data());
    w[4 * l + 1](a.data(), n, a16, proj.data());
    add_proj_to_x();
    rms_norm(xp, n, C, norms[2 * l + 1].data_ptr<float>(), feps, h.data());
    w[4 * l + 2](h.data(), n, h16, gu.data());
    for (int64_t t = 0; t < n; ++t) {  // a loop the compiler vectorizes, exp too
      const float* g = gu.data() + t * I2;
      const float* u = g + I;
      float* o = act.data() + t * I;
      for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    }
    w[4 * l + 3](act.data(), n, act16, proj.data());
    add_proj_to_x();
  }
  return x;
}

// Without the GIL while it runs: the worker's event loop (a thread of the same
// process) streams the last step's tokens meanwhile.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_layers", &decode_layers, "every decoder layer of an all-decode int4 step",
        py::call_guard<py::gil_scoped_release>());
}
