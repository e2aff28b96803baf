// What the cells' compiled loops share (gru.cpp, lstm.cpp, rnn.cpp and
// generation.cpp beside this file): vectorised row helpers, the hidden-side product, and the registry
// through which each cell's file makes its loops known by name.
//
// Each cell's file has the same inputs, outputs and maths as its Python loops (tests hold the two to
// each other and to the cell's readable `recur`). Like them, a forward overwrites its input products
// with the activated gates and a backward overwrites those with the gates' gradients: each
// (T, B, G*H) array is written once, in memory that is already mapped and warm. What changes:
// - each time step's elementwise work is one pass over its rows (where the Python loop makes five
//   to ten ATen calls), with ATen's vectorised exp/tanh (at::vec::Vectorized, the code behind
//   torch.sigmoid and torch.tanh) and at::parallel_for over the batch rows;
// - the matrix products go through the float32 GEMM that rnnlm.compute.backend chose for this machine's
//   per-time-step products (MKL or oneDNN, both exact float32; set_gemm below), the hidden-side one of a
//   scan packed once per sequence into the GEMM's own layout (NarrowProduct).
//
// Shapes: T time steps, B batch, H hidden units, G gates; all arrays time-major and contiguous.

#pragma once

// ATen and pybind11 with PyTorch's tensor casters, not <torch/extension.h>: that header also pulls in
// the whole C++ frontend (modules, optimisers), which nothing here uses and which tripled each file's
// compile time (39 s of parsing per file on a 2-core AMD EPYC).
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace rnnlm {

using at::Tensor;
template <typename scalar_t>
using Vec = at::vec::Vectorized<scalar_t>;

// A batch row per task; a chunk of rows runs on one thread when a time step has enough work to share.
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

// mask (T, B, H) at time step t, row b, or nullptr.
template <typename scalar_t>
inline const scalar_t* mask_row(const std::optional<Tensor>& masks, int64_t t, int64_t b, int64_t B, int64_t H) {
  return masks ? masks->data_ptr<scalar_t>() + (t * B + b) * H : nullptr;
}

inline std::optional<Tensor> contiguous(const std::optional<Tensor>& t) {
  return t ? std::optional<Tensor>(t->contiguous()) : std::nullopt;
}

// The arrays written in place must be contiguous: a copy would leave the caller's tensor unchanged.
inline void check_in_place(const Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous: it is overwritten in place");
}

// The pre-activation lanes j..j+n of one row: x + bias + hidden (bias is null when the input
// products already carry the biases, as in the sampling advance).
template <typename scalar_t>
inline Vec<scalar_t> pre_activation(const scalar_t* x, const scalar_t* bias, const scalar_t* hidden, int64_t j, int64_t n) {
  auto pre = load(x + j, n);
  if (bias) pre = pre + load(bias + j, n);
  return pre + load(hidden + j, n);
}

// The gradient w.r.t. a time step's new state before its mask, lanes j..j+n of one row:
// (output gradient + the gradient from_later, back from the next time step) * mask (mask may be null).
template <typename scalar_t>
inline Vec<scalar_t> grad_into_state(const scalar_t* grad_out, const scalar_t* from_later, const scalar_t* mask, int64_t j, int64_t n) {
  auto grad = load(grad_out + j, n) + load(from_later + j, n);
  return mask ? grad * load(mask + j, n) : grad;
}

// The same with the gradient from the later time step in two parts (the GRU's: through its direct
// paths, and through its r, z product, which arrives one pass later).
template <typename scalar_t>
inline Vec<scalar_t> grad_into_state(const scalar_t* grad_out, const scalar_t* from_later, const scalar_t* from_later_too,
                                     const scalar_t* mask, int64_t j, int64_t n) {
  auto grad = load(grad_out + j, n) + load(from_later + j, n) + load(from_later_too + j, n);
  return mask ? grad * load(mask + j, n) : grad;
}

// ---------------------------------------------------------------- products

// Which library runs the float32 products of one time step (float64 always runs ATen's own, MKL's
// where it is built): one for a product of one row (batch 1: the stateful pass, sampling one stream)
// of at least min_onednn_macs multiply-adds, one for every other; from how many multiply-adds a single
// product goes to oneDNN when it is chosen, and from how many it may use the thread pool:
// rnnlm.compute.backend decides them all (its GEMM rule, its MIN_ONEDNN_MACS and
// MIN_PARALLEL_NARROW_MACS) and hands them over in one call, set_gemm. Until then every product runs
// through MKL, on the thread pool.
enum class Gemm { mkl, onednn };

// Each library "mkl" or "onednn".
void set_gemm(const std::string& narrow, const std::string& one_row, int64_t min_onednn_macs, int64_t min_parallel_macs);
std::string gemm_name();
std::string one_row_gemm_name();
int64_t min_onednn_macs();
int64_t min_parallel_macs();

// While one lives, the products and ATen loops this thread starts run on this thread alone: OpenMP's
// team size for this thread (what ATen's parallel_for, oneDNN and PyTorch's OpenMP-threaded MKL read)
// is set to 1, and put back when it ends. Inactive (`active` false), it changes nothing. For a
// product of fewer than min_parallel_macs multiply-adds: a parallel region costs more than it saves
// there, and where another process holds the other cores it waits for a thread that is not running.
class OnCallingThread {
 public:
  explicit OnCallingThread(bool active);
  ~OnCallingThread();
  OnCallingThread(const OnCallingThread&) = delete;
  OnCallingThread& operator=(const OnCallingThread&) = delete;

 private:
  bool active_;
  int omp_before_ = 0;
};

// Whether a product of `macs` multiply-adds runs on the calling thread (fewer than min_parallel_macs).
bool on_calling_thread(int64_t macs);

// Whether one time step's product x (B, K) w_t (K, N) runs through oneDNN: float32, oneDNN chosen for its
// kind (one row or more), and at least min_onednn_macs multiply-adds (the same rule as
// rnnlm.compute.backend.onednn_for).
bool narrow_uses_onednn(const Tensor& x, const Tensor& w_t);

// x (B, K) -> x W^T (B, N) for one matrix W (N, K) used at each of `time_steps` time steps. For float32, W is
// reordered once into the chosen GEMM's packed layout (about the cost of two products; the ops
// PyTorch's own CPU compiler uses for frozen linear layers) when the sequence is long enough to
// repay it, and each product reuses it; otherwise (float64, a prompt of a few tokens, a one-token
// window of the evaluation) W is used as it is.
class NarrowProduct {
 public:
  static constexpr int64_t kMinStepsToPack = 4;

  NarrowProduct(const Tensor& weight, int64_t batch, int64_t time_steps);
  Tensor operator()(const Tensor& x) const;

 private:
  Tensor weight_, packed_;
  int64_t batch_;
  bool onednn_, serial_;  // serial_: on the calling thread (on_calling_thread of one product's work)
};

// One product of the sampling advance, x (B, K) times w_t (K, N), a transposed view of a weight
// (N, K): through oneDNN where narrow_uses_onednn, else at::mm. With `bias` (N): plus the bias.
Tensor narrow_product(const Tensor& x, const Tensor& w_t);
Tensor narrow_linear(const Tensor& bias, const Tensor& x, const Tensor& w_t);

// a (M, N), b (M, K) -> a^T b (N, K) through oneDNN's matmul, which reads a transposed operand in
// place (PyTorch's linear op copies it first); with `c` (N, K): c += a^T b, in place. float32 only,
// and only where PyTorch lets oneDNN's matmul take float32 (rnnlm.compute.backend.onednn_matmul_available:
// on x86, a CPU with AVX-512); called for the large products, whatever set_gemm chose.
Tensor onednn_t_addmm(const std::optional<Tensor>& c, const Tensor& a, const Tensor& b);

// ---------------------------------------------------------------- the registry of cells

// One layer's advance by one token, for the sampling loop: gates_x (B, G*H) the input-side products with
// every bias added, the layer's state entries (h, or h and c; empty means zeros), the hidden-side
// matrices as transposed (H, G*H) views -> the new state entries.
using LayerAdvance = std::vector<Tensor> (*)(const Tensor& gates_x, const std::vector<Tensor>& state,
                                          const std::vector<Tensor>& hidden_t);

// Gives the cell's loops their Python names (NAME_forward, NAME_backward, NAME_advance).
using Bind = void (*)(pybind11::module_& m);

struct CellKernels {
  LayerAdvance advance;
  Bind bind;
};

// Every cell registered so far, by its name in params.yaml.
std::map<std::string, CellKernels>& cell_registry();

// The cell `name`'s kernels; an unknown name is an error naming the registered ones.
const CellKernels& find_cell(const std::string& name);

// A cell's file defines one of these at namespace scope: its kernels join the registry when the
// library loads, so nothing outside the cell's file names it. Its code lives in a namespace of its
// own, rnnlm::cells::NAME (an unnamed one inside it): the build compiles all the units as one, where
// a bare unnamed namespace would be shared by every cell (each has its `bind`, `layer_advance`, ...).
struct RegisterCell {
  RegisterCell(const std::string& name, CellKernels kernels) { cell_registry().emplace(name, kernels); }
};

}  // namespace rnnlm
