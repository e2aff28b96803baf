// The per-step loops of rnnlm.scans and the one-token steps of rnnlm.stepping, for tensors on the CPU.
//
// Same inputs, outputs and maths as the Python loops in rnnlm/scan_loops.py (tests hold the two to
// each other and to the cells' readable steps). Like them, a forward overwrites its input products
// with the activated gates and a backward overwrites those with the gates' gradients: each
// (T, B, G*H) array is written once, in memory that is already mapped and warm. What changes:
// - each step's elementwise work is one pass over the step's rows (where the Python loop makes five
//   to ten ATen calls), with ATen's vectorised exp/tanh (at::vec::Vectorized, the code behind
//   torch.sigmoid and torch.tanh) and at::parallel_for over the batch rows;
// - the hidden-side products, one matrix used at all T steps, go through MKL's packed GEMM for
//   float32 when the sequence is long enough (see StepProduct), about 1.3x faster per product
//   here than a plain at::mm.
//
// Shapes: T steps, B batch, H hidden units, G gates; all arrays time-major and contiguous.
// Gate order in a row: GRU r, z, n; LSTM i, f, o, g.

#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cpu/vec/vec.h>

#include <optional>
#include <tuple>

namespace {

using at::Tensor;
template <typename scalar_t>
using Vec = at::vec::Vectorized<scalar_t>;

// A batch row per task; a chunk of rows runs on one thread when a step has enough work to share.
constexpr int64_t kElementsPerTask = 16384;

template <typename F>
void for_rows(int64_t rows, int64_t row_width, const F& body) {
  const int64_t grain = std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, row_width));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) body(b);
  });
}

// body(j, count) over [0, n) in vector-sized pieces; the last piece may be shorter.
template <typename scalar_t, typename F>
inline void for_lanes(int64_t n, const F& body) {
  constexpr int64_t width = Vec<scalar_t>::size();
  int64_t j = 0;
  for (; j + width <= n; j += width) body(j, width);
  if (j < n) body(j, n - j);
}

template <typename scalar_t>
inline Vec<scalar_t> load(const scalar_t* p, int64_t count) {
  return count == Vec<scalar_t>::size() ? Vec<scalar_t>::loadu(p) : Vec<scalar_t>::loadu(p, count);
}

template <typename scalar_t>
inline void store(const Vec<scalar_t>& v, scalar_t* p, int64_t count) {
  if (count == Vec<scalar_t>::size()) {
    v.store(p);
  } else {
    v.store(p, count);
  }
}

template <typename scalar_t>
inline Vec<scalar_t> sigmoid(const Vec<scalar_t>& x) {
  const Vec<scalar_t> one(1);
  return one / (one + x.neg().exp());
}

// mask (T, B, H) at step t, row b, or nullptr.
template <typename scalar_t>
inline const scalar_t* mask_row(const std::optional<Tensor>& masks, int64_t t, int64_t b, int64_t B, int64_t H) {
  return masks ? masks->data_ptr<scalar_t>() + (t * B + b) * H : nullptr;
}

std::optional<Tensor> contiguous(const std::optional<Tensor>& t) {
  return t ? std::optional<Tensor>(t->contiguous()) : std::nullopt;
}

// The arrays written in place must be contiguous: a copy would leave the caller's tensor unchanged.
void check_in_place(const Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous: it is overwritten in place");
}

// ---------------------------------------------------------------- products

// PyTorch's own ops for MKL's packed GEMM (what it uses for frozen nn.Linear layers on x86), looked
// up once; absent from builds without MKL.
struct PackedGemmOps {
  c10::TypedOperatorHandle<Tensor(const Tensor&, int64_t)> reorder;
  c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t)> linear;
};

const PackedGemmOps* packed_gemm_ops() {
  static const std::optional<PackedGemmOps> ops = []() -> std::optional<PackedGemmOps> {
    auto& dispatcher = c10::Dispatcher::singleton();
    auto reorder = dispatcher.findSchema({"mkl::_mkl_reorder_linear_weight", ""});
    auto linear = dispatcher.findSchema({"mkl::_mkl_linear", ""});
    if (!reorder || !linear) return std::nullopt;
    return PackedGemmOps{
        reorder->typed<Tensor(const Tensor&, int64_t)>(),
        linear->typed<Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t)>()};
  }();
  return ops ? &*ops : nullptr;
}

// x (B, K) -> x W^T (B, N) for one matrix W (N, K) used at each of `steps` steps. For float32 with
// MKL and a sequence long enough to repay it, W is reordered once into MKL's packed layout (about
// the cost of two products) and each product reuses it; otherwise (float64, builds without MKL,
// a prompt of a few tokens, a one-token window of the evaluation) a plain at::mm on W as it is.
class StepProduct {
 public:
  static constexpr int64_t kMinStepsToPack = 4;

  StepProduct(const Tensor& weight, int64_t batch, int64_t steps) : weight_(weight), batch_(batch) {
    const PackedGemmOps* ops = packed_gemm_ops();
    if (ops && weight.scalar_type() == at::kFloat && steps >= kMinStepsToPack) {
      weight_ = weight.contiguous();
      packed_ = ops->reorder.call(weight_, batch_);
    }
  }

  Tensor operator()(const Tensor& x) const {
    if (packed_.defined()) return packed_gemm_ops()->linear.call(x, packed_, weight_, std::nullopt, batch_);
    return at::mm(x, weight_.t());
  }

 private:
  Tensor weight_, packed_;
  int64_t batch_;
};

// ---------------------------------------------------------------- one row of a forward step

// The gate maths of one batch row, shared by the scans' forward and the sampling step. `bias` is
// null for the sampling step, whose input products already carry the biases; `mask` is null when
// there is no dropout; pre-activations are summed as x + bias + hidden.

template <typename scalar_t>
inline Vec<scalar_t> pre_activation(const scalar_t* x, const scalar_t* bias, const scalar_t* hidden, int64_t j, int64_t n) {
  auto pre = load(x + j, n);
  if (bias) pre = pre + load(bias + j, n);
  return pre + load(hidden + j, n);
}

// GRU, r and z: rz[j] = sigmoid(x + bias + hidden) for j < 2H (rz may be hidden itself), then
// reset_h = r * h_prev.
template <typename scalar_t>
inline void gru_gates_row(const scalar_t* x, const scalar_t* bias, const scalar_t* hidden, scalar_t* rz,
                          const scalar_t* h_prev, scalar_t* reset_h, int64_t H) {
  for_lanes<scalar_t>(2 * H, [&](int64_t j, int64_t n) { store(sigmoid(pre_activation(x, bias, hidden, j, n)), rz + j, n); });
  for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) { store(load(rz + j, n) * load(h_prev + j, n), reset_h + j, n); });
}

// GRU, candidate and state: candidate = tanh(x_n + bias_n + hidden_n), kept unless `candidate_out`
// is null; h_new = ((1 - z) h_prev + z candidate) * mask.
template <typename scalar_t>
inline void gru_state_row(const scalar_t* x_n, const scalar_t* bias_n, const scalar_t* hidden_n, scalar_t* candidate_out,
                          const scalar_t* z, const scalar_t* h_prev, const scalar_t* mask, scalar_t* h_new, int64_t H) {
  for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
    auto candidate = pre_activation(x_n, bias_n, hidden_n, j, n).tanh();
    if (candidate_out) store(candidate, candidate_out + j, n);
    auto h = load(h_prev + j, n);
    auto next = h + load(z + j, n) * (candidate - h);
    if (mask) next = next * load(mask + j, n);
    store(next, h_new + j, n);
  });
}

// LSTM: gates i, f, o = sigmoid, g = tanh of x + bias + hidden (kept unless `gates_out` is null);
// c_new = f c_prev + i g; h_new = o tanh(c_new) * mask.
template <typename scalar_t>
inline void lstm_row(const scalar_t* x, const scalar_t* bias, const scalar_t* hidden, scalar_t* gates_out,
                     const scalar_t* c_prev, scalar_t* c_new, const scalar_t* mask, scalar_t* h_new, int64_t H) {
  for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
    auto pre = [&](int64_t k) { return pre_activation(x + k * H, bias ? bias + k * H : nullptr, hidden + k * H, j, n); };
    auto i = sigmoid(pre(0)), f = sigmoid(pre(1)), o = sigmoid(pre(2)), g = pre(3).tanh();
    if (gates_out) {
      store(i, gates_out + j, n);
      store(f, gates_out + H + j, n);
      store(o, gates_out + 2 * H + j, n);
      store(g, gates_out + 3 * H + j, n);
    }
    auto c = f * load(c_prev + j, n) + i * g;
    store(c, c_new + j, n);
    auto h = o * c.tanh();
    if (mask) h = h * load(mask + j, n);
    store(h, h_new + j, n);
  });
}

// The gradient w.r.t. a step's new state before its mask, lanes j..j+n of one row:
// (output gradient + gradient carried from the next step) * mask (mask may be null).
template <typename scalar_t>
inline Vec<scalar_t> grad_into_state(const scalar_t* grad_out, const scalar_t* carried, const scalar_t* mask, int64_t j, int64_t n) {
  auto grad = load(grad_out + j, n) + load(carried + j, n);
  return mask ? grad * load(mask + j, n) : grad;
}

// ---------------------------------------------------------------- GRU

// products (T, B, 3H), overwritten with the activated gates (r, z, candidate); h0 (B, H);
// weight_hh (3H, H), bias_ih (3H), bias_rz (2H), masks (T, B, H)?
// -> hs (T, B, H), reset_h (T, B, H) = r * h_prev.
std::tuple<Tensor, Tensor> gru_forward(
    Tensor products, Tensor h0, Tensor weight_hh, Tensor bias_ih, Tensor bias_rz, std::optional<Tensor> masks) {
  check_in_place(products, "products");
  masks = contiguous(masks);
  const int64_t T = products.size(0), B = products.size(1), H = h0.size(1);
  const Tensor& gates = products;
  Tensor reset_h = at::empty({T, B, H}, products.options());
  Tensor hs = at::empty({T, B, H}, products.options());
  Tensor bias = at::cat({bias_ih.slice(0, 0, 2 * H) + bias_rz, bias_ih.slice(0, 2 * H)}).contiguous();  // (3H)
  const StepProduct times_rz(weight_hh.slice(0, 0, 2 * H), B, T), times_n(weight_hh.slice(0, 2 * H), B, T);
  Tensor h = h0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(products.scalar_type(), "gru_forward", [&] {
    const scalar_t* bias_p = bias.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      Tensor hidden_rz = times_rz(h);  // (B, 2H) = h_prev W_rz^T
      const scalar_t* h_p = h.data_ptr<scalar_t>();
      scalar_t* gates_t = gates[t].data_ptr<scalar_t>();
      const scalar_t* x_t = products[t].data_ptr<scalar_t>();
      scalar_t* reset_t = reset_h[t].data_ptr<scalar_t>();
      const scalar_t* hrz_p = hidden_rz.data_ptr<scalar_t>();
      for_rows(B, 3 * H, [&](int64_t b) {
        gru_gates_row(x_t + b * 3 * H, bias_p, hrz_p + b * 2 * H, gates_t + b * 3 * H, h_p + b * H, reset_t + b * H, H);
      });
      Tensor hidden_n = times_n(reset_h[t]);  // (B, H) = (r * h_prev) W_n^T
      scalar_t* hs_t = hs[t].data_ptr<scalar_t>();
      const scalar_t* hn_p = hidden_n.data_ptr<scalar_t>();
      for_rows(B, 3 * H, [&](int64_t b) {
        scalar_t* g = gates_t + b * 3 * H;
        gru_state_row(x_t + b * 3 * H + 2 * H, bias_p + 2 * H, hn_p + b * H, g + 2 * H, g + H, h_p + b * H,
                      mask_row<scalar_t>(masks, t, b, B, H), hs_t + b * H, H);
      });
      h = hs[t];
    }
  });
  return {hs, reset_h};
}

// grad_hs (T, B, H), h0, weight_hh, gates, hs, masks as saved by gru_forward; gates is overwritten
// with their gradients w.r.t. the pre-activations -> grad_h0 (B, H).
Tensor gru_backward(
    Tensor grad_hs, Tensor h0, Tensor weight_hh, Tensor gates, Tensor hs, std::optional<Tensor> masks) {
  check_in_place(gates, "gates");
  grad_hs = grad_hs.contiguous();
  masks = contiguous(masks);
  const int64_t T = hs.size(0), B = hs.size(1), H = hs.size(2);
  const Tensor& grad_gates = gates;  // each lane reads its gates before writing their gradients
  const StepProduct times_rz_t(weight_hh.slice(0, 0, 2 * H).t(), B, T), times_n_t(weight_hh.slice(0, 2 * H).t(), B, T);
  Tensor grad_h = at::zeros({B, H}, hs.options());  // carried to the previous step
  Tensor h0c = h0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(hs.scalar_type(), "gru_backward", [&] {
    const Vec<scalar_t> one(1);
    scalar_t* gh_p = grad_h.data_ptr<scalar_t>();
    for (int64_t t = T - 1; t >= 0; --t) {
      const scalar_t* g_t = gates[t].data_ptr<scalar_t>();
      const scalar_t* hp_t = t == 0 ? h0c.data_ptr<scalar_t>() : hs[t - 1].data_ptr<scalar_t>();
      const scalar_t* go_t = grad_hs[t].data_ptr<scalar_t>();
      scalar_t* gg_t = grad_gates[t].data_ptr<scalar_t>();
      // gradient w.r.t. the candidate and z; grad_h keeps its direct path (1 - z) * grad
      for_rows(B, 3 * H, [&](int64_t b) {
        const scalar_t* g = g_t + b * 3 * H;
        scalar_t* gg = gg_t + b * 3 * H;
        const scalar_t* mask = mask_row<scalar_t>(masks, t, b, B, H);
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto grad = grad_into_state(go_t + b * H, gh_p + b * H, mask, j, n);
          auto z = load(g + H + j, n), candidate = load(g + 2 * H + j, n);
          auto grad_through_z = grad * z;
          store(grad_through_z * (one - candidate * candidate), gg + 2 * H + j, n);
          store(grad * (candidate - load(hp_t + b * H + j, n)) * z * (one - z), gg + H + j, n);
          store(grad - grad_through_z, gh_p + b * H + j, n);
        });
      });
      Tensor grad_reset_h = times_n_t(grad_gates[t].slice(1, 2 * H));  // (B, H), w.r.t. r * h_prev
      const scalar_t* grh_p = grad_reset_h.data_ptr<scalar_t>();
      for_rows(B, 3 * H, [&](int64_t b) {
        const scalar_t* g = g_t + b * 3 * H;
        scalar_t* gg = gg_t + b * 3 * H;
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto r = load(g + j, n), grh = load(grh_p + b * H + j, n);
          store(grh * load(hp_t + b * H + j, n) * r * (one - r), gg + j, n);
          store(load(gh_p + b * H + j, n) + grh * r, gh_p + b * H + j, n);
        });
      });
      grad_h.add_(times_rz_t(grad_gates[t].slice(1, 0, 2 * H)));  // through r and z
    }
  });
  return grad_h;
}

// ---------------------------------------------------------------- LSTM

// products (T, B, 4H), overwritten with the activated gates (i, f, o sigmoid; g tanh); h0, c0 (B, H);
// weight_hh (4H, H), bias_ih (4H), masks (T, B, H)? -> hs (T, B, H), cs (T, B, H).
std::tuple<Tensor, Tensor> lstm_forward(
    Tensor products, Tensor h0, Tensor c0, Tensor weight_hh, Tensor bias_ih, std::optional<Tensor> masks) {
  check_in_place(products, "products");
  masks = contiguous(masks);
  const int64_t T = products.size(0), B = products.size(1), H = h0.size(1);
  const Tensor& gates = products;
  Tensor hs = at::empty({T, B, H}, products.options());
  Tensor cs = at::empty({T, B, H}, products.options());
  Tensor bias = bias_ih.contiguous();
  const StepProduct times_hh(weight_hh, B, T);
  Tensor h = h0.contiguous(), c = c0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(products.scalar_type(), "lstm_forward", [&] {
    const scalar_t* bias_p = bias.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      Tensor hidden = times_hh(h);  // (B, 4H) = h_prev W_hh^T
      const scalar_t* x_t = products[t].data_ptr<scalar_t>();
      const scalar_t* hid_p = hidden.data_ptr<scalar_t>();
      const scalar_t* c_p = c.data_ptr<scalar_t>();
      scalar_t* g_t = gates[t].data_ptr<scalar_t>();
      scalar_t* cs_t = cs[t].data_ptr<scalar_t>();
      scalar_t* hs_t = hs[t].data_ptr<scalar_t>();
      for_rows(B, 4 * H, [&](int64_t b) {
        lstm_row(x_t + b * 4 * H, bias_p, hid_p + b * 4 * H, g_t + b * 4 * H, c_p + b * H, cs_t + b * H,
                 mask_row<scalar_t>(masks, t, b, B, H), hs_t + b * H, H);
      });
      h = hs[t];
      c = cs[t];
    }
  });
  return {hs, cs};
}

// grad_hs (T, B, H), grad_c_last (B, H), c0, weight_hh, gates, cs, masks as saved by lstm_forward;
// gates is overwritten with their gradients w.r.t. the pre-activations -> grad_h0, grad_c0 (B, H).
std::tuple<Tensor, Tensor> lstm_backward(
    Tensor grad_hs, Tensor grad_c_last, Tensor c0, Tensor weight_hh, Tensor gates, Tensor cs,
    std::optional<Tensor> masks) {
  check_in_place(gates, "gates");
  grad_hs = grad_hs.contiguous();
  masks = contiguous(masks);
  const int64_t T = cs.size(0), B = cs.size(1), H = cs.size(2);
  const Tensor& grad_gates = gates;  // each lane reads its gates before writing their gradients
  const StepProduct times_hh_t(weight_hh.t(), B, T);
  Tensor grad_h = at::zeros({B, H}, cs.options());
  Tensor grad_c = grad_c_last.contiguous().clone();
  Tensor c0c = c0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(cs.scalar_type(), "lstm_backward", [&] {
    const Vec<scalar_t> one(1);
    scalar_t* gc_p = grad_c.data_ptr<scalar_t>();
    for (int64_t t = T - 1; t >= 0; --t) {
      const scalar_t* gh_p = grad_h.data_ptr<scalar_t>();
      const scalar_t* g_t = gates[t].data_ptr<scalar_t>();
      const scalar_t* c_t = cs[t].data_ptr<scalar_t>();
      const scalar_t* cp_t = t == 0 ? c0c.data_ptr<scalar_t>() : cs[t - 1].data_ptr<scalar_t>();
      const scalar_t* go_t = grad_hs[t].data_ptr<scalar_t>();
      scalar_t* gg_t = grad_gates[t].data_ptr<scalar_t>();
      for_rows(B, 4 * H, [&](int64_t b) {
        const scalar_t* g = g_t + b * 4 * H;
        scalar_t* gg = gg_t + b * 4 * H;
        const scalar_t* mask = mask_row<scalar_t>(masks, t, b, B, H);
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          const int64_t cell = b * H + j;
          auto grad = grad_into_state(go_t + b * H, gh_p + b * H, mask, j, n);  // w.r.t. h
          auto i = load(g + j, n), f = load(g + H + j, n), o = load(g + 2 * H + j, n), cand = load(g + 3 * H + j, n);
          auto tanh_c = load(c_t + cell, n).tanh();
          auto grad_c_here = load(gc_p + cell, n) + grad * o * (one - tanh_c * tanh_c);  // through h = o tanh(c)
          store(grad_c_here * cand * i * (one - i), gg + j, n);
          store(grad_c_here * load(cp_t + cell, n) * f * (one - f), gg + H + j, n);
          store(grad * tanh_c * o * (one - o), gg + 2 * H + j, n);
          store(grad_c_here * i * (one - cand * cand), gg + 3 * H + j, n);
          store(grad_c_here * f, gc_p + cell, n);
        });
      });
      grad_h = times_hh_t(grad_gates[t]);  // (B, H)
    }
  });
  return {grad_h, grad_c};
}

// ---------------------------------------------------------------- tanh RNN

// products (T, B, H), overwritten with the activations tanh(...); h0 (B, H), weight_hh (H, H),
// bias_ih (H), masks (T, B, H)? -> hs (T, B, H), the activations times the masks.
Tensor rnn_forward(Tensor products, Tensor h0, Tensor weight_hh, Tensor bias_ih, std::optional<Tensor> masks) {
  check_in_place(products, "products");
  masks = contiguous(masks);
  const int64_t T = products.size(0), B = products.size(1), H = h0.size(1);
  const Tensor& activations = products;
  Tensor hs = at::empty_like(products);
  Tensor bias = bias_ih.contiguous();
  const StepProduct times_hh(weight_hh, B, T);
  Tensor h = h0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(products.scalar_type(), "rnn_forward", [&] {
    const scalar_t* bias_p = bias.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      Tensor hidden = times_hh(h);  // (B, H) = h_prev W_hh^T
      const scalar_t* x_t = products[t].data_ptr<scalar_t>();
      const scalar_t* hid_p = hidden.data_ptr<scalar_t>();
      scalar_t* a_t = activations[t].data_ptr<scalar_t>();
      scalar_t* hs_t = hs[t].data_ptr<scalar_t>();
      for_rows(B, H, [&](int64_t b) {
        const int64_t row = b * H;
        const scalar_t* mask = mask_row<scalar_t>(masks, t, b, B, H);
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto a = (load(x_t + row + j, n) + load(bias_p + j, n) + load(hid_p + row + j, n)).tanh();
          store(a, a_t + row + j, n);
          store(mask ? a * load(mask + j, n) : a, hs_t + row + j, n);
        });
      });
      h = hs[t];
    }
  });
  return hs;
}

// grad_hs (T, B, H), weight_hh, activations, masks as saved by rnn_forward; activations is
// overwritten with the gradient w.r.t. the pre-activations -> grad_h0 (B, H).
Tensor rnn_backward(Tensor grad_hs, Tensor weight_hh, Tensor activations, std::optional<Tensor> masks) {
  check_in_place(activations, "activations");
  grad_hs = grad_hs.contiguous();
  masks = contiguous(masks);
  const int64_t T = activations.size(0), B = activations.size(1), H = activations.size(2);
  const Tensor& grad_pre = activations;
  const StepProduct times_hh_t(weight_hh.t(), B, T);
  Tensor grad_h = at::zeros({B, H}, activations.options());
  AT_DISPATCH_FLOATING_TYPES(activations.scalar_type(), "rnn_backward", [&] {
    const Vec<scalar_t> one(1);
    for (int64_t t = T - 1; t >= 0; --t) {
      const scalar_t* gh_p = grad_h.data_ptr<scalar_t>();
      const scalar_t* a_t = activations[t].data_ptr<scalar_t>();
      const scalar_t* go_t = grad_hs[t].data_ptr<scalar_t>();
      scalar_t* gp_t = grad_pre[t].data_ptr<scalar_t>();
      for_rows(B, H, [&](int64_t b) {
        const int64_t row = b * H;
        const scalar_t* mask = mask_row<scalar_t>(masks, t, b, B, H);
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto grad = grad_into_state(go_t + row, gh_p + row, mask, j, n);
          auto a = load(a_t + row + j, n);
          store(grad * (one - a * a), gp_t + row + j, n);
        });
      });
      grad_h = times_hh_t(grad_pre[t]);  // (B, H)
    }
  });
  return grad_h;
}

// ---------------------------------------------------------------- one step, for sampling

// The step of rnnlm.stepping: no autograd, nothing saved, the input side already done. In each,
// gates_x (B, G*H) holds the input-side products with every bias added, and the hidden-side
// matrices come transposed: (H, G*H) views. One call replaces the five to seven ATen calls a
// Python step makes, which is most of a step's time at batch 1 for the smaller models.

// gates_x (B, 3H), h (B, H), rz_t (H, 2H), n_t (H, H) -> the new h (B, H).
Tensor gru_step(const Tensor& gates_x_in, const Tensor& h_in, const Tensor& rz_t, const Tensor& n_t) {
  const Tensor gates_x = gates_x_in.contiguous(), h = h_in.contiguous();
  const int64_t B = h.size(0), H = h.size(1);
  Tensor rz = at::mm(h, rz_t);  // (B, 2H), activated in place
  Tensor reset_h = at::empty_like(h);
  Tensor h_new = at::empty_like(h);
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "gru_step", [&] {
    const scalar_t* gx_p = gates_x.data_ptr<scalar_t>();
    const scalar_t* h_p = h.data_ptr<scalar_t>();
    scalar_t* rz_p = rz.data_ptr<scalar_t>();
    scalar_t* rh_p = reset_h.data_ptr<scalar_t>();
    for_rows(B, 3 * H, [&](int64_t b) {
      scalar_t* rz_b = rz_p + b * 2 * H;  // the hidden-side products, activated in place
      gru_gates_row<scalar_t>(gx_p + b * 3 * H, nullptr, rz_b, rz_b, h_p + b * H, rh_p + b * H, H);
    });
    Tensor hidden_n = at::mm(reset_h, n_t);  // (B, H)
    const scalar_t* hn_p = hidden_n.data_ptr<scalar_t>();
    scalar_t* out_p = h_new.data_ptr<scalar_t>();
    for_rows(B, 3 * H, [&](int64_t b) {
      gru_state_row<scalar_t>(gx_p + b * 3 * H + 2 * H, nullptr, hn_p + b * H, nullptr, rz_p + b * 2 * H + H, h_p + b * H,
                              nullptr, out_p + b * H, H);
    });
  });
  return h_new;
}

// gates_x (B, 4H), h, c (B, H), hh_t (H, 4H) -> the new h and c (B, H).
std::tuple<Tensor, Tensor> lstm_step(const Tensor& gates_x_in, const Tensor& h_in, const Tensor& c_in, const Tensor& hh_t) {
  const Tensor gates_x = gates_x_in.contiguous(), c = c_in.contiguous();
  const int64_t B = c.size(0), H = c.size(1);
  Tensor hidden = at::mm(h_in, hh_t);  // (B, 4H)
  Tensor h_new = at::empty_like(c), c_new = at::empty_like(c);
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "lstm_step", [&] {
    const scalar_t* gx_p = gates_x.data_ptr<scalar_t>();
    const scalar_t* hid_p = hidden.data_ptr<scalar_t>();
    const scalar_t* c_p = c.data_ptr<scalar_t>();
    scalar_t* h_out = h_new.data_ptr<scalar_t>();
    scalar_t* c_out = c_new.data_ptr<scalar_t>();
    for_rows(B, 4 * H, [&](int64_t b) {
      lstm_row<scalar_t>(gx_p + b * 4 * H, nullptr, hid_p + b * 4 * H, nullptr, c_p + b * H, c_out + b * H, nullptr,
                         h_out + b * H, H);
    });
  });
  return {h_new, c_new};
}

// gates_x (B, H), h (B, H), hh_t (H, H) -> the new h (B, H).
Tensor rnn_step(const Tensor& gates_x, const Tensor& h, const Tensor& hh_t) {
  return at::addmm(gates_x, h, hh_t).tanh_();
}

}  // namespace
