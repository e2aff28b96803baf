// The LSTM's loops for CPU tensors: the scan's forward and backward and the advance by one token of
// rnnlm/models/cells/lstm.py (its Python twin, with the same inputs, outputs and maths), registered as "lstm".
// Gate order in a row: i, f, o, g. The state has two entries, h and c.

#include "kernels.h"

namespace rnnlm::cells::lstm {
namespace {

// ---------------------------------------------------------------- one row of a forward time step

// The gate maths of one batch row, shared by the scan's forward and the sampling advance. `bias` is
// null for the sampling advance, whose input products already carry the biases; `mask` is null when
// there is no dropout.

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
  const NarrowProduct times_hh(weight_hh, B, T);
  Tensor h = h0.contiguous();
  const Tensor c = c0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(products.scalar_type(), "lstm_forward", [&] {
    const scalar_t* bias_p = bias.data_ptr<scalar_t>();
    // step t's rows by pointer arithmetic: a tensor view per time step costs a dispatch each
    scalar_t* gates_p = gates.data_ptr<scalar_t>();
    scalar_t* cs_p = cs.data_ptr<scalar_t>();
    scalar_t* hs_p = hs.data_ptr<scalar_t>();
    const scalar_t* c_p = c.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      Tensor hidden = times_hh(h);  // (B, 4H) = h_prev W_hh^T
      const scalar_t* hid_p = hidden.data_ptr<scalar_t>();
      scalar_t* g_t = gates_p + t * B * 4 * H;  // the products, overwritten with the gates
      scalar_t* cs_t = cs_p + t * B * H;
      scalar_t* hs_t = hs_p + t * B * H;
      for_rows(B, 4 * H, [&](int64_t b) {
        lstm_row(g_t + b * 4 * H, bias_p, hid_p + b * 4 * H, g_t + b * 4 * H, c_p + b * H, cs_t + b * H,
                 mask_row<scalar_t>(masks, t, b, B, H), hs_t + b * H, H);
      });
      h = hs[t];
      c_p = cs_t;
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
  const NarrowProduct times_hh_t(weight_hh.t(), B, T);
  Tensor grad_h = at::zeros({B, H}, cs.options());
  Tensor grad_c = grad_c_last.contiguous().clone();
  Tensor c0c = c0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(cs.scalar_type(), "lstm_backward", [&] {
    const Vec<scalar_t> one(1);
    scalar_t* gc_p = grad_c.data_ptr<scalar_t>();
    scalar_t* gates_p = gates.data_ptr<scalar_t>();
    const scalar_t* cs_p = cs.data_ptr<scalar_t>();
    const scalar_t* go_p = grad_hs.data_ptr<scalar_t>();
    for (int64_t t = T - 1; t >= 0; --t) {
      const scalar_t* gh_p = grad_h.data_ptr<scalar_t>();
      const scalar_t* g_t = gates_p + t * B * 4 * H;
      scalar_t* gg_t = gates_p + t * B * 4 * H;
      const scalar_t* c_t = cs_p + t * B * H;
      const scalar_t* cp_t = t == 0 ? c0c.data_ptr<scalar_t>() : c_t - B * H;
      const scalar_t* go_t = go_p + t * B * H;
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

// ---------------------------------------------------------------- one token, for sampling

// No autograd, nothing saved, the input side already done: gates_x holds the input-side products
// with every bias added, the hidden-side matrices come transposed. One call replaces the five to
// seven ATen calls a Python step makes, most of a time step's time at batch 1 for the smaller models.

// gates_x (B, 4H), h, c (B, H), hh_t (H, 4H) -> the new h and c (B, H).
std::tuple<Tensor, Tensor> lstm_advance(const Tensor& gates_x_in, const Tensor& h_in, const Tensor& c_in, const Tensor& hh_t) {
  const Tensor gates_x = gates_x_in.contiguous(), c = c_in.contiguous();
  const int64_t B = c.size(0), H = c.size(1);
  Tensor hidden = narrow_product(h_in, hh_t);  // (B, 4H)
  Tensor h_new = at::empty_like(c), c_new = at::empty_like(c);
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "lstm_advance", [&] {
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

std::vector<Tensor> layer_advance(const Tensor& gates_x, const std::vector<Tensor>& state, const std::vector<Tensor>& hidden_t) {
  if (state.empty()) {
    const Tensor zeros = at::zeros({gates_x.size(0), hidden_t[0].size(0)}, gates_x.options());
    auto [h, c] = lstm_advance(gates_x, zeros, zeros, hidden_t[0]);
    return {h, c};
  }
  auto [h, c] = lstm_advance(gates_x, state[0], state[1], hidden_t[0]);
  return {h, c};
}

void bind(pybind11::module_& m) {
  m.def("lstm_forward", &lstm_forward);
  m.def("lstm_backward", &lstm_backward);
  m.def("lstm_advance", &lstm_advance);
}

const RegisterCell registered("lstm", {&layer_advance, &bind});

}  // namespace
}  // namespace rnnlm::cells::lstm
