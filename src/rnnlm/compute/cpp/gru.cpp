// The GRU's loops for CPU tensors: the scan's forward and backward and the advance by one token of
// rnnlm/models/cells/gru.py (its Python twin, with the same inputs, outputs and maths), registered as "gru".
// Gate order in a row: r, z, n (the candidate).

#include "kernels.h"

namespace rnnlm::cells::gru {
namespace {

// ---------------------------------------------------------------- one row of a forward time step

// The gate maths of one batch row, shared by the scan's forward and the sampling advance. `bias` is
// null for the sampling advance, whose input products already carry the biases; `mask` is null when
// there is no dropout.

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

// ---------------------------------------------------------------- GRU

// products (T, B, 3H), overwritten with the activated gates (r, z, candidate); h0 (B, H);
// weight_hh (3H, H), bias (3H) folded as gru.fold_bias does, masks (T, B, H)?
// -> hs (T, B, H), reset_h (T, B, H) = r * h_prev.
std::tuple<Tensor, Tensor> gru_forward(
    Tensor products, Tensor h0, Tensor weight_hh, Tensor bias_in, std::optional<Tensor> masks) {
  check_in_place(products, "products");
  masks = contiguous(masks);
  const int64_t T = products.size(0), B = products.size(1), H = h0.size(1);
  Tensor& gates = products;  // each lane reads its products before writing its gates
  Tensor reset_h = at::empty({T, B, H}, products.options());
  Tensor hs = at::empty({T, B, H}, products.options());
  const Tensor bias = bias_in.contiguous();  // (3H)
  const NarrowProduct times_rz(weight_hh.slice(0, 0, 2 * H), B, T), times_n(weight_hh.slice(0, 2 * H), B, T);
  Tensor h = h0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(products.scalar_type(), "gru_forward", [&] {
    const scalar_t* bias_p = bias.data_ptr<scalar_t>();
    // step t's rows by pointer arithmetic: a tensor view per time step costs a dispatch each
    scalar_t* gates_p = gates.data_ptr<scalar_t>();
    scalar_t* reset_p = reset_h.data_ptr<scalar_t>();
    scalar_t* hs_p = hs.data_ptr<scalar_t>();
    for (int64_t t = 0; t < T; ++t) {
      Tensor hidden_rz = times_rz(h);  // (B, 2H) = h_prev W_rz^T
      const scalar_t* h_p = h.data_ptr<scalar_t>();
      scalar_t* gates_t = gates_p + t * B * 3 * H;
      scalar_t* reset_t = reset_p + t * B * H;
      const scalar_t* hrz_p = hidden_rz.data_ptr<scalar_t>();
      for_rows(B, 3 * H, [&](int64_t b) {
        gru_gates_row(gates_t + b * 3 * H, bias_p, hrz_p + b * 2 * H, gates_t + b * 3 * H, h_p + b * H, reset_t + b * H, H);
      });
      Tensor hidden_n = times_n(reset_h[t]);  // (B, H) = (r * h_prev) W_n^T
      scalar_t* hs_t = hs_p + t * B * H;
      const scalar_t* hn_p = hidden_n.data_ptr<scalar_t>();
      for_rows(B, 3 * H, [&](int64_t b) {
        scalar_t* g = gates_t + b * 3 * H;
        gru_state_row(g + 2 * H, bias_p + 2 * H, hn_p + b * H, g + 2 * H, g + H, h_p + b * H,
                      mask_row<scalar_t>(masks, t, b, B, H), hs_t + b * H, H);
      });
      h = hs[t];
    }
  });
  return {hs, reset_h};
}

// grad_hs (T, B, H), h0, weight_hh, gates, hs, masks as saved by gru_forward; gates is overwritten
// with their gradients w.r.t. the pre-activations -> grad_h0 (B, H).
//
// The two row passes write each time step's gate gradients twice: over the gates (for the weight
// gradients, after the scan) and into dense (B, 2H) and (B, H) arrays, the inputs of the time step's two
// products (oneDNN reads dense rows, and the gates' rows are 3H wide: without them each product
// would copy its slice first). The gradient that reaches h_prev through the r and z product is added
// in the next time step's first pass rather than by a pass of its own.
Tensor gru_backward(
    Tensor grad_hs, Tensor h0, Tensor weight_hh, Tensor gates, Tensor hs, std::optional<Tensor> masks) {
  check_in_place(gates, "gates");
  grad_hs = grad_hs.contiguous();
  masks = contiguous(masks);
  const int64_t T = hs.size(0), B = hs.size(1), H = hs.size(2);
  Tensor& grad_gates = gates;  // each lane reads its gates before writing their gradients
  const NarrowProduct times_rz_t(weight_hh.slice(0, 0, 2 * H).t(), B, T), times_n_t(weight_hh.slice(0, 2 * H).t(), B, T);
  Tensor grad_h = at::zeros({B, H}, hs.options());  // through the direct paths to h_prev
  Tensor through_rz = at::zeros({B, H}, hs.options());  // grad_rz W_rz: through r and z to h_prev
  Tensor grad_rz = at::empty({B, 2 * H}, hs.options()), grad_n = at::empty({B, H}, hs.options());  // dense copies
  Tensor h0c = h0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(hs.scalar_type(), "gru_backward", [&] {
    const Vec<scalar_t> one(1);
    scalar_t* gh_p = grad_h.data_ptr<scalar_t>();
    scalar_t* grz_p = grad_rz.data_ptr<scalar_t>();
    scalar_t* gn_p = grad_n.data_ptr<scalar_t>();
    scalar_t* gates_p = gates.data_ptr<scalar_t>();
    const scalar_t* hs_p = hs.data_ptr<scalar_t>();
    const scalar_t* go_p = grad_hs.data_ptr<scalar_t>();
    for (int64_t t = T - 1; t >= 0; --t) {
      const scalar_t* g_t = gates_p + t * B * 3 * H;
      scalar_t* gg_t = gates_p + t * B * 3 * H;
      const scalar_t* hp_t = t == 0 ? h0c.data_ptr<scalar_t>() : hs_p + (t - 1) * B * H;
      const scalar_t* go_t = go_p + t * B * H;
      const scalar_t* tr_p = through_rz.data_ptr<scalar_t>();
      // gradient w.r.t. the candidate and z; grad_h keeps its direct path (1 - z) * grad
      for_rows(B, 3 * H, [&](int64_t b) {
        const scalar_t* g = g_t + b * 3 * H;
        scalar_t* gg = gg_t + b * 3 * H;
        const scalar_t* mask = mask_row<scalar_t>(masks, t, b, B, H);
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto grad = grad_into_state(go_t + b * H, gh_p + b * H, tr_p + b * H, mask, j, n);
          auto z = load(g + H + j, n), candidate = load(g + 2 * H + j, n);
          auto grad_through_z = grad * z;
          auto grad_candidate = grad_through_z * (one - candidate * candidate);
          auto grad_z = grad * (candidate - load(hp_t + b * H + j, n)) * z * (one - z);
          store(grad_candidate, gg + 2 * H + j, n);
          store(grad_candidate, gn_p + b * H + j, n);
          store(grad_z, gg + H + j, n);
          store(grad_z, grz_p + b * 2 * H + H + j, n);
          store(grad - grad_through_z, gh_p + b * H + j, n);
        });
      });
      Tensor grad_reset_h = times_n_t(grad_n);  // (B, H), w.r.t. r * h_prev
      const scalar_t* grh_p = grad_reset_h.data_ptr<scalar_t>();
      for_rows(B, 3 * H, [&](int64_t b) {
        const scalar_t* g = g_t + b * 3 * H;
        scalar_t* gg = gg_t + b * 3 * H;
        for_lanes<scalar_t>(H, [&](int64_t j, int64_t n) {
          auto r = load(g + j, n), grh = load(grh_p + b * H + j, n);
          auto grad_r = grh * load(hp_t + b * H + j, n) * r * (one - r);
          store(grad_r, gg + j, n);
          store(grad_r, grz_p + b * 2 * H + j, n);
          store(load(gh_p + b * H + j, n) + grh * r, gh_p + b * H + j, n);
        });
      });
      through_rz = times_rz_t(grad_rz);  // (B, H)
    }
  });
  return grad_h.add_(through_rz);
}

// ---------------------------------------------------------------- one token, for sampling

// No autograd, nothing saved, the input side already done: gates_x holds the input-side products
// with every bias added, the hidden-side matrices come transposed. One call replaces the five to
// seven ATen calls a Python step makes, most of a time step's time at batch 1 for the smaller models.

// gates_x (B, 3H), h (B, H), rz_t (H, 2H), n_t (H, H) -> the new h (B, H).
Tensor gru_advance(const Tensor& gates_x_in, const Tensor& h_in, const Tensor& rz_t, const Tensor& n_t) {
  const Tensor gates_x = gates_x_in.contiguous(), h = h_in.contiguous();
  const int64_t B = h.size(0), H = h.size(1);
  Tensor rz = narrow_product(h, rz_t);  // (B, 2H), activated in place
  Tensor reset_h = at::empty_like(h);
  Tensor h_new = at::empty_like(h);
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "gru_advance", [&] {
    const scalar_t* gx_p = gates_x.data_ptr<scalar_t>();
    const scalar_t* h_p = h.data_ptr<scalar_t>();
    scalar_t* rz_p = rz.data_ptr<scalar_t>();
    scalar_t* rh_p = reset_h.data_ptr<scalar_t>();
    for_rows(B, 3 * H, [&](int64_t b) {
      scalar_t* rz_b = rz_p + b * 2 * H;  // the hidden-side products, activated in place
      gru_gates_row<scalar_t>(gx_p + b * 3 * H, nullptr, rz_b, rz_b, h_p + b * H, rh_p + b * H, H);
    });
    Tensor hidden_n = narrow_product(reset_h, n_t);  // (B, H)
    const scalar_t* hn_p = hidden_n.data_ptr<scalar_t>();
    scalar_t* out_p = h_new.data_ptr<scalar_t>();
    for_rows(B, 3 * H, [&](int64_t b) {
      gru_state_row<scalar_t>(gx_p + b * 3 * H + 2 * H, nullptr, hn_p + b * H, nullptr, rz_p + b * 2 * H + H, h_p + b * H,
                              nullptr, out_p + b * H, H);
    });
  });
  return h_new;
}

std::vector<Tensor> layer_advance(const Tensor& gates_x, const std::vector<Tensor>& state, const std::vector<Tensor>& hidden_t) {
  const Tensor h = state.empty() ? at::zeros({gates_x.size(0), hidden_t[0].size(0)}, gates_x.options()) : state[0];
  return {gru_advance(gates_x, h, hidden_t[0], hidden_t[1])};
}

void bind(pybind11::module_& m) {
  m.def("gru_forward", &gru_forward);
  m.def("gru_backward", &gru_backward);
  m.def("gru_advance", &gru_advance);
}

const RegisterCell registered("gru", {&layer_advance, &bind});

}  // namespace
}  // namespace rnnlm::cells::gru
