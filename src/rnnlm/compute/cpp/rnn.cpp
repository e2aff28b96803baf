// The tanh RNN's loops for CPU tensors: the scan's forward and backward and the advance by one token of
// rnnlm/models/cells/rnn.py (its Python twin, with the same inputs, outputs and maths), registered as "rnn".

#include "kernels.h"

namespace rnnlm::cells::rnn {
namespace {

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
  const NarrowProduct times_hh(weight_hh, B, T);
  Tensor h = h0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(products.scalar_type(), "rnn_forward", [&] {
    const scalar_t* bias_p = bias.data_ptr<scalar_t>();
    // step t's rows by pointer arithmetic: a tensor view per time step costs a dispatch each
    scalar_t* a_p = activations.data_ptr<scalar_t>();
    scalar_t* hs_p = hs.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      Tensor hidden = times_hh(h);  // (B, H) = h_prev W_hh^T
      const scalar_t* hid_p = hidden.data_ptr<scalar_t>();
      scalar_t* a_t = a_p + t * B * H;  // the products, overwritten with the activations
      scalar_t* hs_t = hs_p + t * B * H;
      for_rows(B, H, [&](int64_t b) {
        const int64_t row = b * H;
        const scalar_t* mask = mask_row<scalar_t>(masks, t, b, B, H);
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto a = (load(a_t + row + j, n) + load(bias_p + j, n) + load(hid_p + row + j, n)).tanh();
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
  const NarrowProduct times_hh_t(weight_hh.t(), B, T);
  Tensor grad_h = at::zeros({B, H}, activations.options());
  AT_DISPATCH_FLOATING_TYPES(activations.scalar_type(), "rnn_backward", [&] {
    const Vec<scalar_t> one(1);
    scalar_t* a_p = activations.data_ptr<scalar_t>();
    const scalar_t* go_p = grad_hs.data_ptr<scalar_t>();
    for (int64_t t = T - 1; t >= 0; --t) {
      const scalar_t* gh_p = grad_h.data_ptr<scalar_t>();
      const scalar_t* a_t = a_p + t * B * H;
      scalar_t* gp_t = a_p + t * B * H;  // the activations, overwritten with their gradients
      const scalar_t* go_t = go_p + t * B * H;
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

// ---------------------------------------------------------------- one token, for sampling

// No autograd, nothing saved, the input side already done: gates_x holds the input-side products
// with every bias added, the hidden-side matrices come transposed. One call replaces the five to
// seven ATen calls a Python step makes, most of a time step's time at batch 1 for the smaller models.

// gates_x (B, H), h (B, H), hh_t (H, H) -> the new h (B, H).
Tensor rnn_advance(const Tensor& gates_x, const Tensor& h, const Tensor& hh_t) {
  if (!narrow_uses_onednn(h, hh_t)) return at::addmm(gates_x, h, hh_t).tanh_();
  return narrow_product(h, hh_t).add_(gates_x).tanh_();
}

std::vector<Tensor> layer_advance(const Tensor& gates_x, const std::vector<Tensor>& state, const std::vector<Tensor>& hidden_t) {
  const Tensor h = state.empty() ? at::zeros({gates_x.size(0), hidden_t[0].size(0)}, gates_x.options()) : state[0];
  return {rnn_advance(gates_x, h, hidden_t[0])};
}

void bind(pybind11::module_& m) {
  m.def("rnn_forward", &rnn_forward);
  m.def("rnn_backward", &rnn_backward);
  m.def("rnn_advance", &rnn_advance);
}

const RegisterCell registered("rnn", {&layer_advance, &bind});

}  // namespace
}  // namespace rnnlm::cells::rnn
